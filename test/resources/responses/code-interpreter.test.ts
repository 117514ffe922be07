import { defined } from '../../support/defined';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, fakeDirective, type FakeScenario } from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { noSandbox } from '../../../src/sandbox/configured';

/**
 * code_interpreter in the Responses API, with the official SDK against the real app and the real
 * local sandbox: the fake model calls the gateway's `python` function, the gateway runs the code in
 * the response's container and the response goes on to the answer. Containers, through the SDK's
 * `containers` resource.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const AUTO = { type: 'code_interpreter' as const, container: { type: 'auto' as const } };

/** The model runs `code`, then answers `reply`. */
const runThenAnswer = (code: string, reply = 'Done.'): FakeScenario[] => [
  { tool_calls: [{ name: 'python', arguments: { code } }] },
  { reply },
];

/** The input that makes the fake model run `code` and answer `reply`. */
const asking = (code: string, reply?: string) => `Compute, please.\n${fakeDirective(runThenAnswer(code, reply))}`;

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
});
afterAll(() => gateway?.close());

/** The code_interpreter_call items of a response's output. */
const codeCalls = (response: OpenAI.Responses.Response) =>
  response.output.filter(
    (item): item is OpenAI.Responses.ResponseCodeInterpreterToolCall => item.type === 'code_interpreter_call',
  );

describe('code_interpreter in responses', () => {
  it('runs the model’s code in a container and shows it as a code_interpreter_call, outputs only when included', async () => {
    const response = await openai.responses.create({
      model: 'fake-model',
      input: asking('print(2**10)', '2 to the 10th is 1024.'),
      tools: [AUTO],
    });
    expect(response.status).toBe('completed');
    expect(response.output.map((item) => item.type)).toEqual(['code_interpreter_call', 'message']);
    const [call] = codeCalls(response);
    expect(call).toEqual({
      type: 'code_interpreter_call',
      id: expect.stringMatching(/^ci_/),
      status: 'completed',
      container_id: expect.stringMatching(/^cntr_/),
      code: 'print(2**10)',
      outputs: null,
    });
    expect(response.output_text).toBe('2 to the 10th is 1024.');

    const included = await openai.responses.retrieve(response.id, { include: ['code_interpreter_call.outputs'] });
    // `include` on retrieve is what the response was made with: the outputs come with a response that asked.
    expect(codeCalls(included)[0]?.outputs).toBeNull();
    const asked = await openai.responses.create({
      model: 'fake-model',
      input: asking('print(2**10)'),
      tools: [AUTO],
      include: ['code_interpreter_call.outputs'],
    });
    expect(codeCalls(asked)[0]?.outputs).toEqual([{ type: 'logs', logs: '1024\n' }]);

    // The container is the workspace's, with its thread's name.
    const container = await openai.containers.retrieve(defined(call).container_id);
    expect(container).toMatchObject({ object: 'container', status: 'running' });
  });

  it('keeps state across the responses of a conversation, in one container, whose items show the calls', async () => {
    const conversation = await openai.conversations.create({});
    const first = await openai.responses.create({
      model: 'fake-model',
      conversation: conversation.id,
      input: asking('x = 41'),
      tools: [AUTO],
    });
    const second = await openai.responses.create({
      model: 'fake-model',
      conversation: conversation.id,
      input: asking('print(x + 1)'),
      tools: [AUTO],
      include: ['code_interpreter_call.outputs'],
    });
    const [one, two] = [codeCalls(first)[0], codeCalls(second)[0]];
    expect(two?.outputs).toEqual([{ type: 'logs', logs: '42\n' }]);
    expect(two?.container_id).toBe(one?.container_id);

    const items = await openai.conversations.items.list(conversation.id, { order: 'asc' });
    const calls = items.data.filter((item) => item.type === 'code_interpreter_call');
    expect(calls.map((item) => item.type === 'code_interpreter_call' && item.code)).toEqual(['x = 41', 'print(x + 1)']);
    expect(items.data.some((item) => item.type === 'function_call')).toBe(false);
    // An item is retrieved by its id.
    const item = await openai.conversations.items.retrieve(defined(calls[0]).id, { conversation_id: conversation.id });
    expect(item).toMatchObject({ type: 'code_interpreter_call', container_id: one?.container_id });
  });

  it('keeps state along a previous_response_id chain, and takes its output back as input without running it again', async () => {
    const first = await openai.responses.create({ model: 'fake-model', input: asking('y = 6 * 7'), tools: [AUTO] });
    const second = await openai.responses.create({
      model: 'fake-model',
      previous_response_id: first.id,
      input: [...first.output, { role: 'user', content: asking('print(y)') }] as OpenAI.Responses.ResponseInput,
      tools: [AUTO],
      include: ['code_interpreter_call.outputs'],
    });
    expect(second.status).toBe('completed');
    expect(codeCalls(second).map((call) => call.outputs)).toEqual([[{ type: 'logs', logs: '42\n' }]]);
    expect(codeCalls(second)[0]?.container_id).toBe(codeCalls(first)[0]?.container_id);
  });

  it('reads a CSV given in container.file_ids with pandas', async () => {
    const file = await openai.files.create({
      file: await toFile(Buffer.from('city,temp\nParis,21\nRome,27\n'), 'temps.csv'),
      purpose: 'user_data',
    });
    const response = await openai.responses.create({
      model: 'fake-model',
      input: asking("import pandas as pd\nprint(pd.read_csv('/mnt/data/temps.csv')['temp'].mean())"),
      tools: [{ type: 'code_interpreter', container: { type: 'auto', file_ids: [file.id] } }],
      include: ['code_interpreter_call.outputs'],
    });
    expect(codeCalls(response)[0]?.outputs).toEqual([{ type: 'logs', logs: '24.0\n' }]);
    // The file is one of the container's, as the user's.
    const files = await openai.containers.files.list(defined(codeCalls(response)[0]).container_id);
    expect(files.data).toEqual([
      expect.objectContaining({
        id: file.id,
        path: '/mnt/data/temps.csv',
        source: 'user',
        container_id: expect.any(String),
      }),
    ]);
  });

  it('runs a prompt’s code_interpreter (an assistant’s) in an auto container, with the assistant’s files', async () => {
    const file = await openai.files.create({
      file: await toFile(Buffer.from('n\n5\n'), 'n.csv'),
      purpose: 'assistants',
    });
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'code_interpreter' }],
      tool_resources: { code_interpreter: { file_ids: [file.id] } },
    });
    const response = await openai.responses.create({
      prompt: { id: assistant.id },
      input: asking("print(open('/mnt/data/n.csv').read().split()[1])"),
      include: ['code_interpreter_call.outputs'],
    });
    expect(response.tools).toEqual([{ type: 'code_interpreter', container: { type: 'auto' } }]);
    expect(codeCalls(response)[0]?.outputs).toEqual([{ type: 'logs', logs: '5\n' }]);
  });

  it('shows a chart as an image output whose url is its file’s content', async () => {
    const response = await openai.responses.create({
      model: 'fake-model',
      input: asking('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()'),
      tools: [AUTO],
      include: ['code_interpreter_call.outputs'],
    });
    const outputs = defined(codeCalls(response)[0]?.outputs);
    const image = outputs.find((output) => output.type === 'image');
    expect(image?.type === 'image' && image.url).toMatch(/^\/v1\/files\/file-[A-Za-z0-9]+\/content$/);
    const png = await gateway.request(image?.type === 'image' ? image.url : '', { key: tenant.workspaceKey });
    expect([...new Uint8Array(await png.arrayBuffer()).slice(0, 8)]).toEqual(PNG_SIGNATURE);
  });

  it('cites a CSV the code wrote as a container_file_citation, downloaded through containers.files.content', async () => {
    const reply = 'Here it is: [out.csv](sandbox:/mnt/data/out.csv).';
    const conversation = await openai.conversations.create();
    const response = await openai.responses.create({
      model: 'fake-model',
      input: asking("open('/mnt/data/out.csv', 'w').write('a,b\\n1,2\\n')", reply),
      tools: [AUTO],
      conversation: conversation.id,
    });
    const containerId = defined(codeCalls(response)[0]).container_id;
    const message = response.output.find((item) => item.type === 'message');
    const part = message?.type === 'message' ? message.content[0] : undefined;
    const link = 'sandbox:/mnt/data/out.csv';
    expect(part?.type === 'output_text' && part.annotations).toEqual([
      {
        type: 'container_file_citation',
        container_id: containerId,
        file_id: expect.stringMatching(/^file-/),
        start_index: reply.indexOf(link),
        end_index: reply.indexOf(link) + link.length,
        filename: 'out.csv',
      },
    ]);
    // The conversation's items show the answer with the same citation (its container read with the message).
    const items = await openai.conversations.items.list(conversation.id, { order: 'asc' });
    const answer = items.data.find((item) => item.type === 'message' && item.role === 'assistant');
    expect(answer?.type === 'message' && answer.content).toEqual(message?.type === 'message' && message.content);
    const cited = part?.type === 'output_text' ? part.annotations[0] : undefined;
    const fileId = cited?.type === 'container_file_citation' ? cited.file_id : '';
    const content = await openai.containers.files.content.retrieve(fileId, { container_id: containerId });
    expect(await content.text()).toBe('a,b\n1,2\n');
    const entry = await openai.containers.files.retrieve(fileId, { container_id: containerId });
    expect(entry).toMatchObject({ object: 'container.file', path: '/mnt/data/out.csv', source: 'assistant', bytes: 8 });
  });

  it('streams the call’s events in the reference’s order, through the SDK’s stream helper', async () => {
    const stream = openai.responses.stream({
      model: 'fake-model',
      input: asking('print(2**10)', 'It is 1024.'),
      tools: [AUTO],
      include: ['code_interpreter_call.outputs'],
    });
    const codes: string[] = [];
    stream.on('response.code_interpreter_call_code.delta', (event) => codes.push(event.delta));
    const final = await stream.finalResponse();
    expect(codes).toEqual(['print(2**10)']);
    expect(codeCalls(final)[0]?.outputs).toEqual([{ type: 'logs', logs: '1024\n' }]);
    expect(final.output_text).toBe('It is 1024.');
  });

  it('runs in a container named by its id; refuses one of another workspace, and bad shapes, naming the field', async () => {
    const container = await openai.containers.create({ name: 'mine' });
    const response = await openai.responses.create({
      model: 'fake-model',
      input: asking('print(3)'),
      tools: [{ type: 'code_interpreter', container: container.id }],
    });
    expect(codeCalls(response)[0]?.container_id).toBe(container.id);

    const other = await gateway.tenant();
    const theirs = gateway.openai({ 'x-gateway-api-key': other.workspaceKey });
    const post = (body: unknown, key = tenant.workspaceKey) =>
      gateway.request('/v1/responses', {
        method: 'POST',
        key,
        body: { model: 'fake-model', input: 'Hi', ...(body as object) },
      });
    const foreign = await post({ tools: [{ type: 'code_interpreter', container: container.id }] }, other.workspaceKey);
    expect(foreign.status).toBe(404);
    expect(await errorOf(foreign)).toMatchObject({ code: 'container_not_found', param: 'tools[0].container' });
    await expect(theirs.containers.retrieve(container.id)).rejects.toMatchObject({ status: 404 });

    const missing = await post({ tools: [{ type: 'code_interpreter' }] });
    expect(missing.status).toBe(400);
    expect((await errorOf(missing)).param).toBe('tools[0].container');
    const wrong = await post({ tools: [{ type: 'code_interpreter', container: { type: 'auto', file_ids: 'x' } }] });
    expect(wrong.status).toBe(400);
    expect((await errorOf(wrong)).param).toBe('tools[0].container.file_ids');
    const noFile = await post({
      tools: [{ type: 'code_interpreter', container: { type: 'auto', file_ids: ['file-nope'] } }],
    });
    expect(noFile.status).toBe(404);
    expect((await errorOf(noFile)).param).toBe('tools[0].container.file_ids[0]');
  });
});

describe('containers', () => {
  it('are made, listed, read and deleted; their files added, listed, read and taken out', async () => {
    const file = await openai.files.create({
      file: await toFile(Buffer.from('hello'), 'hello.txt'),
      purpose: 'user_data',
    });
    const created = await openai.containers.create({
      name: 'box',
      file_ids: [file.id],
      expires_after: { anchor: 'last_active_at', minutes: 5 },
      memory_limit: '4g',
    });
    expect(created).toEqual({
      id: expect.stringMatching(/^cntr_/),
      object: 'container',
      name: 'box',
      status: 'running',
      created_at: expect.any(Number),
      last_active_at: expect.any(Number),
      expires_after: { anchor: 'last_active_at', minutes: 5 },
      memory_limit: '4g',
    });
    expect(await openai.containers.retrieve(created.id)).toEqual(created);
    const listed = await openai.containers.list({ limit: 100 });
    expect(listed.data.map((one) => one.id)).toContain(created.id);

    const files = await openai.containers.files.list(created.id);
    expect(files.data.map((one) => one.path)).toEqual(['/mnt/data/hello.txt']);
    const content = await openai.containers.files.content.retrieve(file.id, { container_id: created.id });
    expect(await content.text()).toBe('hello');
    await openai.containers.files.delete(file.id, { container_id: created.id });
    expect((await openai.containers.files.list(created.id)).data).toEqual([]);
    const again = await openai.containers.files.create(created.id, { file_id: file.id });
    expect(again).toMatchObject({ id: file.id, source: 'user', path: '/mnt/data/hello.txt' });

    // Another workspace sees none of it.
    const other = await gateway.tenant();
    const theirs = gateway.openai({ 'x-gateway-api-key': other.workspaceKey });
    await expect(theirs.containers.files.list(created.id)).rejects.toMatchObject({ status: 404 });
    await expect(theirs.containers.delete(created.id)).rejects.toMatchObject({ status: 404 });

    await openai.containers.delete(created.id);
    await expect(openai.containers.retrieve(created.id)).rejects.toMatchObject({ status: 404 });
    const bad = await gateway.request('/v1/containers', {
      method: 'POST',
      key: tenant.workspaceKey,
      body: { name: '' },
    });
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).param).toBe('name');
  });
});

describe('without a sandbox', () => {
  it('refuses the tool, naming it, and saying how to enable it', async () => {
    const bare = await createTestGateway({
      deps: { fetch: upstream.fetch, sandbox: noSandbox('no sandbox in this test') },
    });
    try {
      const bareTenant = await bare.tenant();
      await bare.virtualKey(bareTenant, { base_url: 'http://fake.test/v1', default: true });
      const refused = await bare.request('/v1/responses', {
        method: 'POST',
        key: bareTenant.workspaceKey,
        body: { model: 'fake-model', input: 'Hi', tools: [AUTO] },
      });
      expect(refused.status).toBe(400);
      const error = await errorOf(refused);
      expect(error).toMatchObject({ code: 'unsupported_tool', param: 'tools[0]' });
      expect(error.message).toContain('docs/sandbox.md');
      expect(error.message).not.toContain('no sandbox in this test');

      const assistant = await bare.request('/v1/assistants', {
        method: 'POST',
        key: bareTenant.workspaceKey,
        body: { model: 'fake-model', tools: [{ type: 'code_interpreter' }] },
      });
      const { id } = (await json(assistant)) as { id: string };
      const fromPrompt = await bare.request('/v1/responses', {
        method: 'POST',
        key: bareTenant.workspaceKey,
        body: { input: 'Hi', prompt: { id } },
      });
      expect(fromPrompt.status).toBe(400);
      expect(await errorOf(fromPrompt)).toMatchObject({ code: 'unsupported_tool', param: 'prompt.id' });
    } finally {
      await bare.close();
    }
  });
});
