import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream } from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, type TestGateway } from '../../support/gateway';
import { heldThread, member, startRun, waitForRun, type Member } from '../../support/threads';

/**
 * GET /v1/runs/{run_id}/trace (docs/api.md, "Runs"): a run's log line, its provider attempts and
 * its events in time order, stored with the run by the statement that ends it (runs.trace), whoever
 * ends it: the engine, a cancel. Ids, counts and times only: never the answer's text nor a secret.
 * The fallback case (two attempts, the second key answering) is in chat-completions/fallbacks.test.ts.
 */

let gateway: TestGateway;
let alice: Member;
let mallory: Member;

interface Trace {
  object: string;
  run_id: string;
  log: Record<string, unknown> | null;
  attempts: { at_ms: number; virtual_key: string; outcome: string | null; status: number | null }[];
  attempts_total: number;
  events: { at_ms: number; type: string; status?: string; step_id?: string; attempt?: number }[];
  steps_omitted: boolean;
}

const traceOf = async (who: Member, runId: string): Promise<Trace> => {
  const response = await who.request(`/v1/runs/${runId}/trace`);
  expect(response.status, await response.clone().text()).toBe(200);
  return json(response) as Promise<Trace>;
};

async function ended(who: Member, scenario: object) {
  const started = await startRun(who, scenario);
  await waitForRun(who, started.threadId, started.runId, ['completed', 'failed']);
  return started;
}

beforeAll(async () => {
  const upstream = createFakeUpstream();
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  alice = await member(gateway);
  mallory = await member(gateway);
});
afterAll(() => gateway?.close());

describe('GET /v1/runs/{run_id}/trace', () => {
  it("answers a completed run's log line, its attempt and its events in time order, without its text", async () => {
    const { runId, threadId } = await ended(alice, { reply: 'a secret-ish answer' });
    const trace = await traceOf(alice, runId);
    expect(trace).toMatchObject({ object: 'run.trace', run_id: runId, attempts_total: 1, steps_omitted: false });
    expect(trace.log).toMatchObject({
      run_id: runId,
      thread_id: threadId,
      workspace_id: alice.tenant.workspace.id,
      status: 'completed',
      model: 'fake-model',
      time_to_first_token_ms: expect.any(Number),
      duration_ms: expect.any(Number),
    });
    expect(trace.log?.virtual_key).toEqual(expect.any(String));
    expect(trace.attempts).toMatchObject([{ outcome: 'ok', status: 200 }]);
    expect(trace.events.map((event) => event.type)).toEqual([
      'created',
      'started',
      'attempt',
      'step_created',
      'step_ended',
      'ended',
    ]);
    const times = trace.events.map((event) => event.at_ms);
    expect(times).toEqual([...times].sort((a, b) => a - b));
    expect(trace.events.at(-1)).toMatchObject({ type: 'ended', status: 'completed' });
    const text = JSON.stringify(trace);
    expect(text).not.toContain('secret-ish');
    expect(text).not.toContain('sk-');
  });

  it("a failed run's line says why, and its attempt the provider's status", async () => {
    const { runId } = await ended(alice, { status: 500 });
    const trace = await traceOf(alice, runId);
    expect(trace.log).toMatchObject({ status: 'failed', cause: 'http_500', error_code: 'server_error' });
    expect(trace.attempts).toMatchObject([{ outcome: 'http_5xx', status: 500 }]);
    expect(trace.events.at(-1)).toMatchObject({ type: 'ended', status: 'failed' });
  });

  it('a run cancelled while it waits for tool outputs keeps the attempts of its first turn', async () => {
    const held = await heldThread(alice);
    const waiting = await traceOf(alice, held.runId);
    // Not ended: no log line yet, but the turn's attempt is there.
    expect(waiting.log).toBeNull();
    expect(waiting.attempts).toMatchObject([{ outcome: 'ok' }]);
    const cancel = await alice.request(`/v1/threads/${held.threadId}/runs/${held.runId}/cancel`, { method: 'POST' });
    expect(cancel.status).toBe(200);
    const trace = await traceOf(alice, held.runId);
    expect(trace.log).toMatchObject({ status: 'cancelled', time_to_first_token_ms: null });
    expect(trace.attempts_total).toBe(1);
  });

  it('a run continued after its tool outputs adds the next turn’s attempt to the first’s', async () => {
    const held = await heldThread(alice);
    const submitted = await alice.request(`/v1/threads/${held.threadId}/runs/${held.runId}/submit_tool_outputs`, {
      body: { tool_outputs: [{ tool_call_id: held.toolCallId, output: 'forty-two' }] },
    });
    expect(submitted.status).toBe(200);
    await waitForRun(alice, held.threadId, held.runId, ['completed']);
    const trace = await traceOf(alice, held.runId);
    expect(trace.attempts_total).toBe(2);
    expect(trace.attempts.map((attempt) => attempt.outcome)).toEqual(['ok', 'ok']);
    expect(trace.events.filter((event) => event.type === 'attempt').map((event) => event.attempt)).toEqual([0, 1]);
    expect(JSON.stringify(trace)).not.toContain('forty-two');
  });

  it("is a 404 for an unknown run and for another workspace's", async () => {
    const { runId } = await ended(mallory, { reply: 'not yours' });
    for (const path of ['/v1/runs/run_unknown/trace', `/v1/runs/${runId}/trace`]) {
      const response = await alice.request(path);
      expect(response.status).toBe(404);
      expect((await errorOf(response)).code).toBe('run_not_found');
    }
    expect((await gateway.request(`/v1/runs/${runId}/trace`)).status).toBe(401);
  });
});
