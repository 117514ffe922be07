import { defined } from '../../support/defined';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServerSentEvent } from '../../../src/deps';
import { TextParts } from '../../../src/lib/text';
import { getRunById, listSteps } from '../../../src/resources/runs/queries';
import { toRunJson, toStepJson } from '../../../src/resources/runs/wire';
import {
  ResponseEvents,
  responseUsage,
  storedSearchQueries,
  type OutputItem,
  type ResponseState,
} from '../../../src/resources/responses/events';
import { createFakeUpstream, fakeDirective, fakeThread, type FakeScenario } from '../../support/fake-upstream';
import { gatewayWithDefaultKey, type Tenant, type TestGateway } from '../../support/gateway';
import { propertyOrder, responseEventComponent, responseStreamEventErrors } from '../../support/openapi';
import { WEATHER_TOOL } from '../../support/runs';
import { parseEventStream } from '../../support/sse';
import { seedStore, type SeededStore } from '../../support/vector-stores';

/**
 * A response's stream of events (src/resources/responses/events.ts), translated from real
 * streamed runs: the gateway executes a run against the fake provider, its Assistants events are
 * captured batch by batch as they leave, and ResponseEvents turns them into the Responses API's.
 * A run whose model calls functions waits for their outputs where a response's hands them over:
 * its capture is made what the engine sends for a response first (handedOver).
 * Each stream is checked against the reference (every event's schema and field order), against
 * the order OpenAI documents (a grammar), for its sequence numbers, for a final output equal to
 * what its deltas built, and by the official SDK's stream helper, which must accept it whole.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;
let store: SeededStore;
let functionsAssistant: string;
let searchAssistant: string;

const TIME_TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_time',
    description: 'The time in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const REFUND_CHUNK = 'Refunds are granted within 30 days of purchase.';
const INCLUDE_CONTENT = 'include[]=step_details.tool_calls[*].file_search.results[*].content';

beforeAll(async () => {
  ({ gateway, tenant, client: openai } = await gatewayWithDefaultKey(upstream.fetch));
  store = await seedStore(gateway, tenant, [
    { filename: 'policies.md', chunks: [REFUND_CHUNK, 'Shipping takes five business days.'] },
  ]);
  functionsAssistant = (await openai.beta.assistants.create({ model: 'fake-model', tools: [WEATHER_TOOL, TIME_TOOL] }))
    .id;
  searchAssistant = (
    await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'file_search', file_search: { max_num_results: 1 } }],
      tool_resources: { file_search: { vector_store_ids: [store.id] } },
    })
  ).id;
});
afterAll(() => gateway?.close());

/** A run's events as they left the gateway (streamedRun), or as the engine sends them for a response (handedOver). */
interface CapturedRun {
  runId: string;
  batches: ServerSentEvent[][];
}

/** A streamed run's events as they left the gateway, one batch per write, their data as written. */
async function streamedRun(
  assistantId: string,
  scenario: FakeScenario | FakeScenario[],
  options: {
    body?: Record<string, unknown>;
    query?: string;
    /** Another gateway than the file's. */
    at?: { gateway: TestGateway; tenant: Tenant; openai: OpenAI };
    /** Called once the run is in progress, before the stream is read further. */
    whileInProgress?: (run: { id: string; thread_id: string }) => Promise<unknown>;
  } = {},
): Promise<CapturedRun> {
  const at = options.at ?? { gateway, tenant, openai };
  const thread = await at.openai.beta.threads.create(fakeThread(`Hello ${crypto.randomUUID()}`, scenario));
  const response = await at.gateway.request(
    `/v1/threads/${thread.id}/runs${options.query ? `?${options.query}` : ''}`,
    {
      method: 'POST',
      key: at.tenant.workspaceKey,
      body: { assistant_id: assistantId, stream: true, ...options.body },
    },
  );
  expect(response.status).toBe(200);
  const batches: ServerSentEvent[][] = [];
  const reader = defined(response.body).pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += value;
    const batch: ServerSentEvent[] = [];
    let end: number;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const [, name = '', data = ''] = /^event: (.*)\ndata: (.*)$/s.exec(buffer.slice(0, end)) ?? [];
      buffer = buffer.slice(end + 2);
      // `done` is the stream's own end (EventStream.close), never sent through a sink.
      if (name !== 'done') batch.push([name, data]);
      if (name === 'thread.run.in_progress') await options.whileInProgress?.(JSON.parse(data));
    }
    if (batch.length > 0) batches.push(batch);
  }
  const created = batches.flat().find(([name]) => name === 'thread.run.created');
  return { runId: (JSON.parse(String(defined(created)[1])) as { id: string }).id, batches };
}

/**
 * What the engine sends for a response whose model calls functions, made from a captured run that
 * waits for their outputs. Where the run asked for them (thread.run.requires_action), a response's
 * run hands them over (engine.ts #finish, TurnAnswer.handOver): in the same batch, its tool step
 * completes with the calls unanswered, then the run completes with the usage it kept. Both events
 * are the wire's own JSON of the rows the run left, changed as the hand-over's commit changes them.
 */
async function handedOver(run: CapturedRun): Promise<CapturedRun> {
  const { db } = gateway.database;
  const waiting = defined(await getRunById(db, run.runId));
  expect(waiting.status).toBe('requires_action');
  const steps = await listSteps(db, run.runId);
  const toolStep = defined(steps.find((step) => step.type === 'tool_calls' && step.status === 'in_progress'));
  const at = Date.now();
  const completed: ServerSentEvent[] = [
    [
      'thread.run.step.completed',
      JSON.stringify(toStepJson({ ...toolStep, status: 'completed', completedAt: at }, waiting)),
    ],
    [
      'thread.run.completed',
      JSON.stringify(toRunJson({ ...waiting, status: 'completed', completedAt: at, requiredAction: null })),
    ],
  ];
  const names = run.batches.flat().map(([name]) => name);
  expect(names.filter((name) => name === 'thread.run.requires_action')).toHaveLength(1);
  return {
    runId: run.runId,
    batches: run.batches.map((batch) =>
      batch.flatMap(([name, data]): ServerSentEvent[] =>
        name === 'thread.run.requires_action' ? completed : [[name, data]],
      ),
    ),
  };
}

/** What a test's `describe` callback makes of a state: a response as the reference types it. */
const describeResponse = (state: ResponseState) => ({
  id: 'resp_test',
  object: 'response',
  created_at: 1_741_487_325,
  status: state.status,
  completed_at: state.completed_at,
  error: state.error,
  incomplete_details: state.incomplete_details,
  instructions: null,
  model: 'fake-model',
  output: state.output,
  parallel_tool_calls: true,
  tool_choice: 'auto',
  tools: [],
  temperature: 1,
  top_p: 1,
  metadata: {},
  ...(state.usage ? { usage: state.usage } : {}),
});

interface Translated {
  /** The batches ResponseEvents sent, as they were sent. */
  batches: ServerSentEvent[][];
  /** The whole stream as its client reads it. */
  text: string;
  events: { event: string; data: any }[];
}

async function translate(run: CapturedRun, options: { includeSearchResults?: boolean } = {}): Promise<Translated> {
  const batches: ServerSentEvent[][] = [];
  const events = new ResponseEvents(
    {
      send: async (batch) => {
        batches.push(batch);
      },
    },
    {
      describe: describeResponse,
      includeSearchResults: options.includeSearchResults,
      searchedQueries: storedSearchQueries(gateway.database.db, run.runId),
    },
  );
  for (const batch of run.batches) await events.send(batch);
  const text = batches
    .flat()
    .map(([name, data]) => `event: ${name}\ndata: ${data instanceof TextParts ? data.toString() : String(data)}\n\n`)
    .join('');
  return { batches, text, events: parseEventStream(text) };
}

// ── What every stream must be ───────────────────────────────────────────────────────────────

/**
 * The order OpenAI documents (the Responses streaming guide, and each event's description in the
 * reference): created, in_progress, then each output item whole, one after the other (added, its
 * parts, done), then the response's end. One letter per event; an item's own sequence in its line.
 */
const TOKENS: Record<string, string> = {
  'response.created': 'C',
  'response.in_progress': 'P',
  'response.output_item.added': 'A',
  'response.content_part.added': 'p',
  'response.output_text.delta': 't',
  'response.output_text.annotation.added': 'n',
  'response.output_text.done': 'T',
  'response.content_part.done': 'q',
  'response.function_call_arguments.delta': 'f',
  'response.function_call_arguments.done': 'F',
  'response.file_search_call.in_progress': 'i',
  'response.file_search_call.searching': 's',
  'response.file_search_call.completed': 'S',
  'response.code_interpreter_call.in_progress': 'j',
  'response.code_interpreter_call_code.delta': 'c',
  'response.code_interpreter_call_code.done': 'K',
  'response.code_interpreter_call.interpreting': 'I',
  'response.code_interpreter_call.completed': 'J',
  'response.output_item.done': 'D',
  'response.reasoning_text.delta': 'r',
  'response.reasoning_text.done': 'R',
  'response.completed': 'Z',
  'response.incomplete': 'Z',
  'response.failed': 'Z',
  error: 'E',
};
const MESSAGE = 'Apt*n*TqD';
const FUNCTION_CALL = 'Af*FD';
// A search that failed has no `completed`.
const FILE_SEARCH = 'AisS?D';
const REASONING = 'Apr*RqD';
// A call cut before its code was known has neither its code nor `completed`.
const CODE = 'Aj(c*KI)?J?D';
const GRAMMAR = new RegExp(`^CP(${MESSAGE}|${FUNCTION_CALL}|${FILE_SEARCH}|${CODE}|${REASONING})*ZE?$`);

describe('the grammar', () => {
  it("accepts OpenAI's documented stream (createResponse's streamed example) and refuses items interleaved", () => {
    const reference = readFileSync(
      new URL('../../fixtures/openai-responses-conversations-openapi.yaml', import.meta.url),
      'utf8',
    );
    const documented = [...reference.matchAll(/event: (response\.[a-z_.]+)/g)].map(([, name]) => defined(name));
    expect(documented.length).toBeGreaterThan(5);
    expect(documented.map((name) => defined(TOKENS[name])).join('')).toMatch(GRAMMAR);
    // A message still open when a call is added, and two calls open at once, are not OpenAI's order.
    expect('CPAptAfTqDFDZ').not.toMatch(GRAMMAR);
    expect('CPAfAfFDFDZ').not.toMatch(GRAMMAR);
  });
});

/** The component each kind of object in a response's output is. */
const ITEM_COMPONENTS: Record<string, string> = {
  message: 'OutputMessage',
  function_call: 'FunctionToolCall',
  file_search_call: 'FileSearchToolCall',
  code_interpreter_call: 'CodeInterpreterToolCall',
  output_text: 'OutputTextContent',
  file_citation: 'FileCitationBody',
  container_file_citation: 'ContainerFileCitationBody',
  reasoning: 'ReasoningItem',
  reasoning_text: 'ReasoningTextContent',
};

/** An output item's fields, and its parts' and annotations', in the reference's order. */
function expectItemOrder(item: any): void {
  const order = propertyOrder(defined(ITEM_COMPONENTS[item.type]));
  expect(Object.keys(item), item.type).toEqual(order.filter((key) => key in item));
  for (const part of item.content ?? []) expectItemOrder(part);
  for (const annotation of item.annotations ?? []) expectItemOrder(annotation);
}

/** The checks every translated stream passes; answers its last response. */
function expectValidStream({ events }: Translated): any {
  // Every event is the reference's, its fields in the reference's order.
  for (const { event, data } of events) {
    expect(responseStreamEventErrors(event, data), event).toEqual([]);
    const order = propertyOrder(responseEventComponent(event));
    expect(Object.keys(data), event).toEqual(order.filter((key) => key in data));
    if (data.item) expectItemOrder(data.item);
    if (data.part) expectItemOrder(data.part);
    if (data.annotation) expectItemOrder(data.annotation);
    for (const item of data.response?.output ?? []) expectItemOrder(item);
  }
  // The documented order, numbered from 0 without a gap.
  const tokens = events.map(({ event }) => defined(TOKENS[event]));
  expect(tokens.join('')).toMatch(GRAMMAR);
  expect(events.map(({ data }) => data.sequence_number)).toEqual(events.map((_, i) => i));

  // Each event of an item names that item, the last added; its deltas make what it ends with.
  const built: OutputItem[] = [];
  let open: any = null;
  let text = '';
  let args = '';
  for (const { event, data } of events) {
    if (event === 'response.output_item.added') {
      expect(data.output_index).toBe(built.length);
      open = data.item;
      text = '';
      args = '';
      continue;
    }
    if ('output_index' in data) expect(data.output_index, event).toBe(built.length);
    if ('item_id' in data) expect(data.item_id, event).toBe(open.id);
    if ('content_index' in data) expect(data.content_index).toBe(0);
    if (event === 'response.output_text.delta' || event === 'response.reasoning_text.delta') text += data.delta;
    if (event === 'response.function_call_arguments.delta' || event === 'response.code_interpreter_call_code.delta')
      args += data.delta;
    if (event === 'response.code_interpreter_call_code.done') expect(data.code).toBe(args);
    if (event === 'response.output_text.done' || event === 'response.reasoning_text.done') expect(data.text).toBe(text);
    if (event === 'response.function_call_arguments.done') expect(data.arguments).toBe(args);
    if (event === 'response.output_item.done') {
      expect(data.item.id).toBe(open.id);
      if (data.item.type === 'message' || data.item.type === 'reasoning') expect(data.item.content[0].text).toBe(text);
      if (data.item.type === 'function_call') expect(data.item.arguments).toBe(args);
      if (data.item.type === 'code_interpreter_call' && data.item.status === 'completed')
        expect(data.item.code).toBe(args);
      built.push(data.item);
    }
  }
  const last = defined(events.findLast(({ event }) => TOKENS[event] === 'Z')).data.response;
  expect(last.output).toEqual(built);
  return last;
}

/** The official SDK's stream helper over the translated stream: its final response and the text its delta handler saw. */
async function throughSdk(translated: Translated) {
  const client = new OpenAI({
    apiKey: 'test',
    baseURL: 'http://responses.test/v1',
    maxRetries: 0,
    fetch: async () =>
      new Response(translated.text + 'event: done\ndata: [DONE]\n\n', {
        headers: { 'content-type': 'text/event-stream' },
      }),
  });
  const stream = client.responses.stream({ model: 'fake-model', input: 'Hello' });
  let deltas = '';
  const snapshots: string[] = [];
  stream.on('response.output_text.delta', (event) => {
    deltas += event.delta;
    snapshots.push(event.snapshot);
  });
  const final = await stream.finalResponse();
  return { final, deltas, snapshots };
}

/** The stream's items by type, in order. */
const itemTypes = (response: any) => response.output.map((item: OutputItem) => [item.type, item.status]);

describe('a response’s events, translated from a run’s', () => {
  it('a text answer: one message, its deltas, completed with the whole output and the usage', async () => {
    const reply = 'Hello there, my "quoted" friend\non two lines.';
    const translated = await translate(await streamedRun(functionsAssistant, { reply }));
    const response = expectValidStream(translated);
    expect(response.status).toBe('completed');
    expect(itemTypes(response)).toEqual([['message', 'completed']]);
    expect(response.output[0].content[0]).toEqual({ type: 'output_text', text: reply, annotations: [], logprobs: [] });
    expect(response.usage).toEqual({
      input_tokens: expect.any(Number),
      input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: expect.any(Number),
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: response.usage.input_tokens + response.usage.output_tokens,
    });
    expect(response.usage.output_tokens).toBeGreaterThan(0);
    expect(response.completed_at).toEqual(expect.any(Number));
    // More than one delta: the text streamed.
    expect(translated.events.filter(({ event }) => event === 'response.output_text.delta').length).toBeGreaterThan(3);

    const sdk = await throughSdk(translated);
    expect(sdk.deltas).toBe(reply);
    expect(sdk.snapshots.at(-1)).toBe(reply);
    expect(sdk.final.output_text).toBe(reply);
    // The SDK adds what it parses (`parsed`, `parsed_arguments`) to what it was sent.
    expect(sdk.final.output).toMatchObject(response.output);
    expect(sdk.final.status).toBe('completed');
  });

  it('keeps the batches: one out for each batch in, the first with created and in_progress', async () => {
    const run = await streamedRun(functionsAssistant, { reply: 'One two three four five.' });
    const sent: number[] = [];
    const events = new ResponseEvents(
      { send: async (batch) => void sent.push(batch.length) },
      { describe: describeResponse },
    );
    for (const batch of run.batches) {
      const before = sent.length;
      await events.send(batch);
      // One write for the batch (none when nothing in it shows in a response).
      expect(sent.length - before).toBeLessThanOrEqual(1);
    }
    // The message opens with its first delta in one write, as the run's did.
    const opening = defined(run.batches.find((batch) => batch.some(([name]) => name === 'thread.message.created')));
    expect(opening.map(([name]) => name)).toContain('thread.message.delta');
    const translated = await translate(run);
    // The batches are the stream's reads: what the run sent between two of them came as one.
    expect(translated.batches[0]?.map(([name]) => name).slice(0, 2)).toEqual([
      'response.created',
      'response.in_progress',
    ]);
    expect(
      translated.batches.some((batch) =>
        batch
          .map(([name]) => name)
          .join()
          .includes('response.output_item.added,response.content_part.added,response.output_text.delta'),
      ),
    ).toBe(true);
    // A delta's event is built as a string (the hot path), never an object.
    const delta = translated.batches.flat().find(([name]) => name === 'response.output_text.delta');
    expect(typeof defined(delta)[1]).toBe('string');
  });

  it('the same events whether the engine’s data comes as JSON text or as objects (the hot path and the general one agree)', async () => {
    const run = await handedOver(
      await streamedRun(functionsAssistant, { reply: 'Same "text" either way.', tool_calls: 1 }),
    );
    const asObjects = run.batches.map((batch) =>
      batch.map(([name, data]): ServerSentEvent => [name, JSON.parse(String(data))]),
    );
    const fromText = await translate(run);
    const fromObjects = await translate({ runId: run.runId, batches: asObjects });
    expect(fromObjects.text).toBe(fromText.text);
    expectValidStream(fromText);
  });

  it('a function call: its item with its arguments streamed, and the response completed with it', async () => {
    const args = { city: 'Paris, "the" city of light' };
    const run = await handedOver(
      await streamedRun(functionsAssistant, {
        tool_calls: [{ name: 'get_weather', arguments: args, id: 'call_weather1' }],
      }),
    );
    const translated = await translate(run);
    const response = expectValidStream(translated);
    expect(response.status).toBe('completed');
    expect(itemTypes(response)).toEqual([['function_call', 'completed']]);
    const step = run.batches
      .flat()
      .filter(([name]) => name === 'thread.run.step.created')
      .map(([, data]) => JSON.parse(String(data)) as { id: string; type: string })
      .find(({ type }) => type === 'tool_calls');
    expect(response.output[0]).toEqual({
      id: `fc_${defined(step).id.slice('step_'.length)}_0`,
      type: 'function_call',
      call_id: 'call_weather1',
      name: 'get_weather',
      arguments: JSON.stringify(args),
      status: 'completed',
    });
    const fragments = translated.events.filter(({ event }) => event === 'response.function_call_arguments.delta');
    expect(fragments.length).toBeGreaterThan(2);

    const sdk = await throughSdk(translated);
    // The SDK adds what it parses (`parsed`, `parsed_arguments`) to what it was sent.
    expect(sdk.final.output).toMatchObject(response.output);
    expect(sdk.final.output_text).toBe('');
  });

  it('parallel function calls, after a text: each item whole before the next begins', async () => {
    const run = await handedOver(
      await streamedRun(functionsAssistant, { reply: 'Let me look both up.', tool_calls: 2 }),
    );
    const translated = await translate(run);
    const response = expectValidStream(translated);
    expect(itemTypes(response)).toEqual([
      ['message', 'completed'],
      ['function_call', 'completed'],
      ['function_call', 'completed'],
    ]);
    expect(response.output.slice(1).map((item: any) => item.name)).toEqual(['get_weather', 'get_time']);
    expect(response.output[1].id).toMatch(/^fc_\w+_0$/);
    expect(response.output[2].id).toBe(response.output[1].id.replace(/_0$/, '_1'));
    expect(new Set(response.output.slice(1).map((item: any) => item.call_id)).size).toBe(2);
    for (const item of response.output.slice(1))
      expect(JSON.parse(item.arguments)).toEqual({ city: expect.any(String) });

    const sdk = await throughSdk(translated);
    // The SDK adds what it parses (`parsed`, `parsed_arguments`) to what it was sent.
    expect(sdk.final.output).toMatchObject(response.output);
    expect(sdk.deltas).toBe('Let me look both up.');
  });

  it('a file search: its call searched, then the answer citing the file', async () => {
    const answer = 'You have 30 days 【0†policies.md】.';
    const run = await streamedRun(
      searchAssistant,
      [{ tool_calls: [{ name: 'file_search', arguments: { queries: ['refunds days'] } }] }, { reply: answer }],
      { query: INCLUDE_CONTENT },
    );
    const translated = await translate(run, { includeSearchResults: true });
    const response = expectValidStream(translated);
    expect(itemTypes(response)).toEqual([
      ['file_search_call', 'completed'],
      ['message', 'completed'],
    ]);
    expect(response.output[0]).toEqual({
      id: expect.stringMatching(/^fs_\w+_0$/),
      type: 'file_search_call',
      status: 'completed',
      queries: ['refunds days'],
      results: [{ file_id: store.fileIds[0], text: REFUND_CHUNK, filename: 'policies.md', score: 1 }],
    });
    expect(response.output[1].content[0]).toEqual({
      type: 'output_text',
      text: answer,
      annotations: [
        { type: 'file_citation', file_id: store.fileIds[0], index: answer.indexOf('【'), filename: 'policies.md' },
      ],
      logprobs: [],
    });
    expect(translated.events.map(({ event }) => event)).toContain('response.output_text.annotation.added');

    // Without include, no results.
    const plain = expectValidStream(await translate(run));
    expect(plain.output[0].results).toBeNull();

    const sdk = await throughSdk(translated);
    // The SDK adds what it parses (`parsed`, `parsed_arguments`) to what it was sent.
    expect(sdk.final.output).toMatchObject(response.output);
    expect(sdk.final.output_text).toBe(answer);
  });

  it('an answer cut by its token cap: incomplete, the message incomplete, the reason max_output_tokens', async () => {
    const run = await streamedRun(functionsAssistant, {
      reply: 'One two three four five six seven eight nine ten.',
      finish_reason: 'length',
    });
    const translated = await translate(run);
    const response = expectValidStream(translated);
    expect(response.status).toBe('incomplete');
    expect(response.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(itemTypes(response)).toEqual([['message', 'incomplete']]);
    expect(translated.events.at(-1)?.event).toBe('response.incomplete');

    const sdk = await throughSdk(translated);
    expect(sdk.final.status).toBe('incomplete');
    // The SDK adds what it parses (`parsed`, `parsed_arguments`) to what it was sent.
    expect(sdk.final.output).toMatchObject(response.output);
  });

  it('a provider that fails mid-answer: failed, what was streamed kept incomplete, the error said', async () => {
    const run = await streamedRun(functionsAssistant, {
      reply: 'One two three four five six seven eight nine ten.',
      error_after_chunks: 4,
    });
    const translated = await translate(run);
    const response = expectValidStream(translated);
    expect(response.status).toBe('failed');
    expect(response.error).toEqual({ code: 'server_error', message: expect.any(String) });
    expect(response.completed_at).toBeNull();
    expect(itemTypes(response)).toEqual([['message', 'incomplete']]);
    expect(response.output[0].content[0].text.length).toBeGreaterThan(0);
    expect(translated.events.find(({ event }) => event === 'response.failed')).toBeDefined();
  });

  it('function calls handed over: the response completed when its run is, with the usage the run kept', async () => {
    const run = await handedOver(await streamedRun(functionsAssistant, { tool_calls: 2 }));
    const ended = defined(run.batches.flat().find(([name]) => name === 'thread.run.completed'));
    const { completed_at, usage } = JSON.parse(String(ended[1]));
    const response = expectValidStream(await translate(run));
    expect(response.status).toBe('completed');
    expect(response.completed_at).toBe(completed_at);
    expect(usage.completion_tokens).toBeGreaterThan(0);
    expect(response.usage).toEqual(responseUsage(usage));
    expect(itemTypes(response)).toEqual([
      ['function_call', 'completed'],
      ['function_call', 'completed'],
    ]);
  });

  it('a real response that calls functions streams what handedOver makes of a run that does (the helper is the engine’s)', async () => {
    const scenario: FakeScenario = {
      reply: 'Let me look both up.',
      tool_calls: [
        { name: 'get_weather', arguments: { city: 'Paris' }, id: 'call_paris' },
        { name: 'get_time', arguments: { city: 'Rome' }, id: 'call_rome' },
      ],
    };
    const derived = await translate(await handedOver(await streamedRun(functionsAssistant, scenario)));
    const expected = expectValidStream(derived);
    const stream = await openai.responses.create({
      model: 'fake-model',
      input: `Hello\n${fakeDirective(scenario)}`,
      tools: [WEATHER_TOOL, TIME_TOOL].map(({ function: { name, parameters } }) => ({
        type: 'function' as const,
        name,
        parameters,
        strict: false,
      })),
      stream: true,
    });
    const events = [];
    for await (const event of stream) events.push(event);
    // Each event, and what it says of the text and the arguments; ids differ (another thread, other steps).
    const said = (event: { type: string; delta?: unknown; arguments?: unknown; text?: unknown }) => [
      event.type,
      event.delta ?? event.arguments ?? event.text ?? null,
    ];
    expect(events.map(said)).toEqual(derived.events.map(({ data }) => said(data)));
    const last = defined(events.at(-1));
    expect(last.type).toBe('response.completed');
    const withoutIds = (output: any[]) => output.map(({ id: _id, ...item }) => item);
    expect(withoutIds(last.type === 'response.completed' ? last.response.output : [])).toEqual(
      withoutIds(expected.output),
    );
  });

  it('a long answer: its text written from its pieces in every event that holds it whole', async () => {
    const run = await streamedRun(functionsAssistant, { stream_bytes: 200_000, chunk_bytes: 4096 });
    // The engine hands a long message over in parts (jsonWithText); the capture has it whole.
    const batches = run.batches.map((batch) =>
      batch.map(([name, data]): ServerSentEvent =>
        name === 'thread.message.completed' ? [name, new TextParts([String(data)])] : [name, data],
      ),
    );
    const translated = await translate({ runId: run.runId, batches });
    const inParts = translated.batches
      .flat()
      .filter(([, data]) => data instanceof TextParts)
      .map(([name]) => name);
    expect(inParts).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const response = expectValidStream(translated);
    const text = response.output[0].content[0].text;
    expect(text.length).toBe(200_000);
    const sdk = await throughSdk(translated);
    expect(sdk.final.output_text).toBe(text);
    expect(sdk.deltas).toBe(text);
  });

  it('a function call cut by the answer cap: the call incomplete, then the empty message the run ends with', async () => {
    const capped = await gatewayWithDefaultKey(upstream.fetch, { GATEWAY_MAX_ANSWER_BYTES: '300' });
    try {
      const assistant = await capped.client.beta.assistants.create({ model: 'fake-model', tools: [WEATHER_TOOL] });
      const run = await streamedRun(
        assistant.id,
        { tool_calls: 1, tool_argument_bytes: 2000 },
        { at: { ...capped, openai: capped.client } },
      );
      const names = run.batches.flat().map(([name]) => name);
      // The engine opens the run's closing message while the call is still open, and fails the call after.
      expect(names.indexOf('thread.message.created')).toBeLessThan(names.indexOf('thread.run.step.failed'));
      const translated = await translate(run);
      const response = expectValidStream(translated);
      expect(response.status).toBe('incomplete');
      expect(itemTypes(response)).toEqual([
        ['function_call', 'incomplete'],
        ['message', 'incomplete'],
      ]);
      expect(response.output[0].arguments.length).toBeGreaterThan(100);
      const sdk = await throughSdk(translated);
      expect(sdk.final.output).toMatchObject(response.output);
    } finally {
      await capped.gateway.close();
    }
  });

  it('a run cancelled while the model thinks: the response ends failed, its status cancelled', async () => {
    const run = await streamedRun(
      functionsAssistant,
      { reply: 'Too late.', hold: `never-${crypto.randomUUID()}` },
      { whileInProgress: (waiting) => openai.beta.threads.runs.cancel(waiting.id, { thread_id: waiting.thread_id }) },
    );
    expect(run.batches.flat().map(([name]) => name)).toContain('thread.run.cancelled');
    const translated = await translate(run);
    const response = expectValidStream(translated);
    expect(response.status).toBe('cancelled');
    expect(response.output).toEqual([]);
    expect(translated.events.at(-1)?.event).toBe('response.failed');
    const sdk = await throughSdk(translated);
    expect(sdk.final.status).toBe('cancelled');
  });

  it('copies a text delta’s JSON string as it came (the hot path), parsing it only to keep the text', async () => {
    const out: ServerSentEvent[] = [];
    const events = new ResponseEvents(
      { send: async (batch) => void out.push(...batch) },
      { describe: describeResponse },
    );
    await events.send([['thread.message.created', '{"id":"msg_1","object":"thread.message"}']]);
    // `\u0041` is "A" written as JSON may write it: copied, it stays so; parsed and written again, it would not.
    const delta =
      '{"id":"msg_1","object":"thread.message.delta","delta":{"content":[{"index":0,"type":"text","text":{"value":"\\u0041b","annotations":[]}}]}}';
    await events.send([['thread.message.delta', delta]]);
    expect(out.at(-1)).toEqual([
      'response.output_text.delta',
      '{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"\\u0041b","sequence_number":2,"logprobs":[]}',
    ]);
    await events.send([['thread.message.completed', '{"id":"msg_1","object":"thread.message"}']]);
    expect(JSON.parse(String(out.find(([name]) => name === 'response.output_text.done')?.[1])).text).toBe('Ab');
  });

  it('an error event: the Responses shape, numbered like the rest', async () => {
    const out: ServerSentEvent[][] = [];
    const events = new ResponseEvents({ send: async (batch) => void out.push(batch) }, { describe: describeResponse });
    await events.send([
      [
        'error',
        { error: { message: 'The server had an error.', type: 'server_error', param: null, code: 'server_error' } },
      ],
    ]);
    const [name, data] = defined(out[0]?.[0]);
    expect(name).toBe('error');
    const parsed = JSON.parse(String(data));
    expect(parsed).toEqual({
      type: 'error',
      code: 'server_error',
      message: 'The server had an error.',
      param: null,
      sequence_number: 0,
    });
    expect(responseStreamEventErrors('error', parsed)).toEqual([]);
  });
});

/** A real response's stream (the engine sends reasoning for responses only), as translate() answers a captured run's. */
async function streamedResponse(body: Record<string, unknown>): Promise<Translated> {
  const response = await gateway.request('/v1/responses', {
    method: 'POST',
    key: tenant.workspaceKey,
    body: { model: 'fake-model', stream: true, ...body },
  });
  expect(response.status).toBe(200);
  const text = await response.text();
  return { batches: [], text, events: parseEventStream(text) };
}

describe('code_interpreter calls', () => {
  it('a call streams its item, its code whole, interpreting, completed; a written file is cited; replayed alike', async () => {
    const reply = 'Written: sandbox:/mnt/data/t.csv';
    const scenario: FakeScenario[] = [
      { tool_calls: [{ name: 'python', arguments: { code: "open('/mnt/data/t.csv', 'w').write('1')\nprint(7)" } }] },
      { reply },
    ];
    const live = await streamedResponse({
      input: `Compute\n${fakeDirective(scenario)}`,
      tools: [{ type: 'code_interpreter', container: { type: 'auto' } }],
      include: ['code_interpreter_call.outputs'],
    });
    const last = expectValidStream(live);
    expect(itemTypes(last)).toEqual([
      ['code_interpreter_call', 'completed'],
      ['message', 'completed'],
    ]);
    expect(live.events.map(({ event }) => event).filter((name) => name.includes('code_interpreter'))).toEqual([
      'response.code_interpreter_call.in_progress',
      'response.code_interpreter_call_code.delta',
      'response.code_interpreter_call_code.done',
      'response.code_interpreter_call.interpreting',
      'response.code_interpreter_call.completed',
    ]);
    expect(last.output[0]).toMatchObject({
      container_id: expect.stringMatching(/^cntr_/),
      outputs: [{ type: 'logs', logs: '7\n' }],
    });
    expect(last.output[1].content[0].annotations).toEqual([
      expect.objectContaining({
        type: 'container_file_citation',
        container_id: last.output[0].container_id,
        filename: 't.csv',
      }),
    ]);
    expect(live.events.filter(({ event }) => event === 'response.output_text.annotation.added')).toHaveLength(1);
    // The SDK's helper builds the same call (its messages gain its own `parsed`).
    const { final } = await throughSdk(live);
    expect(final.output[0]).toEqual(last.output[0]);
    const stored = await openai.responses.retrieve(last.id);
    expect(stored.output).toEqual(last.output);
    const replay = await gateway.request(`/v1/responses/${last.id}?stream=true`, { key: tenant.workspaceKey });
    const again = expectValidStream({ batches: [], text: '', events: parseEventStream(await replay.text()) });
    expect(again.output).toEqual(last.output);
  });
});

describe('reasoning a provider streams', () => {
  const REASONING = 'The user greets me, so I greet them back.';

  it('before a text answer: a reasoning item whole, then the message; stored, retrieved and replayed alike', async () => {
    const scenario: FakeScenario = { reasoning: REASONING, reply: 'Hello to you.' };
    const live = await streamedResponse({ input: `Hello\n${fakeDirective(scenario)}` });
    const last = expectValidStream(live);
    expect(itemTypes(last)).toEqual([
      ['reasoning', 'completed'],
      ['message', 'completed'],
    ]);
    expect(last.output[0]).toMatchObject({ summary: [], content: [{ type: 'reasoning_text', text: REASONING }] });
    expect(last.output[0].id).toMatch(/^rs_/);
    // It came word by word, as the provider sent it.
    const deltas = live.events.filter(({ event }) => event === 'response.reasoning_text.delta');
    expect(deltas.length).toBe(REASONING.split(' ').length);
    // The SDK's stream helper takes it, and what it builds is the stream's last response.
    const { final, deltas: text } = await throughSdk(live);
    expect(text).toBe('Hello to you.');
    expect(final.output[0]).toEqual(last.output[0]);
    // Stored as streamed; told again the same, in one delta.
    const stored = await openai.responses.retrieve(last.id);
    expect(stored.output).toEqual(last.output);
    const replay = await gateway.request(`/v1/responses/${last.id}?stream=true`, { key: tenant.workspaceKey });
    const told = parseEventStream(await replay.text());
    const again = expectValidStream({ batches: [], text: '', events: told });
    expect(again.output).toEqual(last.output);
    expect(told.filter(({ event }) => event === 'response.reasoning_text.delta')).toHaveLength(1);
  });

  it('before function calls, in the `reasoning` field (vLLM, Ollama): reasoning, then the calls', async () => {
    const scenario: FakeScenario = {
      reasoning: REASONING,
      reasoning_field: 'reasoning',
      tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' }, id: 'call_paris' }],
    };
    const live = await streamedResponse({
      input: `Weather?\n${fakeDirective(scenario)}`,
      tools: [{ type: 'function', name: 'get_weather', parameters: WEATHER_TOOL.function.parameters, strict: false }],
    });
    const last = expectValidStream(live);
    expect(itemTypes(last)).toEqual([
      ['reasoning', 'completed'],
      ['function_call', 'completed'],
    ]);
    expect(last.output[0].content[0].text).toBe(REASONING);
    // Given back with the call's output, it is accepted and not sent to the provider: none takes it.
    const next = await openai.responses.create({
      model: 'fake-model',
      previous_response_id: last.id,
      input: [last.output[0], { type: 'function_call_output', call_id: 'call_paris', output: '21 C' }],
    });
    expect(next.status).toBe('completed');
    const sent: { role: string }[] = defined(upstream.requests.at(-1)?.body).messages;
    expect(JSON.stringify(sent)).toContain('21 C');
    // The user's message holds the fake's directive, which names it: the rest does not.
    expect(sent.some(({ role }) => role === 'assistant')).toBe(true);
    expect(JSON.stringify(sent.filter(({ role }) => role !== 'user'))).not.toContain(REASONING);
  });

  it('never in the Assistants API: a run keeps it for the thread as a conversation, whose items show it before the answer', async () => {
    const thread = await openai.beta.threads.create(fakeThread('Hello', { reasoning: REASONING, reply: 'Hi.' }));
    const response = await gateway.request(`/v1/threads/${thread.id}/runs`, {
      method: 'POST',
      key: tenant.workspaceKey,
      body: { assistant_id: functionsAssistant, stream: true },
    });
    const stream = await response.text();
    expect(stream).toContain('thread.run.completed');
    expect(stream).not.toContain('reasoning');
    const run = defined((await openai.beta.threads.runs.list(thread.id)).data[0]);
    const steps = await openai.beta.threads.runs.steps.list(run.id, { thread_id: thread.id });
    expect(JSON.stringify(steps.data)).not.toContain('reasoning');
    const kinds = (data: { type: string; role?: string }[]) => data.map((item) => item.role ?? item.type);
    const items = await openai.conversations.items.list(thread.id, { order: 'asc' });
    expect(kinds(items.data)).toEqual(['user', 'reasoning', 'assistant']);
    const reasoning = defined(items.data[1]);
    const id = defined(reasoning.id);
    expect(id).toMatch(/^rs_/);
    expect(reasoning).toMatchObject({ content: [{ type: 'reasoning_text', text: REASONING }], status: 'completed' });
    expect(await openai.conversations.items.retrieve(id, { conversation_id: thread.id })).toEqual(reasoning);
    // Deleted, it is gone from the conversation; the answer it came before stays.
    await openai.conversations.items.delete(id, { conversation_id: thread.id });
    const after = await openai.conversations.items.list(thread.id, { order: 'asc' });
    expect(kinds(after.data)).toEqual(['user', 'assistant']);
    await expect(openai.conversations.items.retrieve(id, { conversation_id: thread.id })).rejects.toThrow(
      /No item found/,
    );
  });

  it('a reasoning item given without its summary is a 400 naming the field', async () => {
    const response = await gateway.request('/v1/responses', {
      method: 'POST',
      key: tenant.workspaceKey,
      body: {
        model: 'fake-model',
        input: [
          { type: 'reasoning', id: 'rs_given' },
          { role: 'user', content: 'Hi' },
        ],
      },
    });
    expect(response.status).toBe(400);
    const { error } = (await response.json()) as { error: { param: string; type: string } };
    expect(error).toMatchObject({ type: 'invalid_request_error', param: 'input[0].summary' });
  });

  it('counts in the answer cap: a reasoning past it is cut there, and the response ends incomplete', async () => {
    const capped = await gatewayWithDefaultKey(upstream.fetch, { GATEWAY_MAX_ANSWER_BYTES: '64' });
    try {
      const long = Array.from({ length: 40 }, (_, i) => `thought${i}`).join(' ');
      const response = await capped.client.responses.create({
        model: 'fake-model',
        input: `Hello\n${fakeDirective({ reasoning: long, reply: 'never sent' })}`,
      });
      expect(response.status).toBe('incomplete');
      const [reasoning, message] = response.output;
      expect(reasoning?.type).toBe('reasoning');
      const kept = reasoning?.type === 'reasoning' ? (reasoning.content?.[0]?.text ?? '') : '';
      expect(kept.length).toBe(64);
      expect(long.startsWith(kept)).toBe(true);
      expect(message).toMatchObject({ type: 'message', status: 'incomplete' });
    } finally {
      await capped.gateway.close();
    }
  });
});
