import { defined } from '../../support/defined';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createNodeApp } from '../../../src/runtime/node/app';
import { createNodeDeps } from '../../../src/runtime/node/deps';
import {
  fakeDirective,
  startFakeUpstream,
  type FakeScenario,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { freshGate } from '../../support/gates';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { waitFor } from '../../support/wait';

/**
 * How runs end when things do not go to plan: cancelled, expired, upstream silence and faults, a
 * client that leaves mid-stream, and an executor that stops (a crashed process).
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let tenant: Tenant;
let virtualKey: string;
let assistantId: string;

const TIMEOUTS = { GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: '300', GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS: '300' };

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway({ env: TIMEOUTS });
  tenant = await gateway.tenant();
  virtualKey = await gateway.virtualKey(tenant, { base_url: fake.baseURL });
  const assistant = await json(
    await gateway.request('/v1/assistants', {
      key: tenant.workspaceKey,
      body: {
        model: 'fake-model',
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
      },
    }),
  );
  assistantId = assistant.id;
  // One run first, so that no test's 300 ms limits measure the gateway warming up on a busy machine.
  expect((await createRun({ reply: 'Warm.' })).status).toBe(200);
  await gateway.tasks.drain(10_000);
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());

function createRun(scenario: FakeScenario | FakeScenario[], extra: Record<string, unknown> = {}, target = gateway) {
  return target.request('/v1/threads/runs', {
    key: tenant.workspaceKey,
    headers: { 'x-gateway-virtual-key': virtualKey },
    body: {
      assistant_id: assistantId,
      thread: { messages: [{ role: 'user', content: `Go\n${fakeDirective(scenario)}` }] },
      ...extra,
    },
  });
}

async function runOf(threadId: string, runId: string, target = gateway) {
  return json(await target.request(`/v1/threads/${threadId}/runs/${runId}`, { key: tenant.workspaceKey }));
}

/** Reads server-sent events from a streamed response as they arrive. */
async function* events(response: Response): AsyncGenerator<{ event: string; data: any }> {
  const reader = defined(response.body).pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += value;
      let end: number;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const [eventLine, dataLine] = block.split('\n');
        const data = defined(dataLine).slice(6);
        yield { event: defined(eventLine).slice(7), data: data === '[DONE]' ? data : JSON.parse(data) };
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

describe('cancel', () => {
  it('stops a streamed run mid-answer: cancelled, partial message incomplete, upstream closed', async () => {
    const response = await createRun(
      { reply: Array.from({ length: 200 }, (_, i) => `w${i}`).join(' '), chunk_delay_ms: 20 },
      { stream: true },
    );
    const seen: string[] = [];
    let run: { id: string; thread_id: string } | undefined;
    let cancelled: any;
    for await (const { event, data } of events(response)) {
      seen.push(event);
      if (event === 'thread.run.created') run = data;
      if (event === 'thread.message.delta' && seen.filter((e) => e === 'thread.message.delta').length === 3) {
        const answer = await gateway.request(`/v1/threads/${defined(run).thread_id}/runs/${defined(run).id}/cancel`, {
          key: tenant.workspaceKey,
          method: 'POST',
        });
        expect((await json(answer)).status).toBe('cancelling');
      }
      if (event === 'thread.run.cancelled') cancelled = data;
    }
    expect(seen.slice(-3)).toEqual(['thread.message.incomplete', 'thread.run.cancelled', 'done']);
    expect(cancelled).toMatchObject({ status: 'cancelled', cancelled_at: expect.any(Number) });
    const messages = await json(
      await gateway.request(`/v1/threads/${defined(run).thread_id}/messages?run_id=${defined(run).id}`, {
        key: tenant.workspaceKey,
      }),
    );
    const [message] = messages.data;
    expect(message).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'run_cancelled' } });
    expect(message.content[0].text.value.split(' ').length).toBeGreaterThanOrEqual(3);
    expect(message.content[0].text.value.split(' ').length).toBeLessThan(200);
    await waitFor(
      async () => fake.inFlight,
      (n) => n === 0,
    );
    expect(fake.inFlight).toBe(0);
    expect(defined(fake.requests[0]).outcome).toBe('cancelled');
  });

  it('cancels a run waiting for tool outputs at once, and refuses to cancel a finished one', async () => {
    const waiting = await json(await createRun({ tool_calls: 1 }));
    const run = await waitFor(
      () => runOf(waiting.thread_id, waiting.id),
      (r) => r.status === 'requires_action',
    );
    expect(run.status).toBe('requires_action');
    const cancelled = await json(
      await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}/cancel`, {
        key: tenant.workspaceKey,
        method: 'POST',
      }),
    );
    expect(cancelled).toMatchObject({ status: 'cancelled', required_action: null, usage: expect.any(Object) });
    expect(cancelled.usage.total_tokens).toBeGreaterThan(0);
    const again = await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}/cancel`, {
      key: tenant.workspaceKey,
      method: 'POST',
    });
    expect(await errorOf(again)).toMatchObject({ status: 400, code: 'run_not_active' });
    const submit = await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}/submit_tool_outputs`, {
      key: tenant.workspaceKey,
      body: { tool_outputs: [{ tool_call_id: 'call_x', output: 'x' }] },
    });
    expect(await errorOf(submit)).toMatchObject({ status: 400, code: 'run_not_active' });
  });
});

describe('expiry', () => {
  it('expires a run left waiting for tool outputs past expires_at', async () => {
    const waiting = await json(await createRun({ tool_calls: 1 }));
    await waitFor(
      () => runOf(waiting.thread_id, waiting.id),
      (r) => r.status === 'requires_action',
    );
    gateway.clock.advance(601_000);
    try {
      const run = await runOf(waiting.thread_id, waiting.id);
      expect(run).toMatchObject({ status: 'expired', expires_at: null, required_action: null });
    } finally {
      gateway.clock.advance(-601_000);
    }
  });

  it('expires a run still executing at expires_at, closing the upstream', async () => {
    const quick = await createTestGateway({
      env: { ...TIMEOUTS, GATEWAY_RUN_EXPIRES_AFTER_SECONDS: '1', GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS: '5000' },
    });
    try {
      const owner = await quick.tenant();
      const key = await quick.virtualKey(owner, { base_url: fake.baseURL });
      const assistant = await json(
        await quick.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'm' } }),
      );
      const created = await json(
        await quick.request('/v1/threads/runs', {
          key: owner.workspaceKey,
          headers: { 'x-gateway-virtual-key': key },
          body: {
            assistant_id: assistant.id,
            thread: {
              messages: [
                { role: 'user', content: `x\n${fakeDirective({ reply: 'a b c d e f g h', chunk_delay_ms: 400 })}` },
              ],
            },
          },
        }),
      );
      const run = await waitFor(
        async () =>
          json(await quick.request(`/v1/threads/${created.thread_id}/runs/${created.id}`, { key: owner.workspaceKey })),
        (r) => r.status === 'expired',
      );
      expect(run.status).toBe('expired');
      await waitFor(
        async () => fake.inFlight,
        (n) => n === 0,
      );
      expect(fake.inFlight).toBe(0);
    } finally {
      await quick.close();
    }
  });
});

describe('upstream faults end the run failed', () => {
  it.each([
    ['no first byte in time', { first_byte_delay_ms: 2_000 }, /no first byte within 300 ms/],
    ['silence mid-stream', { reply: 'a b c d e f', stall_after_chunks: 3 }, /silent/],
    ['a cut mid-stream', { reply: 'a b c d e f', cut_after_chunks: 3 }, /cut|failed/],
    ['a malformed chunk', { reply: 'a b c d', malformed_after_chunks: 2 }, /malformed/],
    ['an error chunk mid-stream', { reply: 'a b c d', error_after_chunks: 2 }, /error mid-stream/],
  ])('%s', async (_name, scenario, message) => {
    const created = await json(await createRun(scenario));
    const run = await waitFor(
      () => runOf(created.thread_id, created.id),
      (r) => r.status === 'failed',
    );
    expect(run).toMatchObject({
      status: 'failed',
      last_error: { code: 'server_error', message: expect.stringMatching(message) },
    });
    await waitFor(
      async () => fake.inFlight,
      (n) => n === 0,
    );
    expect(fake.inFlight).toBe(0);
  });

  it('a refused connection', async () => {
    const closed = await startFakeUpstream();
    const url = closed.baseURL;
    await closed.close();
    const key = await gateway.virtualKey(tenant, { base_url: url });
    const created = await json(
      await gateway.request('/v1/threads/runs', {
        key: tenant.workspaceKey,
        headers: { 'x-gateway-virtual-key': key },
        body: { assistant_id: assistantId, thread: { messages: [{ role: 'user', content: 'x' }] } },
      }),
    );
    const run = await waitFor(
      () => runOf(created.thread_id, created.id),
      (r) => r.status === 'failed',
    );
    expect(run.last_error).toEqual({
      code: 'server_error',
      message: "The upstream refused the connection: nothing listens at the virtual key's base_url.",
    });
  });
});

describe('a client that leaves mid-stream', () => {
  it('does not stop the run: it completes and the whole answer is stored', async () => {
    const words = Array.from({ length: 30 }, (_, i) => `w${i}`);
    const response = await createRun({ reply: words.join(' '), chunk_delay_ms: 10 }, { stream: true });
    let run: { id: string; thread_id: string } | undefined;
    for await (const { event, data } of events(response)) {
      if (event === 'thread.run.created') run = data;
      if (event === 'thread.message.delta') break; // leaves: the reader is cancelled
    }
    const finished = await waitFor(
      () => runOf(defined(run).thread_id, defined(run).id),
      (r) => r.status === 'completed',
    );
    expect(finished.status).toBe('completed');
    const messages = await json(
      await gateway.request(`/v1/threads/${defined(run).thread_id}/messages?run_id=${defined(run).id}`, {
        key: tenant.workspaceKey,
      }),
    );
    expect(messages.data[0].content[0].text.value).toBe(words.join(' '));
    expect(defined(fake.requests[0]).outcome).toBe('completed');
  });
});

describe('an executor that stops', () => {
  it('is noticed by another gateway once its lease runs out: the run fails and says why', async () => {
    // A second gateway process on the same database, 60 s in the future: the first one's lease
    // (30 s, renewed every 10 s) has run out from its point of view.
    const deps = await createNodeDeps(gateway.deps.config, gateway.database, {
      now: () => gateway.clock.now() + 60_000,
      secrets: gateway.deps.secrets,
      log: gateway.deps.log,
    });
    const other = createNodeApp(deps);
    // The first executor is alive, its answer held, while the other gateway settles the run.
    const gate = freshGate('held');
    const created = await json(await createRun({ reply: 'never', hold: gate }));
    const seenElsewhere = await json(
      await other.request(`/v1/threads/${created.thread_id}/runs/${created.id}`, {
        headers: { 'x-gateway-api-key': tenant.workspaceKey },
      }),
    );
    expect(seenElsewhere).toMatchObject({
      status: 'failed',
      last_error: { code: 'server_error', message: expect.stringMatching(/stopped before the run finished/) },
    });
    // The first executor, when its answer arrives, finds the run settled and leaves it so: the
    // run failed, its thread without an answer.
    const messages = `/v1/threads/${created.thread_id}/messages`;
    const before = await json(await gateway.request(messages, { key: tenant.workspaceKey }));
    fake.openGate(gate);
    expect(await gateway.tasks.drain(5_000)).toBe(true);
    expect(defined(fake.requests.at(-1)).outcome).toBe('completed');
    expect((await runOf(created.thread_id, created.id)).status).toBe('failed');
    expect(await json(await gateway.request(messages, { key: tenant.workspaceKey }))).toEqual(before);
    expect(before.data.map((message: { role: string }) => message.role)).toEqual(['user']);
  });
});
