import { defined } from '../support/defined';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LibsqlCounterStore } from '../../src/ratelimit';
import { turnReservation } from '../../src/ratelimit/reservation';
import { fakeThread, startFakeUpstream, type FakeScenario, type FakeUpstreamServer } from '../support/fake-upstream';
import { freshGate } from '../support/gates';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../support/gateway';
import * as ratelimit from '../support/ratelimit';

/**
 * Tokens policies bound their overshoot: a turn of a run reserves tokens in every matching tokens
 * policy at admission (its max_completion_tokens, or GATEWAY_TOKEN_RESERVATION, plus an estimate
 * of its prompt), atomically like a requests policy's unit; a counter at or over the value refuses
 * new runs; the reservation is released, and the real tokens charged, when the turn ends. So a
 * window ends at most at (the README's formula)
 *
 *   value + a_last + Σ over the turns in flight when the last one was admitted of max(0, a − r)
 *
 * where a is a turn's real tokens and r its reservation. Through the real app, against the fake
 * provider over HTTP.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());
afterEach(async () => {
  expect(await gateway.tasks.drain(30_000)).toBe(true);
});

const { POLICIES } = ratelimit;
const DEFAULT_RESERVATION = 1024;

interface Caller {
  tenant: Tenant;
  headers: Record<string, string>;
  assistantId: string;
}

async function caller(): Promise<Caller> {
  const tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL });
  const headers = { 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug };
  const assistant = await gateway.request('/v1/assistants', {
    headers,
    body: {
      model: 'fake-model',
      tools: [
        {
          type: 'function',
          function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        },
      ],
    },
  });
  return { tenant, headers, assistantId: (await json(assistant)).id };
}

const tokensPolicy = (who: Caller, value: number, unit = 'rpd') =>
  ratelimit.createPolicy(gateway, who.tenant, { type: 'tokens', unit, value });

const createRun = (who: Caller, body: Record<string, unknown> = {}) =>
  gateway.request('/v1/threads/runs', {
    headers: who.headers,
    body: { assistant_id: who.assistantId, thread: fakeThread('Hello'), ...body },
  });

async function runOf(who: Caller, run: { id: string; thread_id: string }) {
  return json(await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}`, { headers: who.headers }));
}

async function waitFor(who: Caller, run: { id: string; thread_id: string }, statuses: string[]) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const current = await runOf(who, run);
    if (statuses.includes(current.status) || Date.now() > deadline) return current;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A policy's usage by window start, over its groups. */
async function countersOf(policyId: string): Promise<Record<string, number>> {
  const byWindow: Record<string, number> = {};
  for (const [key, used] of Object.entries(await ratelimit.countersOf(gateway.database.client, policyId))) {
    const window = defined(key.split('/')[2]);
    byWindow[window] = (byWindow[window] ?? 0) + used;
  }
  return byWindow;
}
const usedBy = (policyId: string) => ratelimit.usedBy(gateway.database.client, policyId);
const reservedBy = (runId: string) => ratelimit.reservedBy(gateway.database.client, runId);

/** Moves the clock to `offset` ms into a fresh UTC day (runs, and their windows, then stay in it). */
function freshDay(offset = 3_600_000): number {
  const day = Math.floor(gateway.clock.now() / 86_400_000) * 86_400_000 + 86_400_000;
  gateway.clock.set(day + offset);
  return day;
}

const freshMinute = () => ratelimit.freshMinute(gateway.clock);

/**
 * Sends `n` run creations at once; waits for every admitted run to end. Answers the admitted runs
 * (as they ended, with their reservations) and the refusals.
 */
async function burst(who: Caller, n: number, body: Record<string, unknown>) {
  const responses = await Promise.all(Array.from({ length: n }, () => createRun(who, body)));
  const admitted: { usage: { total_tokens: number }; reserved: number; status: string }[] = [];
  const refused = [];
  for (const response of responses) {
    if (response.status !== 200) {
      refused.push(await errorOf(response));
      continue;
    }
    const run = await json(response);
    const reserved = await reservedBy(run.id);
    admitted.push({ ...(await waitFor(who, run, ['completed', 'failed', 'incomplete'])), reserved });
  }
  expect(await gateway.tasks.drain(30_000)).toBe(true);
  return { admitted, refused };
}

/** The README's bound, over-approximated by counting every admitted turn as possibly in flight. */
function overshootBound(value: number, turns: { a: number; r: number }[]): number {
  const last = Math.max(...turns.map((turn) => turn.a));
  return value + last + turns.reduce((sum, turn) => sum + Math.max(0, turn.a - turn.r), 0);
}

describe('the overshoot bound under 100 concurrent runs', () => {
  it('holds a 50 tokens/day policy to value + one run: reservations refuse the rest', async () => {
    freshDay();
    const who = await caller();
    const policy = await tokensPolicy(who, 50);
    const { admitted, refused } = await burst(who, 100, {
      thread: fakeThread('Hello there', { reply: 'Hi, how can I help you today?' }),
    });

    expect(admitted.length + refused.length).toBe(100);
    expect(
      refused.every((error) => error.status === 429 && error.type === 'tokens' && error.code === 'rate_limit_exceeded'),
    ).toBe(true);
    for (const run of admitted) {
      expect(run.status).toBe('completed');
      // Each turn reserved its completion (no max_completion_tokens: the default) and its prompt.
      expect(run.reserved).toBeGreaterThan(DEFAULT_RESERVATION);
    }
    // Every admitted run is charged its real tokens; reservations are all gone.
    const total = admitted.reduce((sum, run) => sum + run.usage.total_tokens, 0);
    expect(await usedBy(policy)).toBe(total);
    const perRun = defined(admitted[0]).usage.total_tokens;
    expect(perRun).toBeLessThan(50);
    // Real tokens below the reservations: the window ends below value + one run's tokens.
    expect(total).toBeLessThan(
      overshootBound(
        50,
        admitted.map((run) => ({ a: run.usage.total_tokens, r: run.reserved })),
      ),
    );
    expect(total).toBeLessThan(50 + perRun);
    // While one run holds its reservation every other is refused: only runs admitted after the
    // earlier ones had ended got in, so no more than the value allows, plus the last.
    expect(admitted.length).toBeLessThanOrEqual(Math.ceil(50 / perRun));
  });

  it('holds a larger policy to the formula when runs use more tokens than they reserved', async () => {
    freshDay();
    const who = await caller();
    // The fake reports 5,000 tokens a run, far over its reservation (max_completion_tokens 256 and
    // the prompt's estimate): the case where the formula's Σ max(0, a − r) counts.
    const scenario: FakeScenario = { reply: 'Counted', usage: { prompt_tokens: 4000, completion_tokens: 1000 } };
    const body = { max_completion_tokens: 256, thread: fakeThread('Count me', scenario) };
    const response = await gateway.request(POLICIES, {
      headers: who.headers,
      body: {
        conditions: [{ key: 'model', value: '*' }],
        group_by: [{ key: 'api_key' }],
        type: 'tokens',
        unit: 'rpd',
        value: 1e9,
      },
    });
    const policy = (await json(response)).id;
    // One run with the organisation key (another group) tells the reservation of such a run.
    const orgKey = { 'x-gateway-api-key': who.tenant.orgKey, 'x-gateway-workspace-id': who.tenant.workspace.id };
    const probe = await json(
      await gateway.request('/v1/threads/runs', {
        headers: { ...who.headers, ...orgKey },
        body: { assistant_id: who.assistantId, ...body },
      }),
    );
    const reservation = await reservedBy(probe.id);
    expect(reservation).toBeGreaterThan(256);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    const probed = await usedBy(policy);
    expect(probed).toBe(5000);

    const value = 3.5 * reservation;
    expect(
      (await gateway.request(`${POLICIES}/${policy}`, { headers: who.headers, method: 'PUT', body: { value } })).status,
    ).toBe(200);
    const { admitted, refused } = await burst(who, 100, body);

    expect(refused.every((error) => error.status === 429 && error.type === 'tokens')).toBe(true);
    expect(admitted.length).toBeGreaterThanOrEqual(1);
    const turns = admitted.map((run) => ({ a: run.usage.total_tokens, r: run.reserved }));
    for (const turn of turns) expect(turn).toEqual({ a: 5000, r: reservation });
    const total = (await usedBy(policy)) - probed;
    expect(total).toBe(5000 * admitted.length);
    expect(total).toBeLessThan(overshootBound(value, turns));
    // At most four runs can hold a reservation of value / 3.5 at once, and a run that ended (5,000
    // tokens) leaves the window full: nothing after it gets in.
    expect(admitted.length).toBeLessThanOrEqual(4);
  });
});

describe('a turn that waits for tool outputs', () => {
  const CALL = { tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] };

  it('is charged in the window in which it ended, not at a cancel or expiry later', async () => {
    const who = await caller();
    const minute = freshMinute();
    const policy = await tokensPolicy(who, 1_000_000, 'rpm');
    const created = await json(await createRun(who, { thread: fakeThread('Weather?', CALL) }));
    const waiting = await waitFor(who, created, ['requires_action']);
    expect(waiting.status).toBe('requires_action');
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    const charged = await countersOf(policy);
    expect(Object.keys(charged)).toEqual([String(minute)]);
    const firstTurn = defined(charged[String(minute)]);
    expect(firstTurn).toBeGreaterThan(0);
    expect(firstTurn).toBeLessThan(DEFAULT_RESERVATION);

    // Cancelled in the next minute: nothing more is charged anywhere.
    gateway.clock.advance(60_000);
    const cancelled = await json(
      await gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}/cancel`, {
        method: 'POST',
        headers: who.headers,
      }),
    );
    expect(cancelled).toMatchObject({ status: 'cancelled', usage: { total_tokens: firstTurn } });
    expect(await countersOf(policy)).toEqual({ [String(minute)]: firstTurn });
  });

  it('is not charged again when it expires', async () => {
    const who = await caller();
    const minute = freshMinute();
    const policy = await tokensPolicy(who, 1_000_000, 'rpm');
    const created = await json(await createRun(who, { thread: fakeThread('Weather?', CALL) }));
    await waitFor(who, created, ['requires_action']);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    const before = await countersOf(policy);
    gateway.clock.advance(gateway.deps.config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000 + 1000);
    expect(await runOf(who, created)).toMatchObject({ status: 'expired' });
    expect(await countersOf(policy)).toEqual(before);
    expect(Object.keys(before)).toEqual([String(minute)]);
  });

  it('takes a new reservation when tool outputs come, and settles it when the run ends', async () => {
    freshDay();
    const who = await caller();
    const policy = await tokensPolicy(who, 1_000_000);
    const gate = freshGate('second-turn');
    const created = await json(
      await createRun(who, {
        thread: fakeThread('Weather?', [CALL, { reply: 'Sunny and mild today in Paris', hold: gate }]),
      }),
    );
    const waiting = await waitFor(who, created, ['requires_action']);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    const firstTurn = await usedBy(policy);
    const [call] = waiting.required_action.submit_tool_outputs.tool_calls;
    const output = 'sunny, 21 degrees';
    const submitted = await gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}/submit_tool_outputs`, {
      headers: who.headers,
      body: { tool_outputs: [{ tool_call_id: call.id, output }] },
    });
    expect(submitted.status).toBe(200);
    // While the second turn runs it holds its own reservation: the first turn's tokens (its prompt
    // now) and the output's estimate, plus the default completion.
    const reserved = await reservedBy(created.id);
    expect(reserved).toBe(
      turnReservation(
        {
          promptChars: JSON.stringify([output]).length,
          knownPromptTokens: firstTurn,
          maxCompletionTokens: null,
          completionTokensSoFar: 0,
        },
        DEFAULT_RESERVATION,
      ),
    );
    expect(await usedBy(policy)).toBe(firstTurn + reserved);
    fake.openGate(gate);
    const done = await waitFor(who, created, ['completed']);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    expect(await usedBy(policy)).toBe(done.usage.total_tokens);
  });

  it('gives back the reservation of a submit that lost the race for the run', async () => {
    freshDay();
    const who = await caller();
    const policy = await tokensPolicy(who, 1_000_000);
    const created = await json(await createRun(who, { thread: fakeThread('Weather?', [CALL, { reply: 'Sunny' }]) }));
    const waiting = await waitFor(who, created, ['requires_action']);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    const [call] = waiting.required_action.submit_tool_outputs.tool_calls;
    const submit = () =>
      gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}/submit_tool_outputs`, {
        headers: who.headers,
        body: { tool_outputs: [{ tool_call_id: call.id, output: 'sunny' }] },
      });
    const statuses = (await Promise.all(Array.from({ length: 5 }, submit))).map((response) => response.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(1);
    const done = await waitFor(who, created, ['completed']);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    expect(await usedBy(policy)).toBe(done.usage.total_tokens);
  });
});

describe('a turn that ends without an answer', () => {
  it('releases its reservation when the provider fails', async () => {
    freshDay();
    const who = await caller();
    const policy = await tokensPolicy(who, 1_000_000);
    const created = await json(await createRun(who, { thread: fakeThread('Hi', { status: 500 }) }));
    expect(await reservedBy(created.id)).toBeGreaterThan(0);
    expect(await waitFor(who, created, ['failed'])).toMatchObject({ status: 'failed', usage: { total_tokens: 0 } });
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    expect(await usedBy(policy)).toBe(0);
  });

  it('releases its reservation when cancelled mid-answer', async () => {
    freshDay();
    const who = await caller();
    const policy = await tokensPolicy(who, 1_000_000);
    const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
    const created = await json(
      await createRun(who, { thread: fakeThread('Talk', { reply: words, chunk_delay_ms: 20 }) }),
    );
    const reserved = await reservedBy(created.id);
    expect(await usedBy(policy)).toBe(reserved);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const cancel = await gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}/cancel`, {
      method: 'POST',
      headers: who.headers,
    });
    expect(cancel.status).toBe(200);
    expect(await waitFor(who, created, ['cancelled'])).toMatchObject({ status: 'cancelled' });
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    expect(await usedBy(policy)).toBe(0);
  });

  it('releases its reservation when its executor is gone (the lease ran out)', async () => {
    freshDay();
    const who = await caller();
    const policy = await tokensPolicy(who, 1_000_000);
    const gate = freshGate('slow');
    const created = await json(await createRun(who, { thread: fakeThread('Slow', { hold: gate }) }));
    expect(await usedBy(policy)).toBe(await reservedBy(created.id));
    // Past the lease, a read settles the run as orphaned (as after a crash).
    gateway.clock.advance(gateway.deps.config.GATEWAY_RUN_LEASE_SECONDS * 1000 + 1000);
    expect(await runOf(who, created)).toMatchObject({ status: 'failed', last_error: { code: 'server_error' } });
    expect(await usedBy(policy)).toBe(0);
    // The executor, answered at last, finds the run settled: nothing is charged twice.
    fake.openGate(gate);
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    expect(defined(fake.requests.at(-1)).outcome).toBe('completed');
    expect(await usedBy(policy)).toBe(0);
  });

  it('releases its reservation when the run expires while executing', async () => {
    const short = await createTestGateway({ env: { GATEWAY_RUN_EXPIRES_AFTER_SECONDS: '1' } });
    try {
      const tenant = await short.tenant();
      const slug = await short.virtualKey(tenant, { base_url: fake.baseURL });
      const headers = { 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug };
      const assistant = await json(await short.request('/v1/assistants', { headers, body: { model: 'fake-model' } }));
      const policy = await json(
        await short.request(POLICIES, {
          headers,
          body: {
            conditions: [{ key: 'model', value: '*' }],
            group_by: [{ key: 'workspace_id' }],
            type: 'tokens',
            unit: 'rpd',
            value: 1e6,
          },
        }),
      );
      const run = await json(
        await short.request('/v1/threads/runs', {
          headers,
          body: { assistant_id: assistant.id, thread: fakeThread('Slow', { first_byte_delay_ms: 3000 }) },
        }),
      );
      expect(await short.tasks.drain(20_000)).toBe(true);
      expect(await json(await short.request(`/v1/threads/${run.thread_id}/runs/${run.id}`, { headers }))).toMatchObject(
        { status: 'expired' },
      );
      const { rows } = await short.database.client.execute({
        sql: 'SELECT sum(used) AS used FROM rate_limit_counters WHERE key LIKE ?',
        args: [`${policy.id}/%`],
      });
      expect(Number(defined(rows[0]).used)).toBe(0);
    } finally {
      await short.close();
    }
  });
});

describe('counters', () => {
  it('never go below 0, and a release in a window that is gone writes nothing', async () => {
    const store = new LibsqlCounterStore(gateway.database.countersClient, { log: gateway.deps.log });
    const end = 4_000_000_000_000;
    await store.adjust('s', [{ key: 'reserve/a', windowEnd: end, delta: 10 }]);
    await store.adjust('s', [
      { key: 'reserve/a', windowEnd: end, delta: -25 },
      { key: 'reserve/gone', windowEnd: end, delta: -5 },
      { key: 'reserve/b', windowEnd: end, delta: 7 },
    ]);
    expect(await store.read(['reserve/a', 'reserve/b', 'reserve/gone'])).toEqual(
      new Map([
        ['reserve/a', 0],
        ['reserve/b', 7],
        ['reserve/gone', 0],
      ]),
    );
    const { rows } = await gateway.database.client.execute(
      "SELECT key FROM rate_limit_counters WHERE key LIKE 'reserve/%' ORDER BY key",
    );
    expect(rows.map((row) => row.key)).toEqual(['reserve/a', 'reserve/b']);
  });

  it('reserve at admission past the value (tokens) but never past it (requests), all or nothing', async () => {
    const store = new LibsqlCounterStore(gateway.database.countersClient, { log: gateway.deps.log });
    const end = 4_000_000_000_000;
    const tokens = { key: 'reserve/tokens', windowEnd: end, limit: 100, mustFit: false };
    const requests = { key: 'reserve/requests', windowEnd: end, cost: 1, limit: 2, mustFit: true };
    expect((await store.admit('s', [{ ...tokens, cost: 80 }, requests], 0)).admitted).toBe(true);
    // Below the value: a reservation may take the counter past it.
    expect((await store.admit('s', [{ ...tokens, cost: 80 }, requests], 0)).admitted).toBe(true);
    expect(await store.read([tokens.key, requests.key])).toEqual(
      new Map([
        [tokens.key, 160],
        [requests.key, 2],
      ]),
    );
    // At or over the value: refused, and the requests counter is untouched too.
    await store.adjust('s', [{ key: requests.key, windowEnd: end, delta: -2 }]);
    expect((await store.admit('s', [{ ...tokens, cost: 1 }, requests], 0)).admitted).toBe(false);
    expect(await store.read([tokens.key, requests.key])).toEqual(
      new Map([
        [tokens.key, 160],
        [requests.key, 0],
      ]),
    );
  });
});
