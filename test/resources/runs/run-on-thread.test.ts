import { defined } from '../../support/defined';
import { eq, getTableColumns } from 'drizzle-orm';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isUniqueViolation } from '../../../src/db/client';
import { messages as messageTable, runs } from '../../../src/db/schema';
import { insertRunOnThread } from '../../../src/resources/runs/queries';
import {
  fakeDirective,
  fakeThread,
  promptTokens,
  type FakeScenario,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { freshGate } from '../../support/gates';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import * as ratelimit from '../../support/ratelimit';
import { collapse, parseEvents, referenceOrder } from '../../support/run-stream';
import { startRunsSetup, WEATHER_TOOL } from '../../support/runs';
import { waitFor } from '../../support/wait';

/**
 * Runs on an existing thread, as applications drive them with the official `openai` SDK: second and
 * third turns that the provider (the fake, which records every request) sees with the whole
 * history, the SDK's stream helpers, truncation, runs listed and updated, run steps, and one open
 * run per thread; plain HTTP for the errors.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let tenant: Tenant;
let openai: OpenAI;
let assistantId: string;
let headers: Record<string, string>;

const INSTRUCTIONS = 'You answer briefly.';
beforeAll(async () => {
  ({ fake, gateway, tenant, headers, openai, assistantId } = await startRunsSetup({ instructions: INSTRUCTIONS }));
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());
afterEach(async () => {
  expect(await gateway.tasks.drain(30_000)).toBe(true);
});

const POLL = { pollIntervalMs: 10 };
const SYSTEM = { role: 'system', content: INSTRUCTIONS };

/** A user message whose text makes the fake answer as `scenario` says (one scenario per model turn when a list). */
const ask = (text: string, scenario?: FakeScenario | FakeScenario[]) =>
  scenario ? `${text}\n${fakeDirective(scenario)}` : text;

/** A thread whose first turn (createAndRun) answered `reply` to `text`: answers its id. */
async function threadWith(text: string, reply: string): Promise<string> {
  const run = await openai.beta.threads.createAndRunPoll(
    { assistant_id: assistantId, thread: fakeThread(text, { reply }) },
    POLL,
  );
  expect(run.status).toBe('completed');
  return run.thread_id;
}

/** The messages the provider received in its last request. */
const lastSent = () => defined(defined(fake.requests.at(-1)).body).messages;

const textOf = (message: OpenAI.Beta.Threads.Message) =>
  message.content.map((part) => (part.type === 'text' ? part.text.value : `[${part.type}]`)).join('');

describe('a run on an existing thread', () => {
  it('runs.create answers the queued run with its settings, additional_instructions appended; the run sees the thread', async () => {
    const threadId = await threadWith('Hello', 'Hi!');
    const run = await openai.beta.threads.runs.create(threadId, {
      assistant_id: assistantId,
      additional_instructions: 'Answer in French.',
      additional_messages: [{ role: 'user', content: ask('Again', { reply: 'Encore.' }), metadata: { n: '2' } }],
      metadata: { turn: '2' },
      temperature: 0.5,
      max_prompt_tokens: 1000,
      truncation_strategy: { type: 'last_messages', last_messages: 10 },
    });
    expect(run).toMatchObject({
      object: 'thread.run',
      thread_id: threadId,
      assistant_id: assistantId,
      status: 'queued',
      instructions: `${INSTRUCTIONS}\n\nAnswer in French.`,
      metadata: { turn: '2' },
      temperature: 0.5,
      max_prompt_tokens: 1000,
      truncation_strategy: { type: 'last_messages', last_messages: 10 },
      usage: null,
    });
    const done = await openai.beta.threads.runs.poll(run.id, { thread_id: threadId }, POLL);
    expect(done.status).toBe('completed');

    expect(lastSent()).toEqual([
      { role: 'system', content: `${INSTRUCTIONS}\n\nAnswer in French.` },
      { role: 'user', content: ask('Hello', { reply: 'Hi!' }) },
      { role: 'assistant', content: 'Hi!' },
      { role: 'user', content: ask('Again', { reply: 'Encore.' }) },
    ]);
    // The usage is what was sent.
    expect(defined(done.usage).prompt_tokens).toBe(promptTokens(lastSent()));
    const messages = (await openai.beta.threads.messages.list(threadId, { order: 'asc' })).data;
    expect(messages.map(textOf)).toEqual([
      ask('Hello', { reply: 'Hi!' }),
      'Hi!',
      ask('Again', { reply: 'Encore.' }),
      'Encore.',
    ]);
    expect(messages[2]).toMatchObject({ role: 'user', run_id: null, metadata: { n: '2' }, created_at: run.created_at });
    expect(messages[3]).toMatchObject({ role: 'assistant', run_id: run.id });
  });

  it('a second and a third turn send the whole history, earlier tool calls and their outputs in order', async () => {
    const threadId = await threadWith('My name is Ada.', 'Hello Ada.');
    const second = ask('Weather in Paris?', [
      { tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] },
      { reply: 'Sunny in Paris.' },
    ]);
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: second }] },
      POLL,
    );
    expect(waiting.status).toBe('requires_action');
    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const answered = await openai.beta.threads.runs.submitToolOutputsAndPoll(
      waiting.id,
      { thread_id: threadId, tool_outputs: [{ tool_call_id: defined(call).id, output: '{"sky":"clear"}' }] },
      POLL,
    );
    expect(answered.status).toBe('completed');

    const third = ask('And my name?', { reply: 'Ada.' });
    const last = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: third }] },
      POLL,
    );
    expect(last.status).toBe('completed');
    const toolTurn = [
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: defined(call).id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: defined(call).id, content: '{"sky":"clear"}' },
    ];
    expect(fake.requests.map((request) => defined(request.body).messages)).toEqual([
      // The first turn (createAndRun).
      [SYSTEM, { role: 'user', content: ask('My name is Ada.', { reply: 'Hello Ada.' }) }],
      // The second turn, then its continuation after the tool outputs.
      [
        SYSTEM,
        { role: 'user', content: ask('My name is Ada.', { reply: 'Hello Ada.' }) },
        { role: 'assistant', content: 'Hello Ada.' },
        { role: 'user', content: second },
      ],
      [
        SYSTEM,
        { role: 'user', content: ask('My name is Ada.', { reply: 'Hello Ada.' }) },
        { role: 'assistant', content: 'Hello Ada.' },
        { role: 'user', content: second },
        ...toolTurn,
      ],
      // The third turn: everything, in the order it happened.
      [
        SYSTEM,
        { role: 'user', content: ask('My name is Ada.', { reply: 'Hello Ada.' }) },
        { role: 'assistant', content: 'Hello Ada.' },
        { role: 'user', content: second },
        ...toolTurn,
        { role: 'assistant', content: 'Sunny in Paris.' },
        { role: 'user', content: third },
      ],
    ]);
    expect(last.usage).toEqual({
      prompt_tokens: promptTokens(lastSent()),
      completion_tokens: 1,
      total_tokens: promptTokens(lastSent()) + 1,
    });
  });

  it('keeps an answer’s text before the tool calls of the same turn, in the next turn', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const question = ask('Weather?', [
      { reply: 'Let me check.', tool_calls: [{ arguments: { city: 'Oslo' } }] },
      { reply: 'Cold.' },
    ]);
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: question }] },
      POLL,
    );
    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    await openai.beta.threads.runs.submitToolOutputsAndPoll(
      waiting.id,
      { thread_id: threadId, tool_outputs: [{ tool_call_id: defined(call).id, output: '-5' }] },
      POLL,
    );
    expect(lastSent().slice(-4)).toEqual([
      { role: 'user', content: question },
      { role: 'assistant', content: 'Let me check.' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: defined(call).id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: defined(call).id, content: '-5' },
    ]);
  });

  it('sends image_url parts as vision content parts, in their turn and the next', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const image = {
      type: 'image_url' as const,
      image_url: { url: 'https://example.com/cat.png', detail: 'low' as const },
    };
    const run = await openai.beta.threads.runs.createAndPoll(
      threadId,
      {
        assistant_id: assistantId,
        additional_messages: [
          { role: 'user', content: [{ type: 'text', text: ask('What is this?', { reply: 'A cat.' }) }, image] },
        ],
      },
      POLL,
    );
    expect(run.status).toBe('completed');
    const vision = {
      role: 'user',
      content: [
        { type: 'text', text: ask('What is this?', { reply: 'A cat.' }) },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'low' } },
      ],
    };
    expect(lastSent().at(-1)).toEqual(vision);
    await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'And now?' }] },
      POLL,
    );
    expect(lastSent().slice(-3)).toEqual([
      vision,
      { role: 'assistant', content: 'A cat.' },
      { role: 'user', content: 'And now?' },
    ]);
  });

  it('sends the run’s own settings: model, instructions, tools, sampling, caps, tool_choice, json_schema', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const schema = {
      name: 'answer',
      schema: { type: 'object', properties: { text: { type: 'string' } } },
      strict: true,
    };
    const run = await openai.beta.threads.runs.createAndPoll(
      threadId,
      {
        assistant_id: assistantId,
        model: 'other-model',
        instructions: 'Reply in JSON.',
        tools: [WEATHER_TOOL],
        temperature: 0.2,
        top_p: 0.9,
        max_completion_tokens: 300,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        parallel_tool_calls: false,
        response_format: { type: 'json_schema', json_schema: schema },
        additional_messages: [{ role: 'user', content: ask('Go', { reply: '{"text":"ok"}' }) }],
      },
      POLL,
    );
    expect(run).toMatchObject({
      status: 'completed',
      model: 'other-model',
      response_format: { type: 'json_schema', json_schema: schema },
    });
    const { messages, ...rest } = defined(defined(fake.requests.at(-1)).body);
    expect(messages[0]).toEqual({ role: 'system', content: 'Reply in JSON.' });
    expect(rest).toEqual({
      model: 'other-model',
      tools: [WEATHER_TOOL],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
      response_format: { type: 'json_schema', json_schema: schema },
      temperature: 0.2,
      top_p: 0.9,
      max_completion_tokens: 300,
      stream: true,
      stream_options: { include_usage: true },
    });
  });
});

describe('streamed runs on a thread', () => {
  it('runs.stream: OpenAI’s events without thread.created, through the SDK’s handlers', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const stream = openai.beta.threads.runs.stream(threadId, {
      assistant_id: assistantId,
      additional_messages: [{ role: 'user', content: ask('Count', { reply: 'One two three', chunk_delay_ms: 2 }) }],
    });
    const events: string[] = [];
    const deltas: string[] = [];
    let created: OpenAI.Beta.Threads.Message | undefined;
    stream.on('event', (event) => events.push(event.event));
    stream.on('messageCreated', (message) => (created = message));
    stream.on('textDelta', (delta) => deltas.push(defined(delta.value)));
    const run = await stream.finalRun();
    expect(run).toMatchObject({ status: 'completed', thread_id: threadId });
    expect(deltas.join('')).toBe('One two three');
    expect(created).toMatchObject({ thread_id: threadId, run_id: run.id, role: 'assistant' });
    expect(collapse(events)).toEqual(referenceOrder(1).filter((name) => name !== 'thread.created'));
    expect((await stream.finalMessages()).map(textOf)).toEqual(['One two three']);
  });

  it('runs.createAndStream into tool calls, then submitToolOutputsStream, with the history', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const question = ask('Weather in Rome?', [
      { tool_calls: [{ name: 'get_weather', arguments: { city: 'Rome' } }] },
      { reply: 'Warm.' },
    ]);
    const first = openai.beta.threads.runs.createAndStream(threadId, {
      assistant_id: assistantId,
      additional_messages: [{ role: 'user', content: question }],
    });
    const events: string[] = [];
    const argumentDeltas: string[] = [];
    first.on('event', (event) => events.push(event.event));
    first.on('toolCallDelta', (delta) => {
      if (delta.type === 'function' && delta.function?.arguments) argumentDeltas.push(delta.function.arguments);
    });
    const waiting = await first.finalRun();
    expect(waiting.status).toBe('requires_action');
    expect(argumentDeltas.join('')).toBe('{"city":"Rome"}');
    expect(collapse(events)).toEqual(referenceOrder(2).filter((name) => name !== 'thread.created'));

    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const second = openai.beta.threads.runs.submitToolOutputsStream(waiting.id, {
      thread_id: threadId,
      tool_outputs: [{ tool_call_id: defined(call).id, output: '25C' }],
    });
    const text: string[] = [];
    second.on('textDelta', (delta) => text.push(defined(delta.value)));
    const done = await second.finalRun();
    expect(done.status).toBe('completed');
    expect(text.join('')).toBe('Warm.');
    expect(lastSent()).toEqual([
      SYSTEM,
      { role: 'user', content: ask('Hi', { reply: 'Hello.' }) },
      { role: 'assistant', content: 'Hello.' },
      { role: 'user', content: question },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: defined(call).id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', tool_call_id: defined(call).id, content: '25C' },
    ]);
  });

  it('as plain HTTP: the stream opens with thread.run.created and ends with done', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const response = await gateway.request(`/v1/threads/${threadId}/runs`, {
      headers,
      body: {
        assistant_id: assistantId,
        stream: true,
        additional_messages: [{ role: 'user', content: ask('Yo', { reply: 'Yo.' }) }],
      },
    });
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = parseEvents(await response.text());
    expect(events.slice(0, 3).map((event) => event.event)).toEqual([
      'thread.run.created',
      'thread.run.queued',
      'thread.run.in_progress',
    ]);
    expect(events.at(-2)).toMatchObject({
      event: 'thread.run.completed',
      data: { thread_id: threadId, status: 'completed' },
    });
    expect(events.at(-1)).toEqual({ event: 'done', data: '[DONE]' });
  });
});

describe('truncation', () => {
  it('last_messages sends the last N messages of the thread', async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: {
          messages: ['m1', 'm2', 'm3', ask('m4', { reply: 'a1' })].map((content) => ({
            role: 'user' as const,
            content,
          })),
        },
      },
      POLL,
    );
    await openai.beta.threads.runs.createAndPoll(
      run.thread_id,
      {
        assistant_id: assistantId,
        truncation_strategy: { type: 'last_messages', last_messages: 3 },
        additional_messages: [{ role: 'user', content: 'm5' }],
      },
      POLL,
    );
    expect(lastSent()).toEqual([
      SYSTEM,
      { role: 'user', content: ask('m4', { reply: 'a1' }) },
      { role: 'assistant', content: 'a1' },
      { role: 'user', content: 'm5' },
    ]);
  });

  it('auto leaves out the oldest messages until the prompt’s estimate fits max_prompt_tokens', async () => {
    const long = ask(`${'x'.repeat(1000)}`, { reply: 'ok' });
    const first = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, tools: [], thread: { messages: [{ role: 'user', content: long }] } },
      POLL,
    );
    const run = await openai.beta.threads.runs.createAndPoll(
      first.thread_id,
      {
        assistant_id: assistantId,
        tools: [],
        max_prompt_tokens: 256,
        additional_messages: [{ role: 'user', content: 'short' }],
      },
      POLL,
    );
    expect(run.status).toBe('completed');
    // The long message alone is over 256 tokens at four characters a token: it is left out.
    expect(lastSent()).toEqual([SYSTEM, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'short' }]);
    expect(defined(run.usage).prompt_tokens).toBe(promptTokens(lastSent()));
    // Without the cap, the same thread is sent whole.
    await openai.beta.threads.runs.createAndPoll(
      first.thread_id,
      { assistant_id: assistantId, tools: [], additional_messages: [{ role: 'user', content: 'again' }] },
      POLL,
    );
    expect(lastSent()).toHaveLength(6);
  });

  it('ends the run incomplete, unsent, when even the last user message cannot fit max_prompt_tokens', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const requests = fake.requests.length;
    const run = await openai.beta.threads.runs.createAndPoll(
      threadId,
      {
        assistant_id: assistantId,
        max_prompt_tokens: 256,
        additional_messages: [{ role: 'user', content: 'y'.repeat(2000) }],
      },
      POLL,
    );
    expect(run).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_prompt_tokens' } });
    expect(run.usage).toEqual({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
    expect(fake.requests).toHaveLength(requests);
    // The message stays in the thread; no answer was written.
    const messages = (await openai.beta.threads.messages.list(threadId)).data;
    expect(messages.map((message) => message.role)).toEqual(['user', 'assistant', 'user']);
  });

  describe('with GATEWAY_MAX_HISTORY_BYTES', () => {
    let small: TestGateway;
    let client: OpenAI;
    let assistant: string;
    beforeAll(async () => {
      small = await createTestGateway({ env: { GATEWAY_MAX_HISTORY_BYTES: '1000' } });
      const owner = await small.tenant();
      const slug = await small.virtualKey(owner, { base_url: fake.baseURL });
      client = small.openai({ 'x-gateway-api-key': owner.workspaceKey, 'x-gateway-virtual-key': slug });
      assistant = (await client.beta.assistants.create({ model: 'fake-model', instructions: INSTRUCTIONS })).id;
    });
    afterAll(() => small.close());

    it('sends the newest of the history within the bytes, the run’s own message always', async () => {
      // Four messages of about 430 bytes each as the provider gets them: two fit in 1,000.
      const texts = ['a', 'b', 'c', 'd'].map((letter) => letter.repeat(400));
      fake.enqueue({ reply: 'ok' }, { reply: 'fine' });
      const first = await client.beta.threads.createAndRunPoll(
        { assistant_id: assistant, thread: { messages: texts.map((content) => ({ role: 'user' as const, content })) } },
        POLL,
      );
      expect(lastSent()).toEqual([SYSTEM, { role: 'user', content: texts[2] }, { role: 'user', content: texts[3] }]);
      await client.beta.threads.runs.createAndPoll(
        first.thread_id,
        { assistant_id: assistant, additional_messages: [{ role: 'user', content: 'short' }] },
        POLL,
      );
      expect(lastSent()).toEqual([
        SYSTEM,
        { role: 'user', content: texts[2] },
        { role: 'user', content: texts[3] },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: 'short' },
      ]);
      const huge = 'z'.repeat(3000);
      fake.enqueue({ reply: 'big' });
      await client.beta.threads.runs.createAndPoll(
        first.thread_id,
        { assistant_id: assistant, additional_messages: [{ role: 'user', content: huge }] },
        POLL,
      );
      expect(lastSent()).toEqual([SYSTEM, { role: 'user', content: huge }]);
      expect(await small.tasks.drain(10_000)).toBe(true);
    });
  });
});

describe('listing and updating runs, and their steps', () => {
  /** A thread with three completed runs, oldest first. */
  async function threeRuns() {
    const first = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread('one', { reply: '1' }) },
      POLL,
    );
    const created = [first];
    for (const text of ['two', 'three']) {
      created.push(
        await openai.beta.threads.runs.createAndPoll(
          first.thread_id,
          { assistant_id: assistantId, additional_messages: [{ role: 'user', content: text }] },
          POLL,
        ),
      );
    }
    return { threadId: first.thread_id, ids: created.map((run) => run.id) };
  }

  it('lists a thread’s runs, newest first by default, and pages both ways', async () => {
    const { threadId, ids } = await threeRuns();
    const [r1, r2, r3] = ids;
    const page = await openai.beta.threads.runs.list(threadId, { limit: 2 });
    expect(page.data.map((run) => run.id)).toEqual([r3, r2]);
    expect(page.data.every((run) => run.object === 'thread.run' && run.status === 'completed')).toBe(true);
    expect(page.hasNextPage()).toBe(true);
    expect((await page.getNextPage()).data.map((run) => run.id)).toEqual([r1]);

    const forward: string[] = [];
    for await (const run of openai.beta.threads.runs.list(threadId, { limit: 1, order: 'asc' })) forward.push(run.id);
    expect(forward).toEqual([r1, r2, r3]);

    const list = async (query: string) =>
      json(await gateway.request(`/v1/threads/${threadId}/runs?${query}`, { headers }));
    expect(await list(`order=asc&limit=1&before=${r3}`)).toMatchObject({
      data: [{ id: r2 }],
      first_id: r2,
      last_id: r2,
      has_more: true,
    });
    expect(await list(`order=asc&limit=1&before=${r2}`)).toMatchObject({ data: [{ id: r1 }], has_more: false });
    expect(await list(`order=desc&limit=1&before=${r1}`)).toMatchObject({ data: [{ id: r2 }], has_more: true });
    expect(await list(`order=desc&after=${r3}`)).toMatchObject({ data: [{ id: r2 }, { id: r1 }], has_more: false });
    expect(await list(`order=desc&before=${r3}`)).toMatchObject({
      data: [],
      first_id: null,
      last_id: null,
      has_more: false,
    });
  });

  it('refuses bad list queries and other workspaces’ threads', async () => {
    const { threadId } = await threeRuns();
    const cases: [string, { status: number; code: string; param: string | null }][] = [
      ['limit=0', { status: 400, code: 'value_below_minimum', param: 'limit' }],
      ['limit=101', { status: 400, code: 'value_above_maximum', param: 'limit' }],
      ['order=up', { status: 400, code: 'invalid_value', param: 'order' }],
      ['after=run_nope', { status: 400, code: 'invalid_value', param: 'after' }],
      ['colour=red', { status: 400, code: 'unknown_parameter', param: 'colour' }],
    ];
    for (const [query, expected] of cases) {
      expect(await errorOf(await gateway.request(`/v1/threads/${threadId}/runs?${query}`, { headers }))).toMatchObject(
        expected,
      );
    }
    const stranger = await gateway.tenant();
    expect(
      await errorOf(await gateway.request(`/v1/threads/${threadId}/runs`, { key: stranger.workspaceKey })),
    ).toMatchObject({
      status: 404,
      code: 'thread_not_found',
    });
  });

  it('updates a run’s metadata, also while it waits for tool outputs, and keeps it to the end', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      {
        assistant_id: assistantId,
        metadata: { a: '1' },
        additional_messages: [{ role: 'user', content: ask('Weather?', [{ tool_calls: 1 }, { reply: 'Done.' }]) }],
      },
      POLL,
    );
    expect(waiting.status).toBe('requires_action');
    const updated = await openai.beta.threads.runs.update(waiting.id, {
      thread_id: threadId,
      metadata: { user: 'ada', b: '2' },
    });
    expect(updated).toMatchObject({ id: waiting.id, status: 'requires_action', metadata: { user: 'ada', b: '2' } });
    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const done = await openai.beta.threads.runs.submitToolOutputsAndPoll(
      waiting.id,
      { thread_id: threadId, tool_outputs: [{ tool_call_id: defined(call).id, output: 'x' }] },
      POLL,
    );
    expect(done).toMatchObject({ status: 'completed', metadata: { user: 'ada', b: '2' } });

    // No metadata, or null: unchanged.
    for (const body of [{}, { metadata: null }]) {
      const response = await gateway.request(`/v1/threads/${threadId}/runs/${done.id}`, { headers, body });
      expect(await json(response)).toMatchObject({ id: done.id, metadata: { user: 'ada', b: '2' } });
    }
    const path = `/v1/threads/${threadId}/runs/${done.id}`;
    const tooMany = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));
    expect(await errorOf(await gateway.request(path, { headers, body: { metadata: tooMany } }))).toMatchObject({
      status: 400,
      param: 'metadata',
    });
    expect(await errorOf(await gateway.request(path, { headers, body: { status: 'cancelled' } }))).toMatchObject({
      status: 400,
      code: 'unknown_parameter',
      param: 'status',
    });
    expect(
      await errorOf(
        await gateway.request(`/v1/threads/${threadId}/runs/run_nope`, { headers, body: { metadata: {} } }),
      ),
    ).toMatchObject({
      status: 404,
      code: 'run_not_found',
    });
    const stranger = await gateway.tenant();
    expect(
      await errorOf(await gateway.request(path, { key: stranger.workspaceKey, body: { metadata: {} } })),
    ).toMatchObject({ status: 404 });
    expect((await openai.beta.threads.runs.retrieve(done.id, { thread_id: threadId })).metadata).toEqual({
      user: 'ada',
      b: '2',
    });
  });

  it('lists and retrieves run steps: tool calls with their outputs, then the message, each with its usage', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const question = ask('Weather?', [
      { tool_calls: [{ name: 'get_weather', arguments: { city: 'Lima' } }] },
      { reply: 'Mild.' },
    ]);
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: question }] },
      POLL,
    );
    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const pending = await openai.beta.threads.runs.steps.list(waiting.id, { thread_id: threadId });
    expect(pending.data).toMatchObject([{ type: 'tool_calls', status: 'in_progress', expires_at: waiting.expires_at }]);
    const done = await openai.beta.threads.runs.submitToolOutputsAndPoll(
      waiting.id,
      { thread_id: threadId, tool_outputs: [{ tool_call_id: defined(call).id, output: '18C' }] },
      POLL,
    );

    const include = ['step_details.tool_calls[*].file_search.results[*].content' as const];
    const steps = (await openai.beta.threads.runs.steps.list(done.id, { thread_id: threadId, order: 'asc', include }))
      .data;
    const [answer] = (await openai.beta.threads.messages.list(threadId, { run_id: done.id })).data;
    expect(steps).toMatchObject([
      {
        object: 'thread.run.step',
        run_id: done.id,
        thread_id: threadId,
        assistant_id: assistantId,
        type: 'tool_calls',
        status: 'completed',
        expires_at: null,
        step_details: {
          type: 'tool_calls',
          tool_calls: [
            {
              id: defined(call).id,
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Lima"}', output: '18C' },
            },
          ],
        },
      },
      {
        type: 'message_creation',
        status: 'completed',
        step_details: { type: 'message_creation', message_creation: { message_id: defined(answer).id } },
      },
    ]);
    const sum = (key: 'prompt_tokens' | 'completion_tokens' | 'total_tokens') =>
      steps.reduce((total, step) => total + defined(step.usage)[key], 0);
    expect({
      prompt_tokens: sum('prompt_tokens'),
      completion_tokens: sum('completion_tokens'),
      total_tokens: sum('total_tokens'),
    }).toEqual(done.usage);

    for (const step of steps) {
      expect(
        await openai.beta.threads.runs.steps.retrieve(step.id, { thread_id: threadId, run_id: done.id, include }),
      ).toEqual(step);
    }
    const firstPage = await openai.beta.threads.runs.steps.list(done.id, { thread_id: threadId, limit: 1 });
    expect(firstPage.data.map((step) => step.id)).toEqual([defined(steps[1]).id]);
    expect((await firstPage.getNextPage()).data.map((step) => step.id)).toEqual([defined(steps[0]).id]);

    const stepsPath = `/v1/threads/${threadId}/runs/${done.id}/steps`;
    expect(await errorOf(await gateway.request(`${stepsPath}?include[]=step_details.nope`, { headers }))).toMatchObject(
      {
        status: 400,
        code: 'invalid_value',
        param: 'include[]',
        message:
          "Invalid value for 'include[]': 'step_details.nope' is not supported. Supported values: step_details.tool_calls[*].file_search.results[*].content.",
      },
    );
    expect(await errorOf(await gateway.request(`${stepsPath}/step_nope`, { headers }))).toMatchObject({
      status: 404,
      code: 'run_step_not_found',
    });
    expect(
      await errorOf(await gateway.request(`${stepsPath}/${defined(steps[0]).id}?include[]=x`, { headers })),
    ).toMatchObject({ status: 400, param: 'include[]' });
    // A step is found through its own run only: not through the thread's first run.
    const firstRun = defined((await openai.beta.threads.runs.list(threadId, { order: 'asc', limit: 1 })).data[0]);
    expect(firstRun.id).not.toBe(done.id);
    const throughOther = await gateway.request(
      `/v1/threads/${threadId}/runs/${firstRun.id}/steps/${defined(steps[0]).id}`,
      { headers },
    );
    expect(await errorOf(throughOther)).toMatchObject({ status: 404, code: 'run_step_not_found' });
    const stranger = await gateway.tenant();
    expect(await errorOf(await gateway.request(stepsPath, { key: stranger.workspaceKey }))).toMatchObject({
      status: 404,
      code: 'run_not_found',
    });
  });
});

describe('one open run per thread', () => {
  const create = (threadId: string, body: Record<string, unknown> = {}, key = headers) =>
    gateway.request(`/v1/threads/${threadId}/runs`, { headers: key, body: { assistant_id: assistantId, ...body } });

  it('refuses a run while another waits for tool outputs or executes, naming it, and writes nothing', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      {
        assistant_id: assistantId,
        additional_messages: [{ role: 'user', content: ask('Weather?', [{ tool_calls: 1 }, {}]) }],
      },
      POLL,
    );
    expect(waiting.status).toBe('requires_action');
    const before = await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id);
    const refused = await openai.beta.threads.runs
      .create(threadId, { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'Me too' }] })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect(refused).toMatchObject({ status: 400, code: 'thread_has_active_run', param: null });
    expect((refused as Error).message).toContain(
      `Thread ${threadId} already has an active run ${waiting.id}.` +
        ` To free the thread, submit its tool outputs (POST /v1/threads/${threadId}/runs/${waiting.id}/submit_tool_outputs), cancel it (POST /v1/threads/${threadId}/runs/${waiting.id}/cancel) or wait for it to end.`,
    );
    expect(await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id)).toEqual(before);

    // Executing: the same, for as long as its provider holds the answer.
    await openai.beta.threads.runs.cancel(waiting.id, { thread_id: threadId });
    const gate = freshGate('slow');
    const slow = await openai.beta.threads.runs.create(threadId, {
      assistant_id: assistantId,
      additional_messages: [{ role: 'user', content: ask('Slowly', { reply: 'Done.', hold: gate }) }],
    });
    expect(await errorOf(await create(threadId))).toMatchObject({
      status: 400,
      code: 'thread_has_active_run',
      message:
        `Thread ${threadId} already has an active run ${slow.id}.` +
        ` To free the thread, cancel it (POST /v1/threads/${threadId}/runs/${slow.id}/cancel) or wait for it to end.`,
    });
    fake.openGate(gate);
    expect((await openai.beta.threads.runs.poll(slow.id, { thread_id: threadId }, POLL)).status).toBe('completed');
    // Once it has ended, the thread takes a new run.
    expect((await create(threadId)).status).toBe(200);
  });

  it.each([2, 20])(
    'admits exactly one of %i runs created at the same instant, and gives the others’ tokens back',
    async (n) => {
      const owner = await gateway.tenant();
      const slug = await gateway.virtualKey(owner, { base_url: fake.baseURL });
      const ownerHeaders = { 'x-gateway-api-key': owner.workspaceKey, 'x-gateway-virtual-key': slug };
      const client = gateway.openai(ownerHeaders);
      const assistant = await client.beta.assistants.create({ model: 'fake-model', tools: [WEATHER_TOOL] });
      const policy = await ratelimit.createPolicy(gateway, owner, { type: 'tokens', unit: 'rpd', value: 1e9 });
      const first = await client.beta.threads.createAndRunPoll(
        { assistant_id: assistant.id, thread: fakeThread('Hi', { reply: 'Hello.' }) },
        POLL,
      );
      const threadId = first.thread_id;

      const responses = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          gateway.request(`/v1/threads/${threadId}/runs`, {
            headers: ownerHeaders,
            // Each waits for tool outputs, so the one admitted is still open when the others arrive.
            body: {
              assistant_id: assistant.id,
              additional_messages: [{ role: 'user', content: ask(`Racer ${i}`, { tool_calls: 1 }) }],
            },
          }),
        ),
      );
      const admitted = responses.filter((response) => response.status === 200);
      expect(admitted).toHaveLength(1);
      const winner = await json(defined(admitted[0]));
      for (const response of responses.filter((r) => r.status !== 200)) {
        expect(await errorOf(response)).toMatchObject({
          status: 400,
          code: 'thread_has_active_run',
          message: expect.stringMatching(
            new RegExp(
              `^Thread ${threadId} already has an active run ${winner.id}\\. To free the thread, .*cancel it \\(POST /v1/threads/${threadId}/runs/${winner.id}/cancel\\) or wait for it to end\\.$`,
            ),
          ),
        });
      }
      const waiting = await client.beta.threads.runs.poll(winner.id, { thread_id: threadId }, POLL);
      expect(waiting.status).toBe('requires_action');
      expect(await gateway.tasks.drain(10_000)).toBe(true);

      // The thread holds the first turn, and the winner's message and run alone.
      const messages = (await client.beta.threads.messages.list(threadId, { order: 'asc' })).data;
      expect(messages.map(textOf)).toEqual([
        defined(fakeThread('Hi', { reply: 'Hello.' }).messages[0]).content,
        'Hello.',
        expect.stringMatching(/^Racer \d+/),
      ]);
      expect((await client.beta.threads.runs.list(threadId)).data.map((run) => run.id)).toEqual([winner.id, first.id]);
      // Every reservation of a refused run was given back: the counter holds what the two runs used.
      const cancelled = await client.beta.threads.runs.cancel(winner.id, { thread_id: threadId });
      expect(await ratelimit.usedBy(gateway.database.client, policy)).toBe(
        defined(first.usage).total_tokens + defined(cancelled.usage).total_tokens,
      );
    },
  );

  it('streamed, admits exactly one of 8 racers; a loser whose upstream call had begun leaves no row, event or open exchange', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const before = fake.requests.length;
    // A streamed run's upstream call starts while its rows commit (RunHost.stream): the losers'
    // calls may reach the fake before their commit fails, and must be closed, not completed. Each
    // racer's answer waits at a gate of its own: the winner's opens once every racer has its
    // answer, a loser's never.
    const gates = Array.from({ length: 8 }, () => freshGate('racer'));
    const responses = await Promise.all(
      gates.map((gate, i) =>
        gateway.request(`/v1/threads/${threadId}/runs`, {
          headers,
          body: {
            assistant_id: assistantId,
            stream: true,
            additional_messages: [{ role: 'user', content: ask(`Racer ${i}`, { reply: 'Slow answer.', hold: gate }) }],
          },
        }),
      ),
    );
    const admitted = responses.filter((response) => response.status === 200);
    expect(admitted).toHaveLength(1);
    for (const response of responses.filter((r) => r.status !== 200)) {
      expect(await errorOf(response)).toMatchObject({ status: 400, code: 'thread_has_active_run' });
    }
    // The winner is the racer whose message the thread took.
    const [taken] = (await openai.beta.threads.messages.list(threadId, { limit: 1 })).data;
    fake.openGate(defined(gates[Number(defined(/^Racer (\d)/.exec(textOf(defined(taken))))[1])]));
    const events = parseEvents(await defined(admitted[0]).text());
    const created = defined(events.find((event) => event.event === 'thread.run.created')).data as { id: string };
    expect(events.at(-2)).toMatchObject({ event: 'thread.run.completed' });
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    // A loser's exchange ends once the fake sees the connection the gateway dropped close.
    const calls = await waitFor(
      () => fake.requests.slice(before).filter((request) => request.path.endsWith('/chat/completions')),
      (all) => all.every((call) => call.outcome !== 'open'),
    );
    expect(calls.filter((call) => call.outcome === 'completed')).toHaveLength(1);
    expect(calls.every((call) => call.outcome !== 'open')).toBe(true);
    const messages = (await openai.beta.threads.messages.list(threadId, { order: 'asc' })).data;
    expect(messages.map(textOf).slice(2)).toEqual([expect.stringMatching(/^Racer \d+/), 'Slow answer.']);
    expect((await openai.beta.threads.runs.list(threadId)).data.map((run) => run.id)[0]).toBe(created.id);
  });

  it('is decided by the unique index at the insert: a second open run is refused whole, other conflicts are errors', async () => {
    const threadId = await threadWith('Hi', 'Hello.');
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      {
        assistant_id: assistantId,
        additional_messages: [{ role: 'user', content: ask('Weather?', { tool_calls: 1 }) }],
      },
      POLL,
    );
    const { db } = gateway.database;
    // The rows as the app builds them: every column but seq.
    const { seq: _runSeq, ...runColumns } = getTableColumns(runs);
    const { seq: _messageSeq, ...messageColumns } = getTableColumns(messageTable);
    const [open] = await db.select(runColumns).from(runs).where(eq(runs.id, waiting.id));
    const [message] = await db
      .select(messageColumns)
      .from(messageTable)
      .where(eq(messageTable.threadId, threadId))
      .limit(1);
    const before = await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id);
    // The embedded client's SqliteError, as Drizzle's batch passes it on.
    expect(
      await insertRunOnThread(db, [{ ...defined(message), id: 'msg_second' }], { ...defined(open), id: 'run_second' }),
    ).toBe(false);
    expect(await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id)).toEqual(before);
    // A conflict on another index (the run's id) is not taken for an open run.
    const cancelled = await openai.beta.threads.runs.cancel(waiting.id, { thread_id: threadId });
    expect(cancelled.status).toBe('cancelled');
    const error = await insertRunOnThread(db, [], { ...defined(open), status: 'queued' }).catch(
      (caught: unknown) => caught,
    );
    expect(isUniqueViolation(error, 'runs.id')).toBe(true);
    expect(isUniqueViolation(error, 'runs.thread_id')).toBe(false);
  });

  it('reconciles an open run left behind, and creates the new run', async () => {
    // Waiting for tool outputs past its expiry.
    const threadId = await threadWith('Hi', 'Hello.');
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      {
        assistant_id: assistantId,
        additional_messages: [{ role: 'user', content: ask('Weather?', { tool_calls: 1 }) }],
      },
      POLL,
    );
    expect(waiting.status).toBe('requires_action');
    gateway.clock.advance(gateway.deps.config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000 + 1000);
    const next = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'Still there?' }] },
      POLL,
    );
    expect(next.status).toBe('completed');
    expect(await openai.beta.threads.runs.retrieve(waiting.id, { thread_id: threadId })).toMatchObject({
      status: 'expired',
    });

    // In progress, its executor gone: its lease ran out (the executor, held at the gate, is let go
    // at the end, and finds the run settled).
    const gate = freshGate('slow');
    const slow = await openai.beta.threads.runs.create(threadId, {
      assistant_id: assistantId,
      additional_messages: [{ role: 'user', content: ask('Slowly', { reply: 'Late.', hold: gate }) }],
    });
    gateway.clock.advance(gateway.deps.config.GATEWAY_RUN_LEASE_SECONDS * 1000 + 1000);
    const after = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'Hello?' }] },
      POLL,
    );
    expect(after.status).toBe('completed');
    expect(await openai.beta.threads.runs.retrieve(slow.id, { thread_id: threadId })).toMatchObject({
      status: 'failed',
      last_error: { code: 'server_error', message: expect.stringContaining('stopped before the run finished') },
    });
    // Its executor, answered at last, writes nothing to the thread that has moved on.
    const messagesBefore = (await openai.beta.threads.messages.list(threadId, { order: 'asc' })).data.map(textOf);
    fake.openGate(gate);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    expect(fake.requests.find((request) => request.scenario?.hold === gate)?.outcome).toBe('completed');
    expect((await openai.beta.threads.messages.list(threadId, { order: 'asc' })).data.map(textOf)).toEqual(
      messagesBefore,
    );
  });
});

describe('what a run on a thread refuses, writing nothing', () => {
  let threadId: string;
  beforeAll(async () => {
    threadId = await threadWith('Hi', 'Hello.');
  });

  const cases: [string, Record<string, unknown>, { status: number; code: string; param: string | null }, string?][] = [
    [
      'assistant_id missing',
      { assistant_id: undefined },
      { status: 400, code: 'missing_required_parameter', param: 'assistant_id' },
    ],
    ['an unknown assistant', { assistant_id: 'asst_nope' }, { status: 404, code: 'assistant_not_found', param: null }],
    [
      'a system message',
      { additional_messages: [{ role: 'system', content: 'x' }] },
      { status: 400, code: 'invalid_value', param: 'additional_messages[0].role' },
    ],
    [
      'an image_file part of no file',
      {
        additional_messages: [
          { role: 'user', content: 'ok' },
          { role: 'user', content: [{ type: 'image_file', image_file: { file_id: 'file_1' } }] },
        ],
      },
      { status: 400, code: 'invalid_value', param: 'additional_messages[1].content[0].image_file.file_id' },
    ],
    [
      'a code_interpreter attachment of no file',
      {
        additional_messages: [
          { role: 'user', content: 'x', attachments: [{ file_id: 'file_1', tools: [{ type: 'code_interpreter' }] }] },
        ],
      },
      { status: 404, code: 'file_not_found', param: 'additional_messages[0].attachments[0].file_id' },
    ],
    [
      'additional_instructions too long',
      { additional_instructions: 'i'.repeat(256_001) },
      { status: 400, code: 'string_above_max_length', param: 'additional_instructions' },
    ],
    ['a thread', { thread: { messages: [] } }, { status: 400, code: 'unknown_parameter', param: 'thread' }],
    ['tool_resources', { tool_resources: {} }, { status: 400, code: 'unknown_parameter', param: 'tool_resources' }],
    [
      'max_prompt_tokens below 256',
      { max_prompt_tokens: 255 },
      { status: 400, code: 'value_below_minimum', param: 'max_prompt_tokens' },
    ],
    [
      'last_messages without a number',
      { truncation_strategy: { type: 'last_messages' } },
      { status: 400, code: 'invalid_value', param: 'truncation_strategy.last_messages' },
    ],
    [
      'a function named as a hosted tool’s own',
      { tools: [{ type: 'code_interpreter' }, { type: 'function', function: { name: 'python' } }] },
      { status: 400, code: 'invalid_value', param: 'tools[1].function.name' },
    ],
    ['stream not a boolean', { stream: 'yes' }, { status: 400, code: 'invalid_type', param: 'stream' }],
    [
      'an unknown include[]',
      {},
      { status: 400, code: 'invalid_value', param: 'include[]' },
      'include[]=step_details.nope',
    ],
    ['an unknown query parameter', {}, { status: 400, code: 'unknown_parameter', param: 'limit' }, 'limit=2'],
  ];

  it.each(cases)('%s', async (_name, change, expected, query) => {
    const before = await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id);
    const response = await gateway.request(`/v1/threads/${threadId}/runs${query ? `?${query}` : ''}`, {
      headers,
      body: { assistant_id: assistantId, ...change },
    });
    expect(await errorOf(response)).toMatchObject(expected);
    expect(await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id)).toEqual(before);
  });

  it('accepts include[] for file search contents (no step has them yet)', async () => {
    const include = 'include[]=step_details.tool_calls[*].file_search.results[*].content';
    const response = await gateway.request(`/v1/threads/${threadId}/runs?${include}`, {
      headers,
      body: { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'ok' }] },
    });
    const run = await json(response);
    expect(run).toMatchObject({ object: 'thread.run', status: 'queued' });
    expect((await openai.beta.threads.runs.poll(run.id, { thread_id: threadId }, POLL)).status).toBe('completed');
  });

  it('answers 404 for an unknown thread and for another workspace’s, and 400 when no virtual key applies', async () => {
    const body = { assistant_id: assistantId };
    expect(await errorOf(await gateway.request('/v1/threads/thread_nope/runs', { headers, body }))).toMatchObject({
      status: 404,
      code: 'thread_not_found',
      message: "No thread found with id 'thread_nope'.",
    });
    const stranger = await gateway.tenant();
    const slug = await gateway.virtualKey(stranger, { base_url: fake.baseURL });
    const theirs = await gateway.request(`/v1/threads/${threadId}/runs`, {
      headers: { 'x-gateway-api-key': stranger.workspaceKey, 'x-gateway-virtual-key': slug },
      body,
    });
    expect(await errorOf(theirs)).toMatchObject({ status: 404, code: 'thread_not_found' });
    const before = await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id);
    const keyless = await gateway.request(`/v1/threads/${threadId}/runs`, { key: tenant.workspaceKey, body });
    expect((await errorOf(keyless)).status).toBe(400);
    expect(await ratelimit.rowsOf(gateway.database.client, tenant.workspace.id)).toEqual(before);
  });
});
