import { defined } from '../../support/defined';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, FAKE_EMBEDDINGS_STATUS, fakeThread, type FakeScenario } from '../../support/fake-upstream';
import { createTestGateway, errorOf, type Tenant, type TestGateway } from '../../support/gateway';
import { seedStore, type SeededStore } from '../../support/vector-stores';

/**
 * The file_search tool in runs, with the official SDK against the real app: the fake model calls
 * the gateway's search function (told to by a `#fake` directive), the gateway searches the run's
 * stores and sends the results back as the tool message, and the model's answer cites them.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;
let store: SeededStore;
let assistantId: string;

const INCLUDE = ['step_details.tool_calls[*].file_search.results[*].content' as const];
const REFUND_CHUNK = 'Refunds are granted within 30 days of purchase.';
const ANSWER = 'You have 30 days 【0†policies.md】.';

/** The model searches for `query`, then answers `reply`. */
const searchThenAnswer = (query: string, reply = ANSWER): FakeScenario[] => [
  { tool_calls: [{ name: 'file_search', arguments: { queries: [query] } }] },
  { reply },
];

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
  store = await seedStore(gateway, tenant, [
    { filename: 'policies.md', chunks: [REFUND_CHUNK, 'Shipping takes five business days.'] },
    { filename: 'office.txt', chunks: ['Our office is in Paris, near the river.'] },
  ]);
  const assistant = await openai.beta.assistants.create({
    model: 'fake-model',
    instructions: 'Answer from the files.',
    tools: [{ type: 'file_search', file_search: { max_num_results: 2 } }],
    tool_resources: { file_search: { vector_store_ids: [store.id] } },
  });
  assistantId = assistant.id;
});
afterAll(() => gateway?.close());

/** The chat requests the fake received for the run whose thread says `marker`. */
const chatRequestsOf = (marker: string) =>
  upstream.requests.filter((request) => request.path.endsWith('/chat/completions') && request.rawBody.includes(marker));

describe('file_search in runs', () => {
  it('searches without the client, shows the search as a step, and cites the file', async () => {
    const marker = `refunds-${crypto.randomUUID()}`;
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: fakeThread(`${marker} How long for refunds?`, searchThenAnswer('refunds days')),
      },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('completed');

    // The model was given the search function, and got the results in the tool message.
    const [first, second] = chatRequestsOf(marker);
    expect(defined(defined(first).body).tools.map((tool: any) => tool.function.name)).toEqual(['file_search']);
    const toolMessage = defined(defined(second).body).messages.find((message: any) => message.role === 'tool');
    expect(toolMessage.content).toContain(`【0†policies.md】\n${REFUND_CHUNK}`);
    // max_num_results of the assistant's tool: two results.
    expect(toolMessage.content).toContain('【1†');
    expect(toolMessage.content).not.toContain('【2†');

    const steps = await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id, order: 'asc' });
    expect(steps.data.map((step) => [step.type, step.status])).toEqual([
      ['tool_calls', 'completed'],
      ['message_creation', 'completed'],
    ]);
    const details = defined(steps.data[0]).step_details;
    expect(details).toMatchObject({
      type: 'tool_calls',
      tool_calls: [{ type: 'file_search', file_search: { ranking_options: { ranker: 'auto', score_threshold: 0 } } }],
    });
    const firstCall = details.type === 'tool_calls' ? defined(details.tool_calls[0]) : null;
    const call = firstCall?.type === 'file_search' ? firstCall : null;
    expect(defined(defined(call).file_search.results)[0]).toEqual({
      file_id: store.fileIds[0],
      file_name: 'policies.md',
      score: 1,
    });
    expect(JSON.stringify(details)).not.toContain('refunds days');

    // With include[], the results' content.
    const included = await openai.beta.threads.runs.steps.retrieve(defined(steps.data[0]).id, {
      thread_id: run.thread_id,
      run_id: run.id,
      include: INCLUDE,
    });
    expect(included.step_details).toMatchObject({
      tool_calls: [
        {
          file_search: {
            results: [{ file_id: store.fileIds[0], content: [{ type: 'text', text: REFUND_CHUNK }] }, {}],
          },
        },
      ],
    });
    const listed = await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id, include: INCLUDE });
    expect(JSON.stringify(listed.data)).toContain(REFUND_CHUNK);

    const messages = await openai.beta.threads.messages.list(run.thread_id);
    const answer = defined(defined(messages.data[0]).content[0]);
    const start = ANSWER.indexOf('【');
    expect(answer).toEqual({
      type: 'text',
      text: {
        value: ANSWER,
        annotations: [
          {
            type: 'file_citation',
            text: '【0†policies.md】',
            start_index: start,
            end_index: start + '【0†policies.md】'.length,
            file_citation: { file_id: store.fileIds[0] },
          },
        ],
      },
    });
    // The run's usage counts both upstream calls.
    expect(defined(run.usage).total_tokens).toBe(
      steps.data.reduce((sum, step) => sum + defined(step.usage).total_tokens, 0),
    );
  });

  it('streams the search step as OpenAI does, with its results’ content when include[] asks', async () => {
    const marker = `stream-${crypto.randomUUID()}`;
    const thread = await openai.beta.threads.create(fakeThread(`${marker} refunds?`, searchThenAnswer('refunds')));
    const stream = openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId, include: INCLUDE });
    const events: { event: string; data: any }[] = [];
    stream.on('event', (event) => events.push(event));
    await stream.finalRun();
    const names = events.map((event) => event.event);
    const toolStep = defined(events.find((event) => event.event === 'thread.run.step.created')).data;
    expect(toolStep.step_details).toEqual({ type: 'tool_calls', tool_calls: [] });
    const delta = defined(events.find((event) => event.event === 'thread.run.step.delta')).data;
    expect(delta.delta.step_details.tool_calls).toEqual([
      { index: 0, id: expect.any(String), type: 'file_search', file_search: {} },
    ]);
    const completed = defined(events.find((event) => event.event === 'thread.run.step.completed')).data;
    expect(completed.id).toBe(toolStep.id);
    expect(completed.step_details.tool_calls[0].file_search.results[0].content).toEqual([
      { type: 'text', text: REFUND_CHUNK },
    ]);
    // One delta for the search, then the answer's message; its citations in a delta before it completes.
    expect(names.filter((name) => name === 'thread.run.step.delta')).toHaveLength(1);
    // The last delta (the SDK's accumulation changes the objects of earlier ones).
    const citation = names.lastIndexOf('thread.message.delta');
    expect(citation).toBeGreaterThan(names.indexOf('thread.run.step.completed'));
    expect(defined(events[citation + 1]).event).toBe('thread.message.completed');
    expect(defined(events[citation]).data.delta.content[0].text.annotations[0]).toMatchObject({
      index: 0,
      type: 'file_citation',
      file_citation: { file_id: store.fileIds[0] },
    });
    expect(names.at(-1)).toBe('thread.run.completed');
    const final = await stream.finalMessages();
    expect(defined(final.at(-1)).content[0]).toMatchObject({
      text: { value: ANSWER, annotations: [{ type: 'file_citation' }] },
    });
  });

  it('asks the client only for its own function when the model also calls one, and sends both back', async () => {
    const marker = `mixed-${crypto.randomUUID()}`;
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [
        { type: 'file_search' },
        { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } },
      ],
    });
    const scenario: FakeScenario[] = [
      {
        tool_calls: [
          { name: 'file_search', arguments: { queries: ['Paris office'] } },
          { name: 'lookup', arguments: {} },
        ],
      },
      { reply: 'Both done.' },
    ];
    // The store comes from the thread's tool resources this time.
    const thread = await openai.beta.threads.create({
      ...fakeThread(`${marker} where?`, scenario),
      tool_resources: { file_search: { vector_store_ids: [store.id] } },
    });
    let run = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistant.id },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('requires_action');
    const required = defined(run.required_action).submit_tool_outputs.tool_calls;
    expect(required.map((call) => call.function.name)).toEqual(['lookup']);
    run = await openai.beta.threads.runs.submitToolOutputsAndPoll(
      run.id,
      { thread_id: thread.id, tool_outputs: [{ tool_call_id: defined(required[0]).id, output: 'looked up' }] },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('completed');
    const last = defined(chatRequestsOf(marker).at(-1));
    const tools = defined(last.body)
      .messages.filter((message: any) => message.role === 'tool')
      .map((message: any) => message.content);
    expect(tools[0]).toContain('Our office is in Paris');
    expect(tools[1]).toBe('looked up');
    const steps = await openai.beta.threads.runs.steps.list(run.id, { thread_id: thread.id, order: 'asc' });
    const details = defined(steps.data[0]).step_details;
    expect(details.type === 'tool_calls' && details.tool_calls.map((call) => call.type)).toEqual([
      'file_search',
      'function',
    ]);
  });

  it('makes the model answer after four rounds of searching, and fails a run whose model will not', async () => {
    const marker = `rounds-${crypto.randomUUID()}`;
    const search: FakeScenario = { tool_calls: [{ name: 'file_search', arguments: { queries: ['refunds'] } }] };
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: fakeThread(marker, [search, search, search, search, search, { reply: 'never' }]),
      },
      { pollIntervalMs: 20 },
    );
    const requests = chatRequestsOf(marker);
    expect(requests.map((request) => defined(request.body).tool_choice)).toEqual([
      'auto',
      'auto',
      'auto',
      'auto',
      'none',
    ]);
    expect(run.status).toBe('failed');
    expect(run.last_error).toEqual({
      code: 'server_error',
      message: expect.stringContaining('called file_search again after 4 rounds'),
    });
    // The four searches are kept, their results numbered through the run.
    const tool = defined(defined(requests[4]).body)
      .messages.filter((message: any) => message.role === 'tool')
      .map((message: any) => message.content);
    // One result a search (only one chunk has the word): numbers 0 to 3.
    expect(tool[3]).toContain('【3†policies.md】');
  });

  it('fails the run saying so when the embeddings provider refuses the query', async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread('search', searchThenAnswer(`${FAKE_EMBEDDINGS_STATUS} 400`)) },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('failed');
    expect(defined(run.last_error).message).toContain('file_search could not embed the query');
  });

  it('tells the model when nothing is found or its arguments are unusable, and goes on', async () => {
    const marker = `nothing-${crypto.randomUUID()}`;
    const assistant = await openai.beta.assistants.create({ model: 'fake-model', tools: [{ type: 'file_search' }] });
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        thread: fakeThread(marker, [
          { tool_calls: [{ name: 'file_search', arguments: 'not json' }] },
          { tool_calls: [{ name: 'file_search', arguments: { queries: ['refunds'] } }] },
          { reply: 'Nothing there.' },
        ]),
      },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('completed');
    const tool = defined(defined(chatRequestsOf(marker)[2]).body)
      .messages.filter((message: any) => message.role === 'tool')
      .map((message: any) => message.content);
    expect(tool[0]).toContain('not valid JSON');
    // No store on the assistant or the thread: nothing to find.
    expect(tool[1]).toBe('The file search found nothing for this query.');
  });

  it('sends back what was searched, queries cut to 4,096 characters, not what the model sent', async () => {
    const marker = `replayed-${crypto.randomUUID()}`;
    const long = `refunds ${'x'.repeat(10_000)}`;
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: fakeThread(marker, [
          { tool_calls: [{ name: 'file_search', arguments: { queries: [long, ' days '] } }] },
          { reply: 'Done.' },
        ]),
      },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('completed');
    const calls = defined(defined(chatRequestsOf(marker)[1]).body).messages.find(
      (message: any) => message.tool_calls,
    ).tool_calls;
    expect(calls[0].function.arguments).toBe(JSON.stringify({ queries: [long.slice(0, 4096), 'days'] }));
  });

  it("counts a turn's rounds together against the answer cap: five queries of 700 KB a round stop the turn in its second", async () => {
    const marker = `capped-${crypto.randomUUID()}`;
    const round: FakeScenario = {
      tool_calls: [{ name: 'file_search' }],
      tool_argument_queries: { count: 5, bytes: 700_000 },
      argument_chunk_chars: 16_384,
    };
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread(marker, [round, round, round, round, { reply: 'Found.' }]) },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('incomplete');
    expect(run.incomplete_details).toEqual({ reason: 'max_completion_tokens' });
    const steps = await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id, order: 'asc' });
    // The second round's two steps are written as its answer ends, in either order.
    expect(steps.data[0]).toMatchObject({ type: 'tool_calls', status: 'completed' });
    expect(
      steps.data
        .slice(1)
        .map((step) => [step.type, step.status])
        .sort(),
    ).toEqual([
      ['message_creation', 'completed'],
      ['tool_calls', 'failed'],
    ]);
    expect(defined(defined(steps.data.find((step) => step.status === 'failed')).last_error).message).toContain(
      'GATEWAY_MAX_ANSWER_BYTES',
    );
    // The second round was sent the first's search as what was searched: kilobytes, not 3.5 MB.
    const requests = chatRequestsOf(marker);
    expect(requests).toHaveLength(2);
    expect(defined(requests[1]).rawBody.length).toBeLessThan(64 * 1024);
  });

  it('forces the search with tool_choice file_search, in the first round only', async () => {
    const marker = `forced-${crypto.randomUUID()}`;
    // No directive for the first round: the fake calls the forced function with example arguments.
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        tool_choice: { type: 'file_search' },
        thread: { messages: [{ role: 'user', content: `${marker} refunds` }] },
      },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('completed');
    const requests = chatRequestsOf(marker);
    expect(requests.map((request) => defined(request.body).tool_choice)).toEqual([
      { type: 'function', function: { name: 'file_search' } },
      'auto',
    ]);
    expect(run.tool_choice).toEqual({ type: 'file_search' });
  });

  it('refuses a function tool named as the search function beside file_search', async () => {
    const response = await gateway.request('/v1/threads/runs', {
      key: tenant.workspaceKey,
      body: {
        assistant_id: assistantId,
        tools: [{ type: 'file_search' }, { type: 'function', function: { name: 'file_search' } }],
      },
    });
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({ code: 'invalid_value', param: 'tools[1].function.name' });
  });
});
