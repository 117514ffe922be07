import { defined } from '../support/defined';
import { env, exports } from 'cloudflare:workers';
import { listDurableObjectIds } from 'cloudflare:test';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { errorOf, json } from '../support/envelope';
import { freshGate, remoteGate } from '../support/gates';
import { fakeProviderKey, gatewayClient } from './gateway-client';
import { executorName } from '../../src/runtime/workers/run-host';
import { othersRemain } from '../../src/runtime/workers/run-executor';

/**
 * Runs and rate limits inside workerd, as on Cloudflare: the Worker entry, its Durable Objects
 * (RunExecutor, where runs execute; RateLimitCounter for counters: GATEWAY_RATE_LIMIT_STORE is
 * "durable-object" in vitest.config.ts), a real sqld, and the fake Chat Completions server
 * (test/support/fake-upstream.ts, served from Node by test/support/workers-global-setup.ts) as the provider. The
 * client is the official OpenAI SDK, running in workerd too, its fetch the Worker's own.
 */

const API_KEY = inject('workersTenant').runsWorkspaceKey;
const MODEL = 'fake-model';

let openai: OpenAI;
let headers: Record<string, string>;
let assistantId: string;

/** Calls the Worker (a service binding to its default export) with the workspace key. */
function call(path: string, init: { method?: string; body?: unknown; headers?: Record<string, string> } = {}) {
  const sent: Record<string, string> = { 'x-gateway-api-key': API_KEY, ...init.headers };
  if (init.body !== undefined) sent['content-type'] = 'application/json';
  return exports.default.fetch(`http://gateway${path}`, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers: sent,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
}

/**
 * A user message that makes the fake provider answer as `scenario` says (fake-upstream.ts): one
 * scenario per model turn when a list.
 */
const ask = (text: string, scenario: Record<string, unknown> | Record<string, unknown>[]) => ({
  messages: [{ role: 'user' as const, content: `${text}\n#fake ${JSON.stringify(scenario)}` }],
});

beforeAll(async () => {
  const slug = `fake-${crypto.randomUUID().slice(0, 8)}`;
  expect(await fakeProviderKey(API_KEY, slug)).toMatchObject({
    object: 'virtual_key',
    slug,
    base_url: inject('upstreamUrl'),
  });
  headers = { 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': slug };
  openai = gatewayClient(headers);
  assistantId = (await openai.beta.assistants.create({ model: MODEL, instructions: 'Be brief.' })).id;
});

async function runOf(threadId: string, runId: string) {
  return json(await call(`/v1/threads/${threadId}/runs/${runId}`));
}

async function answerOf(threadId: string, runId: string): Promise<string> {
  const list = await json(await call(`/v1/threads/${threadId}/messages?run_id=${runId}`));
  return list.data[0].content[0].text.value;
}

/** The RunExecutor object of a run: where it executes, rather than in a request's waitUntil. */
const executorOf = (runId: string) =>
  env.RUN_EXECUTOR.idFromName(executorName(runId, Number(env.GATEWAY_RUN_EXECUTORS))).toString();
const executorIds = async () => (await listDurableObjectIds(env.RUN_EXECUTOR)).map((id) => id.toString());

/** Reads a run until it has `status`, or a deadline passes (then the caller's assertion fails). */
async function waitForRun(threadId: string, runId: string, status: string) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const run = await runOf(threadId, runId);
    if (run.status === status || Date.now() > deadline) return run;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('runs on workerd', () => {
  it('streams a run read with the SDK’s stream parser: every delta, then the completed run', async () => {
    const stream = openai.beta.threads.createAndRunStream({
      assistant_id: assistantId,
      thread: ask('Stream please', { reply: 'One two three four five', chunk_delay_ms: 2 }),
    });
    const deltas: string[] = [];
    const events: string[] = [];
    stream.on('textDelta', (delta) => deltas.push(defined(delta.value)));
    stream.on('event', (event) => events.push(event.event));
    const run = await stream.finalRun();
    expect(deltas).toEqual(['One', ' two', ' three', ' four', ' five']);
    expect(run).toMatchObject({ status: 'completed', model: MODEL, usage: { completion_tokens: 5 } });
    expect(events[0]).toBe('thread.created');
    expect(events.at(-1)).toBe('thread.run.completed');
    // Stored as streamed.
    expect(await answerOf(run.thread_id, run.id)).toBe('One two three four five');
  });

  it('continues a run after tool outputs in the same executor, streamed both times', async () => {
    const first = openai.beta.threads.createAndRunStream({
      assistant_id: assistantId,
      tools: [
        {
          type: 'function',
          function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } },
        },
      ],
      thread: ask('Look it up', [{ tool_calls: [{ name: 'lookup', arguments: { q: 'x' } }] }, { reply: 'Found it' }]),
    });
    const waiting = await first.finalRun();
    expect(waiting.status).toBe('requires_action');
    const calls = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    expect(calls.map((c) => c.function.name)).toEqual(['lookup']);
    const next = openai.beta.threads.runs.submitToolOutputsStream(waiting.id, {
      thread_id: waiting.thread_id,
      tool_outputs: [{ tool_call_id: defined(calls[0]).id, output: '42' }],
    });
    const run = await next.finalRun();
    expect(run).toMatchObject({ id: waiting.id, status: 'completed' });
    expect(await answerOf(run.thread_id, run.id)).toBe('Found it');
  });

  it('executes a non-streamed run in its RunExecutor object, polled to completion with the SDK', async () => {
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: ask('Poll me', { reply: 'Polled to the end', chunk_delay_ms: 5 }) },
      { pollIntervalMs: 50 },
    );
    expect(run).toMatchObject({ status: 'completed', usage: { completion_tokens: 4 } });
    expect(await answerOf(run.thread_id, run.id)).toBe('Polled to the end');
    expect(await executorIds()).toContain(executorOf(run.id));
  });

  it('executes runs in GATEWAY_RUN_EXECUTORS objects, not in an object of their own each', async () => {
    const runs = await Promise.all(
      ['One', 'Two', 'Three', 'Four'].map((text) =>
        openai.beta.threads.createAndRunPoll(
          { assistant_id: assistantId, thread: ask(text, { reply: `${text} done`, chunk_delay_ms: 5 }) },
          { pollIntervalMs: 50 },
        ),
      ),
    );
    const pool = Array.from({ length: Number(env.GATEWAY_RUN_EXECUTORS) }, (_, i) =>
      env.RUN_EXECUTOR.idFromName(`executor-${i}`).toString(),
    );
    for (const run of runs) {
      expect(run.status).toBe('completed');
      expect(pool).toContain(executorOf(run.id));
    }
    // Every object the namespace ever had is one of the pool's (this file's runs and the others').
    expect((await executorIds()).filter((id) => !pool.includes(id))).toEqual([]);
  });

  it('an executor’s alarm waits for the runs under way when it started, not for those handed over since', async () => {
    const executions = new Set<Promise<void>>();
    let endFirst = () => {};
    const first = new Promise<void>((resolve) => (endFirst = resolve));
    executions.add(first);
    const answer = othersRemain(executions);
    // A run handed over while the alarm waits, still executing when the first ends.
    executions.add(new Promise<void>(() => {}));
    executions.delete(first);
    endFirst();
    expect(await answer).toBe(true);
    expect(await othersRemain(new Set())).toBe(false);
  });

  it('finishes and stores a streamed run whose client disconnected after the first delta', async () => {
    // More deltas than the event stream queues (64): a stream that did not notice its reader leave
    // would hold the run at the first full queue.
    const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
    const response = await call('/v1/threads/runs', {
      headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']) },
      body: {
        assistant_id: assistantId,
        stream: true,
        thread: ask('Leave early', { reply: words, chunk_delay_ms: 2 }),
      },
    });
    expect(response.status).toBe(200);
    const reader = defined(response.body).pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!text.includes('event: thread.message.delta')) {
      const { done, value } = await reader.read();
      if (done) break;
      text += value;
    }
    // The client goes away mid-answer.
    await reader.cancel();
    expect(text).not.toContain('thread.run.completed');
    const created = JSON.parse(defined(defined(/event: thread\.run\.created\ndata: (.*)\n/.exec(text))[1]));

    const run = await waitForRun(created.thread_id, created.id, 'completed');
    expect(run.status).toBe('completed');
    expect(await answerOf(created.thread_id, created.id)).toBe(words);
    expect(await executorIds()).toContain(executorOf(created.id));
  });
  it('sends a call again whose kept-alive connection the upstream had closed: every run completes', async () => {
    // This upstream drops every connection that carried an answer once a call arrives on it, as a
    // server that closed it while idle does to the call sent on it before workerd noticed.
    const slug = `dropping-${crypto.randomUUID().slice(0, 8)}`;
    const created = await call('/v1/virtual-keys', {
      body: { slug, provider: 'openai', base_url: inject('droppingUpstreamUrl'), api_key: 'sk-fake-provider-key' },
    });
    expect(created.status).toBe(200);
    const dropping = new OpenAI({
      apiKey: 'unused-by-the-gateway',
      baseURL: 'http://gateway/v1',
      defaultHeaders: { ...headers, 'x-gateway-virtual-key': slug },
      maxRetries: 0,
      fetch: (url, init) => exports.default.fetch(url, init),
    });
    // One after another, so that each call after the first finds the last one's connection kept.
    for (const text of ['First', 'Second', 'Third']) {
      const run = await dropping.beta.threads.createAndRunPoll(
        { assistant_id: assistantId, thread: ask(text, { reply: `${text} answer` }) },
        { pollIntervalMs: 50 },
      );
      expect(run).toMatchObject({ status: 'completed', last_error: null });
      expect(await answerOf(run.thread_id, run.id)).toBe(`${text} answer`);
    }
  });

  it('cancels a streamed run mid-answer in its executor: cancelled, the partial message incomplete', async () => {
    const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
    const response = await call('/v1/threads/runs', {
      headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']) },
      body: { assistant_id: assistantId, stream: true, thread: ask('Cancel me', { reply: words, chunk_delay_ms: 20 }) },
    });
    const reader = defined(response.body).pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    let cancelled = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += value;
      if (!cancelled && text.split('event: thread.message.delta').length > 3) {
        cancelled = true;
        const run = JSON.parse(defined(defined(/event: thread\.run\.created\ndata: (.*)\n/.exec(text))[1]));
        const answer = await call(`/v1/threads/${run.thread_id}/runs/${run.id}/cancel`, { method: 'POST' });
        expect((await json(answer)).status).toBe('cancelling');
      }
    }
    // The cancel reached the executor while the answer was still coming (renewing the lease would
    // only notice it 10 seconds later, after the last word).
    const names = [...text.matchAll(/^event: (.*)$/gm)].map((match) => match[1]);
    expect(names.slice(-3)).toEqual(['thread.message.incomplete', 'thread.run.cancelled', 'done']);
    const run = JSON.parse(defined(defined(/event: thread\.run\.created\ndata: (.*)\n/.exec(text))[1]));
    const list = await json(await call(`/v1/threads/${run.thread_id}/messages?run_id=${run.id}`));
    expect(list.data[0]).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'run_cancelled' } });
    expect(list.data[0].content[0].text.value.split(' ').length).toBeLessThan(200);
  });
});

describe('rate limits in Durable Objects', () => {
  const POLICIES = '/v1/policies/rate-limits';

  /** Creates a non-streamed run of `model`; answers the response. */
  const createRun = (model: string) =>
    call('/v1/threads/runs', {
      headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']) },
      body: { assistant_id: assistantId, model, thread: ask('Count me', { reply: 'Counted' }) },
    });

  async function policy(model: string, value: number): Promise<string> {
    const response = await call(POLICIES, {
      body: {
        type: 'requests',
        unit: 'rpd',
        value,
        conditions: [{ key: 'model', value: model }],
        group_by: [{ key: 'api_key' }],
      },
    });
    expect(response.status).toBe(200);
    return (await json(response)).id;
  }

  /** Sends `n` creates at once; answers the admitted runs and the refusals. */
  async function burst(model: string, n: number) {
    const responses = await Promise.all(Array.from({ length: n }, () => createRun(model)));
    const admitted = [];
    const refused = [];
    for (const response of responses) {
      if (response.status === 200) admitted.push(await json(response));
      else refused.push({ ...(await errorOf(response)), retryAfter: response.headers.get('retry-after') });
    }
    return { admitted, refused };
  }

  // Daily windows (`rpd`), so that no window ends while a test counts, short of midnight UTC.
  it('admits exactly the limit under concurrency, refuses the rest with 429, and a refusal consumes nothing', async () => {
    // Two policies on one model; the wide one's counter comes first in the store's fixed order, so
    // every refusal by the narrow one has to give back its reservation in the wide one.
    const model = `limited-${crypto.randomUUID().slice(0, 8)}`;
    const [first, second] = [await policy(model, 100), await policy(model, 100)].sort() as [string, string];
    const WIDE = 10;
    const NARROW = 3;
    expect((await call(`${POLICIES}/${first}`, { method: 'PUT', body: { value: WIDE } })).status).toBe(200);
    expect((await call(`${POLICIES}/${second}`, { method: 'PUT', body: { value: NARROW } })).status).toBe(200);

    const one = await burst(model, 3 * NARROW);
    expect(one.admitted).toHaveLength(NARROW);
    expect(one.refused).toHaveLength(2 * NARROW);
    for (const refusal of one.refused) {
      expect(refusal).toMatchObject({ status: 429, type: 'requests', code: 'rate_limit_exceeded', param: null });
      expect(refusal.message).toContain(second);
      expect(Number(refusal.retryAfter)).toBeGreaterThanOrEqual(1);
    }

    // GET …/counters reads the window's counter objects through its index, and the refusals
    // from the narrow policy's ledger object; the wide one refused nothing.
    const counters = async (id: string) => json(await call(`${POLICIES}/${id}/counters`));
    const narrow = await counters(second);
    expect(narrow).toMatchObject({ groups: [{ used: NARROW, group_hash: null }], total_groups: 1 });
    expect(narrow.groups[0].group).toEqual([{ key: 'api_key', value: expect.any(String) }]);
    expect(narrow.refusals).toHaveLength(2 * NARROW);
    for (const refusal of narrow.refusals) {
      expect(refusal).toMatchObject({ requested: 1, used: NARROW, limit: NARROW, group: narrow.groups[0].group });
    }
    expect(await counters(first)).toMatchObject({ groups: [{ used: NARROW }], total_groups: 1, refusals: [] });

    // Without the narrow policy, the wide one has room for exactly what was admitted so far: the
    // 2 × NARROW refused requests took nothing from it.
    expect((await call(`${POLICIES}/${second}`, { method: 'DELETE' })).status).toBe(200);
    const two = await burst(model, WIDE);
    expect(two.admitted).toHaveLength(WIDE - NARROW);
    expect(two.refused).toHaveLength(NARROW);
    expect(two.refused.every((refusal) => refusal.status === 429 && refusal.message.includes(first))).toBe(true);
    expect(await counters(first)).toMatchObject({ groups: [{ used: WIDE }], total_groups: 1 });
    expect((await counters(first)).refusals).toHaveLength(NARROW);

    // The counters were objects, not rows; the admitted runs all ran.
    expect((await listDurableObjectIds(env.RATE_LIMIT_COUNTER)).length).toBeGreaterThanOrEqual(2);
    for (const run of [...one.admitted, ...two.admitted]) {
      expect((await waitForRun(run.thread_id, run.id, 'completed')).status).toBe('completed');
    }
  });
  it('reserves tokens in the counter objects, refuses while the reservation fills the value, and settles it against the real usage', async () => {
    /** A tokens policy of value 1 on a model of its own, and a run of that model. */
    async function limited() {
      const model = `tokens-${crypto.randomUUID().slice(0, 8)}`;
      const created = await call(POLICIES, {
        body: {
          type: 'tokens',
          unit: 'rpd',
          value: 1,
          conditions: [{ key: 'model', value: model }],
          group_by: [{ key: 'api_key' }],
        },
      });
      expect(created.status).toBe(200);
      const run = (scenario: Record<string, unknown>) =>
        call('/v1/threads/runs', {
          headers: { 'x-gateway-virtual-key': defined(headers['x-gateway-virtual-key']) },
          body: { assistant_id: assistantId, model, thread: ask('Count me', scenario) },
        });
      return { id: (await json(created)).id as string, run };
    }
    /** Sends `next()` until `done` holds of its answer, or a deadline passes; answers the last. */
    async function until(next: () => Promise<Response>, done: (response: Response) => Promise<boolean>) {
      for (const deadline = Date.now() + 10_000; ;) {
        const response = await next();
        if ((await done(response.clone())) || Date.now() > deadline) return response;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }

    // A failing run holds a reservation past the value of 1 while it executes (its answer held at a
    // gate: it is refused meanwhile), then gives it back: a run is admitted again (just after the
    // failure is recorded), which no charge would allow.
    const failing = await limited();
    const held = remoteGate(inject('upstreamUrl'), freshGate('failing'));
    const failed = await json(await failing.run({ status: 500, hold: held.name }));
    expect(await errorOf(await failing.run({ status: 500 }))).toMatchObject({
      status: 429,
      type: 'tokens',
      code: 'rate_limit_exceeded',
    });
    await held.open();
    expect((await waitForRun(failed.thread_id, failed.id, 'failed')).status).toBe('failed');
    const again = await until(
      () => failing.run({ status: 500 }),
      async (response) => response.status === 200,
    );
    expect(again.status).toBe(200);

    // Of ten at once, one is admitted: its reservation refuses the rest (its answer held at a gate
    // until all ten are answered, however slowly).
    const counted = await limited();
    const gate = remoteGate(inject('upstreamUrl'), freshGate('counted'));
    const responses = await Promise.all(
      Array.from({ length: 10 }, () => counted.run({ reply: 'Counted', hold: gate.name })),
    );
    const admitted = [];
    const refusals = [];
    for (const response of responses) {
      if (response.status === 200) admitted.push(await json(response));
      else refusals.push(await errorOf(response));
    }
    expect(admitted).toHaveLength(1);
    await gate.open();
    const done = await waitForRun(admitted[0].thread_id, admitted[0].id, 'completed');
    expect(done.status).toBe('completed');
    expect(await gate.state()).toMatchObject({ waiting: 0, passed: 1 });
    // Each was refused by the reservation, more than the run then used.
    for (const refusal of refusals) {
      expect(refusal).toMatchObject({ status: 429, type: 'tokens', code: 'rate_limit_exceeded' });
      expect(Number(/Used (\d+)/.exec(refusal.message)?.[1])).toBeGreaterThan(done.usage.total_tokens);
    }

    // Settled (just after the run's last write): the counter holds its real tokens, not its
    // reservation. Every request meanwhile is refused: the counter never drops below the value.
    const settledMessage = `policy ${counted.id} on tokens per day: Limit 1, Used ${done.usage.total_tokens}.`;
    const refused = await errorOf(
      await until(
        () => counted.run({ reply: 'Counted' }),
        async (response) => response.status === 200 || (await errorOf(response)).message.includes(settledMessage),
      ),
    );
    expect(refused).toMatchObject({ status: 429, type: 'tokens' });
    expect(refused.message).toContain(settledMessage);
  });
});
