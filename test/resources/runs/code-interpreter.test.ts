import { defined } from '../../support/defined';
import OpenAI, { toFile } from 'openai';
import type { CodeInterpreterToolCall, CodeInterpreterToolCallDelta } from 'openai/resources/beta/threads/runs/steps';
import type { MessageContentDelta } from 'openai/resources/beta/threads/messages';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, fakeThread, type FakeScenario } from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { noSandbox } from '../../../src/sandbox/configured';

/**
 * code_interpreter in runs, with the official SDK against the real app and the real local sandbox
 * (bubblewrap around Python): the fake model calls the gateway's `python` function with the code a
 * `#fake` directive gives, the gateway runs it in the thread's session and sends the outputs back as
 * the tool message, and the run goes on to the model's answer.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** The model runs `code`, then answers `reply`. */
const runThenAnswer = (code: string, reply = 'Done.'): FakeScenario[] => [
  { tool_calls: [{ name: 'python', arguments: { code } }] },
  { reply },
];

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
});
afterAll(() => gateway?.close());

/** The chat requests the fake received for the run whose thread says `marker`. */
const chatRequestsOf = (marker: string) =>
  upstream.requests.filter((request) => request.path.endsWith('/chat/completions') && request.rawBody.includes(marker));

/** The tool message of the request after the code ran: what the model was given back. */
function toolOutputOf(marker: string, index = 1): string {
  const request = defined(chatRequestsOf(marker)[index]);
  const message = defined(request.body).messages.find((one: { role: string }) => one.role === 'tool');
  return defined(message).content;
}

async function codeCallsOf(run: { id: string; thread_id: string }): Promise<CodeInterpreterToolCall[]> {
  const steps = await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id, order: 'asc' });
  return steps.data.flatMap((step) =>
    step.step_details.type === 'tool_calls'
      ? step.step_details.tool_calls.flatMap((call) => (call.type === 'code_interpreter' ? [call] : []))
      : [],
  );
}

const createAndRun = (marker: string, scenario: FakeScenario[], extra: Record<string, unknown> = {}) =>
  openai.beta.threads.createAndRunPoll(
    {
      assistant_id: assistantId,
      thread: fakeThread(`${marker} compute`, scenario),
      ...extra,
    },
    { pollIntervalMs: 20 },
  );

let assistantId: string;
beforeAll(async () => {
  const assistant = await openai.beta.assistants.create({
    model: 'fake-model',
    instructions: 'You are a math tutor: write and run code to answer.',
    tools: [{ type: 'code_interpreter' }],
  });
  assistantId = assistant.id;
});

describe('code_interpreter in runs', () => {
  it('runs the model’s code without the client, shows it as a step, and goes on to the answer', async () => {
    const marker = `math-${crypto.randomUUID()}`;
    const run = await createAndRun(marker, runThenAnswer('print(2**10)', '2 to the 10th is 1024.'));
    expect(run.status).toBe('completed');

    // The model was given the python function, and got the code's output back in the tool message.
    const [first] = chatRequestsOf(marker);
    expect(defined(defined(first).body).tools.map((tool: any) => tool.function.name)).toEqual(['python']);
    expect(toolOutputOf(marker)).toBe('1024');

    const calls = await codeCallsOf(run);
    expect(calls).toEqual([
      {
        id: expect.any(String),
        type: 'code_interpreter',
        code_interpreter: { input: 'print(2**10)', outputs: [{ type: 'logs', logs: '1024\n' }] },
      },
    ]);
    const messages = await openai.beta.threads.messages.list(run.thread_id, { run_id: run.id });
    expect(messages.data.map((message) => message.content)).toEqual([
      [{ type: 'text', text: { value: '2 to the 10th is 1024.', annotations: [] } }],
    ]);
  });

  it('keeps the session’s variables between runs of one thread', async () => {
    const marker = `state-${crypto.randomUUID()}`;
    const first = await createAndRun(marker, runThenAnswer('x = 41'));
    expect(first.status).toBe('completed');
    await openai.beta.threads.messages.create(first.thread_id, {
      role: 'user',
      content: `${marker} again\n#fake ${JSON.stringify(runThenAnswer('print(x + 1)'))}`,
    });
    const second = await openai.beta.threads.runs.createAndPoll(
      first.thread_id,
      { assistant_id: assistantId },
      { pollIntervalMs: 20 },
    );
    expect(second.status).toBe('completed');
    expect((await codeCallsOf(second))[0]?.code_interpreter.outputs).toEqual([{ type: 'logs', logs: '42\n' }]);
  });

  it('puts the run’s files in /mnt/data under their names: a CSV read with pandas', async () => {
    const marker = `csv-${crypto.randomUUID()}`;
    const csv = await openai.files.create({
      file: await toFile(Buffer.from('name,score\nada,3\nbob,4\n'), 'scores.csv'),
      purpose: 'assistants',
    });
    const code = "import pandas as pd\ndf = pd.read_csv('/mnt/data/scores.csv')\nprint(df['score'].sum())";
    const run = await createAndRun(marker, runThenAnswer(code), {
      tool_resources: { code_interpreter: { file_ids: [csv.id] } },
    });
    expect(run.status).toBe('completed');
    expect((await codeCallsOf(run))[0]?.code_interpreter.outputs).toEqual([{ type: 'logs', logs: '7\n' }]);

    // A message's attachment for code_interpreter is put in too.
    const note = await openai.files.create({
      file: await toFile(Buffer.from('hello from a note'), 'note.txt'),
      purpose: 'assistants',
    });
    const attached = `attached-${crypto.randomUUID()}`;
    const thread = await openai.beta.threads.create({
      messages: [
        {
          role: 'user',
          content: `${attached}\n#fake ${JSON.stringify(runThenAnswer("print(open('/mnt/data/note.txt').read())"))}`,
          attachments: [{ file_id: note.id, tools: [{ type: 'code_interpreter' }] }],
        },
      ],
    });
    const second = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistantId },
      { pollIntervalMs: 20 },
    );
    expect(second.status).toBe('completed');
    expect((await codeCallsOf(second))[0]?.code_interpreter.outputs).toEqual([
      { type: 'logs', logs: 'hello from a note\n' },
    ]);
  });

  it('puts a file into the thread’s session once: a later run finds the session’s copy as the code left it', async () => {
    const marker = `once-${crypto.randomUUID()}`;
    const csv = await openai.files.create({
      file: await toFile(Buffer.from('n\n1\n2\n'), 'numbers.csv'),
      purpose: 'assistants',
    });
    const append = "open('/mnt/data/numbers.csv', 'a').write('3\\n')";
    const thread = await openai.beta.threads.create({
      ...fakeThread(`${marker} add`, runThenAnswer(append)),
      tool_resources: { code_interpreter: { file_ids: [csv.id] } },
    });
    const run = () =>
      openai.beta.threads.runs.createAndPoll(thread.id, { assistant_id: assistantId }, { pollIntervalMs: 20 });
    expect((await run()).status).toBe('completed');
    await openai.beta.threads.messages.create(thread.id, {
      role: 'user',
      content: `${marker} count\n#fake ${JSON.stringify(runThenAnswer("print(open('/mnt/data/numbers.csv').read().split())"))}`,
    });
    const second = await run();
    expect(second.status).toBe('completed');
    // Put in again, the file would have its three lines: the session kept the line the first run added.
    expect((await codeCallsOf(second))[0]?.code_interpreter.outputs).toEqual([
      { type: 'logs', logs: "['n', '1', '2', '3']\n" },
    ]);
  });

  it('stores a matplotlib chart as an image file and a file the code wrote, and tells the model their ids', async () => {
    const marker = `chart-${crypto.randomUUID()}`;
    const code = [
      'import matplotlib.pyplot as plt',
      'plt.plot([1, 2, 3], [2, 4, 8])',
      "open('/mnt/data/out.csv', 'w').write('a,b\\n1,2\\n')",
    ].join('\n');
    const reply = 'Here it is: [out.csv](sandbox:/mnt/data/out.csv), not sandbox:/mnt/data/other.csv.';
    const run = await createAndRun(marker, runThenAnswer(code, reply));
    expect(run.status).toBe('completed');
    const [call] = await codeCallsOf(run);
    const image = defined(call).code_interpreter.outputs.find((output) => output.type === 'image');
    if (image?.type !== 'image') throw new Error('no image output');
    const fileId = image.image.file_id;

    const file = await openai.files.retrieve(fileId);
    expect(file).toMatchObject({ purpose: 'assistants_output', filename: 'image.png' });
    const content = new Uint8Array(await (await openai.files.content(fileId)).arrayBuffer());
    expect([...content.subarray(0, 8)]).toEqual(PNG_SIGNATURE);

    const output = toolOutputOf(marker);
    expect(output).toContain(`Image shown to the user as ${fileId}.`);
    const written = /File \/mnt\/data\/out\.csv saved as (file-[\w-]+)\./.exec(output);
    const writtenId = defined(defined(written)[1]);
    expect(await openai.files.retrieve(writtenId)).toMatchObject({ purpose: 'assistants_output', filename: 'out.csv' });
    expect(await (await openai.files.content(writtenId)).text()).toBe('a,b\n1,2\n');

    // The answer's link to the written file is a file_path annotation; a link to no such file is not.
    const [message] = (await openai.beta.threads.messages.list(run.thread_id, { run_id: run.id })).data;
    const link = 'sandbox:/mnt/data/out.csv';
    // The figure is shown before the text, as OpenAI's answer shows it.
    expect(defined(message).content).toEqual([
      { type: 'image_file', image_file: { file_id: fileId } },
      {
        type: 'text',
        text: {
          value: reply,
          annotations: [
            {
              type: 'file_path',
              text: link,
              start_index: reply.indexOf(link),
              end_index: reply.indexOf(link) + link.length,
              file_path: { file_id: writtenId },
            },
          ],
        },
      },
    ]);
  });

  it('streams a figure as an image_file part before the text, and tells the model of it in later turns', async () => {
    const marker = `figure-${crypto.randomUUID()}`;
    const code = 'import matplotlib.pyplot as plt\nplt.bar([1, 2], [3, 4])';
    const thread = await openai.beta.threads.create(fakeThread(`${marker} draw`, runThenAnswer(code, 'A bar chart.')));
    const stream = openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId });
    const deltas: MessageContentDelta[] = [];
    stream.on('messageDelta', (delta) => deltas.push(...(delta.content ?? [])));
    const run = await stream.finalRun();
    expect(run.status).toBe('completed');
    const image = (await codeCallsOf(run))[0]?.code_interpreter.outputs.find((output) => output.type === 'image');
    if (image?.type !== 'image') throw new Error('no image output');
    const fileId = image.image.file_id;
    const figure = { type: 'image_file', image_file: { file_id: fileId } };
    // The figure's delta first (index 0), then the text's (index 1).
    expect(deltas[0]).toEqual({ index: 0, ...figure });
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.slice(1)).toEqual(deltas.slice(1).map(() => expect.objectContaining({ index: 1, type: 'text' })));
    const answer = [figure, { type: 'text', text: { value: 'A bar chart.', annotations: [] } }];
    // The SDK's snapshot, built from the deltas (it keeps their indices), and the message as stored.
    expect(defined((await stream.finalMessages())[0]).content).toMatchObject(answer);
    const [listed] = (await openai.beta.threads.messages.list(thread.id, { run_id: run.id })).data;
    expect(defined(listed).content).toEqual(answer);

    // As a conversation's items, the answer is its text: a message item holds no figure.
    const items = await openai.conversations.items.list(thread.id);
    const item = items.data.find((one) => one.type === 'message' && one.id === defined(listed).id);
    expect(item).toMatchObject({ content: [{ type: 'output_text', text: 'A bar chart.' }] });
    expect(item?.type === 'message' && item.content).toHaveLength(1);

    // The next run's prompt gives that answer as text, saying which image it showed.
    await openai.beta.threads.messages.create(thread.id, { role: 'user', content: `${marker} again` });
    const next = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistantId },
      { pollIntervalMs: 20 },
    );
    expect(next.status).toBe('completed');
    const request = defined(chatRequestsOf(marker).at(-1));
    const said = defined(request.body)
      .messages.filter((one: { role: string }) => one.role === 'assistant')
      .at(-1);
    expect(defined(said).content).toBe(`[Image ${fileId} shown to the user]\nA bar chart.`);
  });

  it('tells the model the error of code that raises, and the run goes on', async () => {
    const marker = `raise-${crypto.randomUUID()}`;
    const run = await createAndRun(marker, runThenAnswer('1 / 0', 'It cannot be divided.'));
    expect(run.status).toBe('completed');
    const [call] = await codeCallsOf(run);
    const logs = defined(call).code_interpreter.outputs[0];
    expect(logs).toMatchObject({ type: 'logs', logs: expect.stringContaining('ZeroDivisionError') });
    expect(toolOutputOf(marker)).toContain('ZeroDivisionError: division by zero');
  });

  it('streams the call: created empty, its input, then its outputs, through the SDK’s handlers', async () => {
    const marker = `stream-${crypto.randomUUID()}`;
    const thread = await openai.beta.threads.create(fakeThread(`${marker} go`, runThenAnswer('print(6 * 7)')));
    const stream = openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId });
    const created: string[] = [];
    const deltas: CodeInterpreterToolCallDelta[] = [];
    stream.on('toolCallCreated', (call) => created.push(call.type));
    stream.on('toolCallDelta', (delta) => {
      if (delta.type === 'code_interpreter') deltas.push(delta);
    });
    const run = await stream.finalRun();
    expect(run.status).toBe('completed');
    // The call's first delta (input '' and no outputs) is the SDK's toolCallCreated; the rest are deltas.
    expect(created).toEqual(['code_interpreter']);
    expect(deltas.map((delta) => delta.code_interpreter)).toEqual([
      { input: 'print(6 * 7)' },
      { outputs: [{ index: 0, type: 'logs', logs: '42\n' }] },
    ]);
    // The step as it completed, and as stored.
    expect((await codeCallsOf(run))[0]?.code_interpreter).toEqual({
      input: 'print(6 * 7)',
      outputs: [{ type: 'logs', logs: '42\n' }],
    });
    expect(await stream.finalMessages()).toHaveLength(1);
  });

  it('refuses an attachment for code_interpreter of a file the workspace does not have', async () => {
    const thread = await openai.beta.threads.create();
    const response = await gateway.request(`/v1/threads/${thread.id}/messages`, {
      key: tenant.workspaceKey,
      headers: { 'openai-beta': 'assistants=v2' },
      body: {
        role: 'user',
        content: 'x',
        attachments: [{ file_id: 'file-nope', tools: [{ type: 'code_interpreter' }] }],
      },
    });
    expect(await errorOf(response)).toMatchObject({
      status: 404,
      code: 'file_not_found',
      param: 'attachments[0].file_id',
    });
    expect((await openai.beta.threads.messages.list(thread.id)).data).toEqual([]);
  });

  it('stops the code of a run cancelled while it runs', async () => {
    const marker = `cancel-${crypto.randomUUID()}`;
    const run = await openai.beta.threads.createAndRun({
      assistant_id: assistantId,
      thread: fakeThread(`${marker} wait`, runThenAnswer('import time\ntime.sleep(120)')),
    });
    // The call's step is there once the model has called: the code is starting or running.
    await expect
      .poll(async () => (await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id })).data.length, {
        timeout: 20_000,
        interval: 50,
      })
      .toBeGreaterThan(0);
    const started = Date.now();
    await openai.beta.threads.runs.cancel(run.id, { thread_id: run.thread_id });
    await expect
      .poll(async () => (await openai.beta.threads.runs.retrieve(run.id, { thread_id: run.thread_id })).status, {
        timeout: 20_000,
        interval: 50,
      })
      .toBe('cancelled');
    // Well before the code's own end, or the sandbox's wall time (60 s).
    expect(Date.now() - started).toBeLessThan(20_000);
    // The model was never called again.
    expect(chatRequestsOf(marker)).toHaveLength(1);
  });

  it('says on /health that code_interpreter is available', async () => {
    expect(await json(await gateway.request('/health'))).toEqual({ status: 'ok', code_interpreter: true });
  });

  it('refuses a function tool named python beside code_interpreter', async () => {
    const response = await gateway.request('/v1/threads/runs', {
      key: tenant.workspaceKey,
      headers: { 'openai-beta': 'assistants=v2' },
      body: {
        assistant_id: assistantId,
        tools: [{ type: 'code_interpreter' }, { type: 'function', function: { name: 'python' } }],
      },
    });
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({ code: 'invalid_value', param: 'tools[1].function.name' });
  });
});

describe('code_interpreter without a sandbox', () => {
  let bare: TestGateway;
  let bareTenant: Tenant;
  let bareAssistant: string;
  const post = (path: string, body: unknown) =>
    bare.request(path, { key: bareTenant.workspaceKey, headers: { 'openai-beta': 'assistants=v2' }, body });

  beforeAll(async () => {
    bare = await createTestGateway({
      deps: { fetch: upstream.fetch, sandbox: noSandbox('no sandbox in this test') },
    });
    bareTenant = await bare.tenant();
    await bare.virtualKey(bareTenant, { base_url: 'http://fake.test/v1', default: true });
    const created = await post('/v1/assistants', { model: 'fake-model', tools: [{ type: 'code_interpreter' }] });
    expect(created.status).toBe(200);
    bareAssistant = ((await json(created)) as { id: string }).id;
  });
  afterAll(() => bare?.close());

  it('refuses a run with the tool, naming where it comes from and saying how to enable it', async () => {
    const fromRequest = await post('/v1/threads/runs', {
      assistant_id: bareAssistant,
      tools: [{ type: 'function', function: { name: 'f' } }, { type: 'code_interpreter' }],
    });
    expect(fromRequest.status).toBe(400);
    const error = await errorOf(fromRequest);
    expect(error).toMatchObject({ code: 'unsupported_tool', param: 'tools[1]' });
    expect(error.message).toContain('docs/sandbox.md');
    // The reason is the operator's, not the tenant's.
    expect(error.message).not.toContain('no sandbox in this test');

    const fromAssistant = await post('/v1/threads/runs', { assistant_id: bareAssistant });
    expect(fromAssistant.status).toBe(400);
    expect(await errorOf(fromAssistant)).toMatchObject({ code: 'unsupported_tool', param: 'assistant_id' });

    // Without the tool, the assistant runs.
    const without = await post('/v1/threads/runs', { assistant_id: bareAssistant, tools: [] });
    expect(without.status).toBe(200);

    // A run on a thread: the same refusals.
    const thread = (await json(await post('/v1/threads', {}))) as { id: string };
    const onThread = await post(`/v1/threads/${thread.id}/runs`, { assistant_id: bareAssistant });
    expect(await errorOf(onThread)).toMatchObject({ status: 400, code: 'unsupported_tool', param: 'assistant_id' });
    const withTools = await post(`/v1/threads/${thread.id}/runs`, {
      assistant_id: bareAssistant,
      tools: [{ type: 'code_interpreter' }],
    });
    expect(await errorOf(withTools)).toMatchObject({ status: 400, code: 'unsupported_tool', param: 'tools[0]' });
    const attached = await post(`/v1/threads/${thread.id}/runs`, {
      assistant_id: bareAssistant,
      tools: [],
      additional_messages: [
        { role: 'user', content: 'x', attachments: [{ file_id: 'file-x', tools: [{ type: 'code_interpreter' }] }] },
      ],
    });
    expect(await errorOf(attached)).toMatchObject({
      status: 400,
      code: 'unsupported_tool',
      param: 'additional_messages[0].attachments[0].tools[0]',
    });
    const message = await post(`/v1/threads/${thread.id}/messages`, {
      role: 'user',
      content: 'x',
      attachments: [{ file_id: 'file-x', tools: [{ type: 'file_search' }, { type: 'code_interpreter' }] }],
    });
    expect(await errorOf(message)).toMatchObject({ status: 400, param: 'attachments[0].tools[1]' });
  });

  it('refuses attachments for code_interpreter, and says so on /health', async () => {
    const response = await post('/v1/threads', {
      messages: [
        { role: 'user', content: 'hi', attachments: [{ file_id: 'file-x', tools: [{ type: 'code_interpreter' }] }] },
      ],
    });
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({
      code: 'unsupported_tool',
      param: 'messages[0].attachments[0].tools[0]',
    });
    expect(await json(await bare.request('/health'))).toEqual({ status: 'ok', code_interpreter: false });
  });
});
