import { defined } from '../../support/defined';
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { count, eq } from 'drizzle-orm';
import { messages, runs, threads } from '../../../src/db/schema';
import { completionTokens, fakeThread, promptTokens, type FakeUpstreamServer } from '../../support/fake-upstream';
import { errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { collapse, parseEvents, referenceOrder } from '../../support/run-stream';
import { startRunsSetup, WEATHER_TOOL } from '../../support/runs';

/**
 * Runs end to end, as users drive them: the official `openai` SDK against the real app, on a real
 * libSQL file, executing against the fake Chat Completions server over real HTTP.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let tenant: Tenant;
let openai: OpenAI;
let assistantId: string;
let headers: Record<string, string>;

beforeAll(async () => {
  ({ fake, gateway, tenant, headers, openai, assistantId } = await startRunsSetup({
    name: 'Weather bot',
    instructions: 'You answer briefly.',
  }));
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());

const lastUpstreamBody = () => defined(defined(fake.requests[fake.requests.length - 1]).body);

describe('createAndRun, not streamed', () => {
  it('answers the queued run with every documented field and its defaults', async () => {
    const run = await openai.beta.threads.createAndRun({
      assistant_id: assistantId,
      thread: fakeThread('Hello there'),
    });
    expect(run).toMatchObject({
      object: 'thread.run',
      assistant_id: assistantId,
      status: 'queued',
      required_action: null,
      last_error: null,
      started_at: null,
      cancelled_at: null,
      failed_at: null,
      completed_at: null,
      incomplete_details: null,
      model: 'fake-model',
      instructions: 'You answer briefly.',
      tools: [WEATHER_TOOL],
      metadata: {},
      usage: null,
      max_prompt_tokens: null,
      max_completion_tokens: null,
      truncation_strategy: { type: 'auto', last_messages: null },
      tool_choice: 'auto',
      parallel_tool_calls: true,
      response_format: 'auto',
      temperature: 1,
      top_p: 1,
    });
    expect(run.id).toMatch(/^run_[A-Za-z0-9]{24}$/);
    expect(run.thread_id).toMatch(/^thread_[A-Za-z0-9]{24}$/);
    expect(defined(run.expires_at) - run.created_at).toBe(600);
    const finished = await openai.beta.threads.runs.poll(run.id, { thread_id: run.thread_id }, { pollIntervalMs: 10 });
    expect(finished.status).toBe('completed');
  });

  it('createAndRunPoll reaches completed, with usage, and the answer is in the thread', async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: fakeThread('What is the capital of France?', { reply: 'Paris is the capital.' }),
      },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    expect(run.started_at).toEqual(expect.any(Number));
    expect(run.completed_at).toEqual(expect.any(Number));
    expect(run.expires_at).toBeNull();
    const sent = lastUpstreamBody();
    const expectedPrompt = promptTokens(sent.messages);
    expect(run.usage).toEqual({
      prompt_tokens: expectedPrompt,
      completion_tokens: completionTokens('Paris is the capital.'),
      total_tokens: expectedPrompt + completionTokens('Paris is the capital.'),
    });
    const page = await openai.beta.threads.messages.list(run.thread_id);
    const [answer, question] = page.data;
    expect(answer).toMatchObject({
      object: 'thread.message',
      role: 'assistant',
      status: 'completed',
      run_id: run.id,
      assistant_id: assistantId,
      content: [{ type: 'text', text: { value: 'Paris is the capital.', annotations: [] } }],
    });
    expect(question).toMatchObject({ role: 'user', run_id: null });
    expect(page.data).toHaveLength(2);
  });

  it('sends the upstream what the run says: system message, tools, sampling, JSON mode, caps, usage', async () => {
    await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        model: 'override-model',
        instructions: 'Reply in JSON.',
        temperature: 0.2,
        top_p: 0.9,
        max_completion_tokens: 300,
        parallel_tool_calls: false,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        response_format: { type: 'json_object' },
        thread: {
          messages: [
            { role: 'user', content: 'first' },
            { role: 'assistant', content: 'second' },
            { role: 'user', content: [{ type: 'text', text: 'third' }] },
          ],
        },
      },
      { pollIntervalMs: 10 },
    );
    const request = defined(fake.requests[fake.requests.length - 1]);
    expect(request.path).toBe('/v1/chat/completions');
    expect(request.headers.authorization).toBe('Bearer sk-test-provider-key');
    expect(request.body).toEqual({
      model: 'override-model',
      messages: [
        { role: 'system', content: 'Reply in JSON.' },
        { role: 'user', content: 'first' },
        { role: 'assistant', content: 'second' },
        { role: 'user', content: 'third' },
      ],
      tools: [WEATHER_TOOL],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
      response_format: { type: 'json_object' },
      temperature: 0.2,
      top_p: 0.9,
      max_completion_tokens: 300,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('cuts the thread to truncation_strategy.last_messages', async () => {
    await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        tools: [],
        truncation_strategy: { type: 'last_messages', last_messages: 2 },
        thread: {
          messages: ['one', 'two', 'three', 'four'].map((content) => ({ role: 'user' as const, content })),
        },
      },
      { pollIntervalMs: 10 },
    );
    expect(lastUpstreamBody().messages).toEqual([
      { role: 'system', content: 'You answer briefly.' },
      { role: 'user', content: 'three' },
      { role: 'user', content: 'four' },
    ]);
  });

  it('ends incomplete when the completion cap cuts the answer', async () => {
    const long = Array.from({ length: 400 }, (_, i) => `word${i}`).join(' ');
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        max_completion_tokens: 256,
        thread: fakeThread('Tell me everything', { reply: long }),
      },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('incomplete');
    expect(run.incomplete_details).toEqual({ reason: 'max_completion_tokens' });
    expect(defined(run.usage).completion_tokens).toBe(256);
    const [answer] = (await openai.beta.threads.messages.list(run.thread_id)).data;
    expect(answer).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_tokens' } });
    expect((defined(answer).content[0] as { text: { value: string } }).text.value.split(' ')).toHaveLength(256);
  });

  it('ends incomplete when the provider reports more prompt tokens than max_prompt_tokens', async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        max_prompt_tokens: 256,
        thread: fakeThread('Short', { usage: { prompt_tokens: 300 } }),
      },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('incomplete');
    expect(run.incomplete_details).toEqual({ reason: 'max_prompt_tokens' });
    expect(defined(run.usage).prompt_tokens).toBe(300);
    expect(fake.requests).toHaveLength(1);
  });

  it('ends incomplete without calling the provider when the prompt cannot fit max_prompt_tokens', async () => {
    // About 2,000 characters: 500 tokens at four characters a token, and no older history to leave out.
    const prompt = Array.from({ length: 300 }, (_, i) => `w${i}`).join(' ');
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, max_prompt_tokens: 256, thread: fakeThread(prompt) },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('incomplete');
    expect(run.incomplete_details).toEqual({ reason: 'max_prompt_tokens' });
    expect(run.usage).toEqual({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
    expect(fake.requests).toHaveLength(0);
    expect((await openai.beta.threads.messages.list(run.thread_id)).data.map((message) => message.role)).toEqual([
      'user',
    ]);
  });

  it.each([
    [500, 'server_error'],
    [503, 'server_error'],
    [429, 'rate_limit_exceeded'],
  ])('fails with last_error when the upstream answers %i', async (status, code) => {
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread('Hi', { status }) },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('failed');
    expect(run.failed_at).toEqual(expect.any(Number));
    expect(run.last_error).toMatchObject({ code, message: expect.stringContaining(`HTTP ${status}`) });
    expect(run.usage).toEqual({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
  });

  it('never repeats the provider key in last_error, even when the upstream does', async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: fakeThread('Hi', {
          status: 401,
          error: {
            error: {
              message: 'Incorrect API key provided: sk-test-provider-key.',
              type: 'invalid_request_error',
              code: 'invalid_api_key',
            },
          },
        }),
      },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('failed');
    expect(defined(run.last_error).message).toContain('HTTP 401');
    expect(defined(run.last_error).message).not.toContain('sk-test-provider-key');
    expect(gateway.logs.join('\n')).not.toContain('sk-test-provider-key');
  });
});

describe('createAndRunStream', () => {
  it('streams the text deltas, finalMessages and finalRun, in the reference order', async () => {
    const stream = openai.beta.threads.createAndRunStream({
      assistant_id: assistantId,
      tools: [],
      thread: fakeThread('Stream please', { reply: 'One two three four five', chunk_delay_ms: 2 }),
    });
    const deltas: string[] = [];
    const events: string[] = [];
    stream.on('textDelta', (delta) => deltas.push(defined(delta.value)));
    stream.on('event', (event) => events.push(event.event));
    const run = await stream.finalRun();
    const finalMessages = await stream.finalMessages();
    expect(deltas.join('')).toBe('One two three four five');
    // One delta per chunk, unless the gateway read several chunks at once (a loaded machine).
    expect(deltas.length).toBeGreaterThan(1);
    expect(run.status).toBe('completed');
    expect(defined(run.usage).completion_tokens).toBe(5);
    expect(finalMessages).toHaveLength(1);
    expect(defined(finalMessages[0]).content[0]).toMatchObject({
      type: 'text',
      text: { value: 'One two three four five' },
    });
    expect(collapse(events)).toEqual(referenceOrder(1));
  });

  it('streams a function call, then continues it with submitToolOutputsStream', async () => {
    const first = openai.beta.threads.createAndRunStream({
      assistant_id: assistantId,
      thread: fakeThread('Weather in Paris?', [
        { tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] },
        { reply: 'It is sunny in Paris.' },
      ]),
    });
    const events: string[] = [];
    const toolCallDeltas: string[] = [];
    first.on('event', (event) => events.push(event.event));
    first.on('toolCallDelta', (delta) => {
      if (delta.type === 'function' && delta.function?.arguments) toolCallDeltas.push(delta.function.arguments);
    });
    const waiting = await first.finalRun();
    expect(waiting.status).toBe('requires_action');
    expect(waiting.usage).toBeNull();
    const calls = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    expect(calls).toEqual([
      {
        id: expect.stringMatching(/^call_/),
        type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
      },
    ]);
    expect(toolCallDeltas.join('')).toBe('{"city":"Paris"}');
    expect(toolCallDeltas.length).toBeGreaterThan(1);
    expect(collapse(events)).toEqual(referenceOrder(2));

    const second = openai.beta.threads.runs.submitToolOutputsStream(waiting.id, {
      thread_id: waiting.thread_id,
      tool_outputs: [{ tool_call_id: defined(calls[0]).id, output: '{"sky":"sunny"}' }],
    });
    const text: string[] = [];
    second.on('textDelta', (delta) => text.push(defined(delta.value)));
    const done = await second.finalRun();
    expect(done.status).toBe('completed');
    expect(text.join('')).toBe('It is sunny in Paris.');

    // The upstream saw the call and its output after the thread.
    const continuation = lastUpstreamBody().messages;
    expect(continuation.slice(-2)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: defined(calls[0]).id,
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: defined(calls[0]).id, content: '{"sky":"sunny"}' },
    ]);
    // Usage spans both turns.
    const [turn1, turn2] = fake.requests.slice(-2);
    expect(defined(done.usage).prompt_tokens).toBe(
      promptTokens(defined(defined(turn1).body).messages) + promptTokens(defined(defined(turn2).body).messages),
    );

    // The tool step holds the output; polling and retrieval agree with the stream.
    const retrieved = await openai.beta.threads.runs.retrieve(done.id, { thread_id: done.thread_id });
    expect(retrieved).toEqual(done);
  });

  it('round-trips several parallel calls without streaming (submitToolOutputsAndPoll)', async () => {
    const waiting = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        thread: fakeThread('Weather in two cities?', [
          { tool_calls: [{ arguments: { city: 'Oslo' } }, { arguments: { city: 'Rome' } }] },
          {},
        ]),
      },
      { pollIntervalMs: 10 },
    );
    expect(waiting.status).toBe('requires_action');
    const calls = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    expect(calls.map((call) => JSON.parse(call.function.arguments).city)).toEqual(['Oslo', 'Rome']);

    const bad = await gateway.request(`/v1/threads/${waiting.thread_id}/runs/${waiting.id}/submit_tool_outputs`, {
      key: tenant.workspaceKey,
      body: { tool_outputs: [{ tool_call_id: defined(calls[0]).id, output: 'cold' }] },
    });
    expect(await errorOf(bad)).toMatchObject({ status: 400, param: 'tool_outputs' });
    const unknown = await gateway.request(`/v1/threads/${waiting.thread_id}/runs/${waiting.id}/submit_tool_outputs`, {
      key: tenant.workspaceKey,
      body: {
        tool_outputs: [
          { tool_call_id: 'call_nope', output: 'x' },
          { tool_call_id: defined(calls[1]).id, output: 'y' },
        ],
      },
    });
    expect(await errorOf(unknown)).toMatchObject({ status: 400, param: 'tool_outputs[0].tool_call_id' });

    const done = await openai.beta.threads.runs.submitToolOutputsAndPoll(
      waiting.id,
      {
        thread_id: waiting.thread_id,
        tool_outputs: [
          { tool_call_id: defined(calls[0]).id, output: 'cold' },
          { tool_call_id: defined(calls[1]).id, output: 'warm' },
        ],
      },
      { pollIntervalMs: 10 },
    );
    expect(done.status).toBe('completed');
    const [answer] = (await openai.beta.threads.messages.list(done.thread_id)).data;
    expect((defined(answer).content[0] as { text: { value: string } }).text.value).toBe(
      'The tool returned: cold | warm',
    );

    const again = await gateway.request(`/v1/threads/${done.thread_id}/runs/${done.id}/submit_tool_outputs`, {
      key: tenant.workspaceKey,
      body: { tool_outputs: [{ tool_call_id: defined(calls[0]).id, output: 'again' }] },
    });
    expect(await errorOf(again)).toMatchObject({ status: 400, code: 'run_not_active' });
  });

  it('sends the text of chunks read together as one delta', async () => {
    const stream = openai.beta.threads.createAndRunStream({
      assistant_id: assistantId,
      tools: [],
      thread: fakeThread('Stream please', { reply: 'One two three four five', one_write: true }),
    });
    const deltas: string[] = [];
    stream.on('textDelta', (delta) => deltas.push(defined(delta.value)));
    const run = await stream.finalRun();
    expect(run.status).toBe('completed');
    expect(deltas.join('')).toBe('One two three four five');
    // Five chunks in one write: read at once, unless a read splits it.
    expect(deltas.length).toBeLessThan(5);
  });

  it('keeps the answer that came before a fault read with it', async () => {
    for (const fault of [{ error_after_chunks: 3 }, { malformed_after_chunks: 3 }]) {
      const response = await gateway.request('/v1/threads/runs', {
        key: tenant.workspaceKey,
        headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']) },
        body: {
          assistant_id: assistantId,
          stream: true,
          thread: fakeThread('Hi', { reply: 'a b c d', one_write: true, ...fault }),
        },
      });
      const events = parseEvents(await response.text());
      expect(events.map((event) => event.event).slice(-3)).toEqual([
        'thread.message.incomplete',
        'thread.run.failed',
        'done',
      ]);
      const message = defined(events.at(-3)).data as { content: { text: { value: string } }[] };
      expect(defined(message.content[0]).text.value).toBe('a b');
    }
  });

  it('ends a stream whose upstream fails with the failed run, then done', async () => {
    const response = await gateway.request('/v1/threads/runs', {
      key: tenant.workspaceKey,
      headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']) },
      body: {
        assistant_id: assistantId,
        stream: true,
        thread: fakeThread('Hi', { reply: 'a b c d', cut_after_chunks: 3 }),
      },
    });
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = parseEvents(await response.text());
    const names = events.map((event) => event.event);
    expect(names.slice(-3)).toEqual(['thread.message.incomplete', 'thread.run.failed', 'done']);
    const failed = defined(events.at(-2)).data as { last_error: { code: string }; status: string };
    expect(failed.last_error.code).toBe('server_error');
    const message = defined(events.at(-3)).data as {
      content: { text: { value: string } }[];
      incomplete_details: unknown;
    };
    expect(message.incomplete_details).toEqual({ reason: 'run_failed' });
    expect(defined(message.content[0]).text.value).toBe('a b');
  });
});

describe('when a streamed turn writes the message and step it opens', () => {
  // Every change to a message or a step after its insert, as SQLite makes it: triggers of this test's own.
  beforeAll(async () => {
    await gateway.database.client.executeMultiple(`
      CREATE TABLE test_row_updates (tbl TEXT NOT NULL, id TEXT NOT NULL);
      CREATE TRIGGER test_message_updates AFTER UPDATE ON messages BEGIN INSERT INTO test_row_updates VALUES ('messages', new.id); END;
      CREATE TRIGGER test_step_updates AFTER UPDATE ON run_steps BEGIN INSERT INTO test_row_updates VALUES ('run_steps', new.id); END;`);
  });
  afterAll(async () => {
    await gateway.database.client.executeMultiple(
      'DROP TRIGGER test_message_updates; DROP TRIGGER test_step_updates; DROP TABLE test_row_updates;',
    );
  });

  async function updatesOf(...ids: string[]): Promise<string[]> {
    const result = await gateway.database.client.execute({
      sql: `SELECT tbl FROM test_row_updates WHERE id IN (${ids.map(() => '?').join(', ')}) ORDER BY rowid`,
      args: ids,
    });
    return result.rows.map((row) => String(row.tbl));
  }

  it('an answer that ends at once: both inserted as they end, in the run’s closing commit, never updated', async () => {
    // One write of the whole answer: the gateway reads it all before any timer can run.
    const stream = openai.beta.threads.createAndRunStream({
      assistant_id: assistantId,
      tools: [],
      thread: fakeThread('Quick', { reply: 'Quick answer.', one_write: true }),
    });
    const run = await stream.finalRun();
    expect(run.status).toBe('completed');
    const [step] = (await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id })).data;
    const details = defined(step).step_details;
    const messageId = details.type === 'message_creation' ? details.message_creation.message_id : '';
    const message = await openai.beta.threads.messages.retrieve(messageId, { thread_id: run.thread_id });
    expect(message).toMatchObject({
      status: 'completed',
      run_id: run.id,
      content: [{ type: 'text', text: { value: 'Quick answer.', annotations: [] } }],
    });
    expect(step).toMatchObject({ status: 'completed', usage: run.usage });
    expect(await updatesOf(message.id, defined(step).id)).toEqual([]);
  });

  it('an answer that streams on: inserted while it streams (a poller sees the message in progress), completed at its end', async () => {
    const reply = Array.from({ length: 20 }, (_, i) => `word${i}`).join(' ');
    const stream = openai.beta.threads.createAndRunStream({
      assistant_id: assistantId,
      tools: [],
      thread: fakeThread('Slowly', { reply, chunk_delay_ms: 100 }),
    });
    const created = new Promise<{ id: string; thread_id: string }>((resolve) => stream.on('messageCreated', resolve));
    const ended = stream.finalRun();
    const { id, thread_id } = await created;
    let seen: string | null = null;
    let running = true;
    void ended.finally(() => (running = false));
    while (seen === null && running) {
      const found = await openai.beta.threads.messages.retrieve(id, { thread_id }).catch(() => null);
      if (found) seen = found.status;
      else await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(seen).toBe('in_progress');
    const run = await ended;
    expect(run.status).toBe('completed');
    const message = await openai.beta.threads.messages.retrieve(id, { thread_id });
    expect(message).toMatchObject({ status: 'completed', content: [{ type: 'text', text: { value: reply } }] });
    const [step] = (await openai.beta.threads.runs.steps.list(run.id, { thread_id })).data;
    expect(step).toMatchObject({ status: 'completed', step_details: { message_creation: { message_id: id } } });
    expect((await updatesOf(id, defined(step).id)).sort()).toEqual(['messages', 'run_steps']);
  });
});

describe('what is refused before anything is created', () => {
  const countRows = async () => {
    const { db } = gateway.database;
    const [[t], [m], [r]] = await Promise.all([
      db.select({ n: count() }).from(threads).where(eq(threads.workspaceId, tenant.workspace.id)),
      db.select({ n: count() }).from(messages).where(eq(messages.workspaceId, tenant.workspace.id)),
      db.select({ n: count() }).from(runs).where(eq(runs.workspaceId, tenant.workspace.id)),
    ]);
    return [defined(t).n, defined(m).n, defined(r).n];
  };

  const base = { assistant_id: '', thread: { messages: [{ role: 'user', content: 'Hi' }] } };
  const cases: [string, Record<string, unknown>, { status: number; code: string; param: string | null }][] = [
    [
      'assistant_id missing',
      { assistant_id: undefined },
      { status: 400, code: 'missing_required_parameter', param: 'assistant_id' },
    ],
    ['assistant_id unknown', { assistant_id: 'asst_nope' }, { status: 404, code: 'assistant_not_found', param: null }],
    [
      'a role other than user/assistant',
      { thread: { messages: [{ role: 'system', content: 'x' }] } },
      { status: 400, code: 'invalid_value', param: 'thread.messages[0].role' },
    ],
    [
      'content of the wrong type',
      { thread: { messages: [{ role: 'user', content: 5 }] } },
      { status: 400, code: 'invalid_value', param: 'thread.messages[0].content' },
    ],
    [
      'an empty content array',
      { thread: { messages: [{ role: 'user', content: [] }] } },
      { status: 400, code: 'array_below_min_length', param: 'thread.messages[0].content' },
    ],
    [
      'an image_file part of no file',
      {
        thread: { messages: [{ role: 'user', content: [{ type: 'image_file', image_file: { file_id: 'file_1' } }] }] },
      },
      { status: 400, code: 'invalid_value', param: 'thread.messages[0].content[0].image_file.file_id' },
    ],
    [
      'a code_interpreter attachment of no file',
      {
        thread: {
          messages: [
            { role: 'user', content: 'x', attachments: [{ file_id: 'file_1', tools: [{ type: 'code_interpreter' }] }] },
          ],
        },
      },
      { status: 404, code: 'file_not_found', param: 'thread.messages[0].attachments[0].file_id' },
    ],
    [
      'an unknown file_search attachment',
      {
        thread: {
          messages: [
            { role: 'user', content: 'x', attachments: [{ file_id: 'file_1', tools: [{ type: 'file_search' }] }] },
          ],
        },
      },
      { status: 404, code: 'file_not_found', param: 'thread.messages[0].attachments[0].file_id' },
    ],
    [
      '21 tools',
      { tools: Array.from({ length: 21 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } })) },
      { status: 400, code: 'array_above_max_length', param: 'tools' },
    ],
    [
      'a function named as the code_interpreter tool’s own',
      { tools: [{ type: 'code_interpreter' }, { type: 'function', function: { name: 'python' } }] },
      { status: 400, code: 'invalid_value', param: 'tools[1].function.name' },
    ],
    [
      'a function named as the file_search tool’s own',
      { tools: [{ type: 'file_search' }, { type: 'function', function: { name: 'file_search' } }] },
      { status: 400, code: 'invalid_value', param: 'tools[1].function.name' },
    ],
    [
      'an unknown tool type',
      { tools: [{ type: 'browser' }] },
      { status: 400, code: 'invalid_value', param: 'tools[0].type' },
    ],
    [
      'two functions of one name',
      { tools: [WEATHER_TOOL, WEATHER_TOOL] },
      { status: 400, code: 'invalid_value', param: 'tools[1].function.name' },
    ],
    ['temperature above 2', { temperature: 2.5 }, { status: 400, code: 'value_above_maximum', param: 'temperature' }],
    ['temperature below 0', { temperature: -0.1 }, { status: 400, code: 'value_below_minimum', param: 'temperature' }],
    ['top_p above 1', { top_p: 1.5 }, { status: 400, code: 'value_above_maximum', param: 'top_p' }],
    [
      'max_prompt_tokens below 256',
      { max_prompt_tokens: 255 },
      { status: 400, code: 'value_below_minimum', param: 'max_prompt_tokens' },
    ],
    [
      'max_completion_tokens below 256',
      { max_completion_tokens: 100 },
      { status: 400, code: 'value_below_minimum', param: 'max_completion_tokens' },
    ],
    [
      'max_completion_tokens not an integer',
      { max_completion_tokens: 300.5 },
      { status: 400, code: 'invalid_type', param: 'max_completion_tokens' },
    ],
    [
      'metadata with 17 pairs',
      { metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) },
      { status: 400, code: 'invalid_value', param: 'metadata' },
    ],
    [
      'a metadata key of 65 characters',
      { metadata: { ['k'.repeat(65)]: 'v' } },
      { status: 400, code: 'string_above_max_length', param: 'metadata' },
    ],
    [
      'a metadata value of 513 characters',
      { metadata: { k: 'v'.repeat(513) } },
      { status: 400, code: 'string_above_max_length', param: 'metadata.k' },
    ],
    [
      'last_messages without a number',
      { truncation_strategy: { type: 'last_messages' } },
      { status: 400, code: 'invalid_value', param: 'truncation_strategy.last_messages' },
    ],
    [
      'an unknown truncation type',
      { truncation_strategy: { type: 'middle' } },
      { status: 400, code: 'invalid_value', param: 'truncation_strategy.type' },
    ],
    [
      'tool_choice not a choice',
      { tool_choice: 'sometimes' },
      { status: 400, code: 'invalid_value', param: 'tool_choice' },
    ],
    [
      'tool_choice naming a missing function',
      { tool_choice: { type: 'function', function: { name: 'nope' } } },
      { status: 400, code: 'invalid_value', param: 'tool_choice.function.name' },
    ],
    [
      'tool_choice forcing file_search without it',
      { tool_choice: { type: 'file_search' } },
      { status: 400, code: 'invalid_value', param: 'tool_choice.type' },
    ],
    [
      'tool_choice forcing code_interpreter without it',
      { tool_choice: { type: 'code_interpreter' } },
      { status: 400, code: 'invalid_value', param: 'tool_choice.type' },
    ],
    [
      'tool_choice required without tools',
      { tools: [], tool_choice: 'required' },
      { status: 400, code: 'invalid_value', param: 'tool_choice' },
    ],
    [
      'response_format unknown',
      { response_format: { type: 'xml' } },
      { status: 400, code: 'invalid_value', param: 'response_format.type' },
    ],
    ['stream not a boolean', { stream: 'yes' }, { status: 400, code: 'invalid_type', param: 'stream' }],
    [
      'an unknown field',
      { additional_instructions: 'x' },
      { status: 400, code: 'unknown_parameter', param: 'additional_instructions' },
    ],
  ];

  it.each(cases)('%s', async (_name, change, expected) => {
    const before = await countRows();
    const body = { ...base, assistant_id: assistantId, ...change };
    const response = await gateway.request('/v1/threads/runs', {
      key: tenant.workspaceKey,
      headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']) },
      body,
    });
    expect(await errorOf(response)).toMatchObject(expected);
    expect(await countRows()).toEqual(before);
  });

  it('requires the virtual key header (400), refuses an unknown one (401), and checks the beta header', async () => {
    const body = { assistant_id: assistantId, thread: fakeThread('Hi') };
    const missing = await gateway.request('/v1/threads/runs', { key: tenant.workspaceKey, body });
    expect(await errorOf(missing)).toMatchObject({
      status: 400,
      code: 'missing_virtual_key',
      param: 'x-gateway-virtual-key',
    });
    const unknown = await gateway.request('/v1/threads/runs', {
      key: tenant.workspaceKey,
      body,
      headers: { 'x-gateway-virtual-key': 'nope' },
    });
    expect(await errorOf(unknown)).toMatchObject({ status: 401, code: 'invalid_virtual_key' });
    for (const [header, value, status] of [
      ['vendor-beta', 'assistants=v2', 200],
      ['openai-beta', 'assistants=v2', 200],
      ['vendor-beta', 'assistants=v1', 400],
      ['openai-beta', 'assistants=v3', 400],
    ] as const) {
      const response = await gateway.request('/v1/threads/runs', {
        key: tenant.workspaceKey,
        body,
        headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']), [header]: value },
      });
      expect(response.status).toBe(status);
      if (status === 400) expect(await errorOf(response)).toMatchObject({ code: 'invalid_beta', param: header });
    }
    await gateway.tasks.drain(5_000);
  });

  it("answers 404 for another workspace's run, thread and messages", async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread('Hi') },
      { pollIntervalMs: 10 },
    );
    const stranger = await gateway.tenant();
    for (const path of [
      `/v1/threads/${run.thread_id}/runs/${run.id}`,
      `/v1/threads/${run.thread_id}`,
      `/v1/threads/${run.thread_id}/messages`,
    ]) {
      const response = await gateway.request(path, { key: stranger.workspaceKey });
      expect(response.status).toBe(404);
    }
    const cancel = await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}/cancel`, {
      key: stranger.workspaceKey,
      method: 'POST',
    });
    expect(await errorOf(cancel)).toMatchObject({ status: 404, code: 'run_not_found' });
  });
});

describe('the Azure OpenAI adapter', () => {
  it('calls the deployment path with api-version and the api-key header', async () => {
    const slug = await gateway.virtualKey(tenant, {
      provider: 'azure-openai',
      base_url: fake.url,
      api_version: '2024-10-21',
      deployment: 'gpt-4o-prod',
      api_key: 'azure-secret',
    } as never);
    const azure = gateway.openai({ ...headers, 'x-gateway-virtual-key': slug });
    const run = await azure.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, tools: [], thread: fakeThread('Hi from Azure', { reply: 'Azure says hi' }) },
      { pollIntervalMs: 10 },
    );
    expect(run.status).toBe('completed');
    const request = defined(fake.requests[fake.requests.length - 1]);
    expect(request.path).toBe('/openai/deployments/gpt-4o-prod/chat/completions');
    expect(request.query).toEqual({ 'api-version': '2024-10-21' });
    expect(request.headers['api-key']).toBe('azure-secret');
    expect(request.headers.authorization).toBeUndefined();
  });
});

describe('reading runs and threads', () => {
  it('pages a thread’s messages with cursors and filters them by run', async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistantId,
        tools: [],
        thread: { messages: ['m1', 'm2', 'm3', 'm4'].map((content) => ({ role: 'user' as const, content })) },
      },
      { pollIntervalMs: 10 },
    );
    const firstPage = await json(
      await gateway.request(`/v1/threads/${run.thread_id}/messages?limit=2&order=asc`, { key: tenant.workspaceKey }),
    );
    expect(
      firstPage.data.map((m: { content: { text: { value: string } }[] }) => defined(m.content[0]).text.value),
    ).toEqual(['m1', 'm2']);
    expect(firstPage.has_more).toBe(true);
    const next = await json(
      await gateway.request(`/v1/threads/${run.thread_id}/messages?limit=10&order=asc&after=${firstPage.last_id}`, {
        key: tenant.workspaceKey,
      }),
    );
    expect(next.data).toHaveLength(3);
    expect(next.has_more).toBe(false);
    const byRun = await json(
      await gateway.request(`/v1/threads/${run.thread_id}/messages?run_id=${run.id}`, { key: tenant.workspaceKey }),
    );
    expect(byRun.data).toHaveLength(1);
    expect(byRun.data[0].role).toBe('assistant');
    const thread = await openai.beta.threads.retrieve(run.thread_id);
    expect(thread).toMatchObject({ id: run.thread_id, object: 'thread', metadata: {}, tool_resources: {} });
  });

  it('tells pollers how often to ask while a run is going', async () => {
    const run = await openai.beta.threads.createAndRun({
      assistant_id: assistantId,
      thread: fakeThread('slowly', { first_byte_delay_ms: 300 }),
    });
    const going = await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}`, { key: tenant.workspaceKey });
    expect(going.headers.get('openai-poll-after-ms')).toBe('250');
    const done = await openai.beta.threads.runs.poll(run.id, { thread_id: run.thread_id }, { pollIntervalMs: 10 });
    expect(done.status).toBe('completed');
    const after = await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}`, { key: tenant.workspaceKey });
    expect(after.headers.get('openai-poll-after-ms')).toBeNull();
  });
});
