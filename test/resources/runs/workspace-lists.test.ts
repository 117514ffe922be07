import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream } from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, type TestGateway } from '../../support/gateway';
import { member, startRun, waitForRun, type Member } from '../../support/threads';

/**
 * The gateway's extensions for the console (docs/api.md): GET /v1/runs (a workspace's runs across
 * its threads), GET /v1/threads (its threads) and GET /v1/usage/runs (its runs by status per bucket
 * of time): filters, pages, bad input, and another workspace's runs and threads never listed.
 */

/** A fixed hour, so that buckets are known: 2026-11-02 10:00 UTC. */
const T0 = Date.UTC(2026, 10, 2, 10);

let gateway: TestGateway;
let alice: Member;
/** Alice's second assistant, and another workspace's member. */
let otherAssistant: string;
let mallory: Member;
/** Alice's runs, oldest first: completed, failed, completed (of otherAssistant). */
let runs: { threadId: string; runId: string }[];
let malloryRun: { threadId: string; runId: string };

async function ended(who: Member, scenario: object, assistantId = who.assistantId) {
  const started = await startRun({ ...who, assistantId }, scenario);
  const run = await waitForRun(who, started.threadId, started.runId, ['completed', 'failed']);
  expect(['completed', 'failed']).toContain(run.status);
  return started;
}

const listed = async (who: Member, path: string) => {
  const response = await who.request(path);
  expect(response.status, await response.clone().text()).toBe(200);
  return json(response) as Promise<{ data: { id: string }[]; has_more: boolean; first_id: string; last_id: string }>;
};
const ids = async (who: Member, path: string) => (await listed(who, path)).data.map((item) => item.id);

beforeAll(async () => {
  const upstream = createFakeUpstream();
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  gateway.clock.set(T0 + 60_000);
  alice = await member(gateway);
  mallory = await member(gateway);
  otherAssistant = (await alice.openai.beta.assistants.create({ model: 'fake-model', name: 'second' })).id;
  runs = [
    await ended(alice, { reply: 'one' }),
    await ended(alice, { status: 500 }),
    await ended(alice, { reply: 'three' }, otherAssistant),
  ];
  malloryRun = await ended(mallory, { reply: 'not yours' });
});
afterAll(() => gateway?.close());

const runIds = () => runs.map((run) => run.runId).reverse();
const threadIds = () => runs.map((run) => run.threadId).reverse();

describe('GET /v1/runs', () => {
  it("lists the workspace's runs across its threads, newest first, and never another workspace's", async () => {
    expect(await ids(alice, '/v1/runs')).toEqual(runIds());
    expect(await ids(alice, '/v1/runs?order=asc')).toEqual([...runIds()].reverse());
    expect(await ids(mallory, '/v1/runs')).toEqual([malloryRun.runId]);
  });

  it('filters by status, assistant and thread', async () => {
    expect(await ids(alice, '/v1/runs?status=failed')).toEqual([runs[1]?.runId]);
    expect(await ids(alice, '/v1/runs?status=completed')).toEqual([runs[2]?.runId, runs[0]?.runId]);
    expect(await ids(alice, `/v1/runs?assistant_id=${otherAssistant}`)).toEqual([runs[2]?.runId]);
    expect(await ids(alice, `/v1/runs?thread_id=${runs[0]?.threadId}&status=completed`)).toEqual([runs[0]?.runId]);
    expect(await ids(alice, `/v1/runs?thread_id=${malloryRun.threadId}`)).toEqual([]);
    expect(await ids(alice, '/v1/runs?status=queued')).toEqual([]);
  });

  it('pages with after and before', async () => {
    const first = await listed(alice, '/v1/runs?limit=2');
    expect(first.data.map((run) => run.id)).toEqual(runIds().slice(0, 2));
    expect(first.has_more).toBe(true);
    const second = await listed(alice, `/v1/runs?limit=2&after=${first.last_id}`);
    expect(second.data.map((run) => run.id)).toEqual(runIds().slice(2));
    expect(second.has_more).toBe(false);
    expect(await ids(alice, `/v1/runs?limit=2&before=${second.first_id}`)).toEqual(runIds().slice(0, 2));
  });

  it('refuses bad input naming the field, and a cursor of another workspace', async () => {
    for (const [query, param] of [
      ['status=done', 'status'],
      ['limit=0', 'limit'],
      ['order=up', 'order'],
      [`after=${malloryRun.runId}`, 'after'],
      ['colour=red', 'colour'],
    ]) {
      const refused = await errorOf(await alice.request(`/v1/runs?${query}`));
      expect(refused.status, query).toBe(400);
      expect(refused.param, query).toBe(param);
    }
  });
});

describe('GET /v1/threads', () => {
  it("lists the workspace's threads, newest first, those of an assistant, and never another's", async () => {
    expect(await ids(alice, '/v1/threads')).toEqual(threadIds());
    expect(await ids(alice, `/v1/threads?assistant_id=${alice.assistantId}`)).toEqual(threadIds().slice(1));
    expect(await ids(alice, `/v1/threads?assistant_id=${mallory.assistantId}`)).toEqual([]);
    expect(await ids(mallory, '/v1/threads')).toEqual([malloryRun.threadId]);
    const page = await listed(alice, '/v1/threads?limit=1&order=asc');
    expect(page.data.map((thread) => thread.id)).toEqual([runs[0]?.threadId]);
    expect(await ids(alice, `/v1/threads?order=asc&after=${page.last_id}`)).toEqual(threadIds().reverse().slice(1));
  });

  it('refuses bad input naming the field', async () => {
    for (const [query, param] of [
      ['limit=101', 'limit'],
      [`before=${malloryRun.threadId}`, 'before'],
      ['assistant_id=', 'assistant_id'],
    ]) {
      const refused = await errorOf(await alice.request(`/v1/threads?${query}`));
      expect(refused.status, query).toBe(400);
      expect(refused.param, query).toBe(param);
    }
  });
});

describe('GET /v1/usage/runs', () => {
  type Bucket = { start_time: number; results: { status: string; error_code: string | null; num_runs: number }[] };
  const buckets = async (who: Member, query: string) =>
    ((await listed(who, `/v1/usage/runs?${query}`)) as unknown as { data: Bucket[] }).data;

  it("counts the workspace's runs by status and error code in the bucket of their creation", async () => {
    const [hour] = await buckets(alice, `bucket_width=1h&limit=1&start_time=${T0 / 1000}`);
    expect(hour?.start_time).toBe(T0 / 1000);
    const counts = Object.fromEntries(
      (hour?.results ?? []).map((result) => [`${result.status}/${result.error_code}`, result.num_runs]),
    );
    expect(counts).toEqual({ 'completed/null': 2, 'failed/server_error': 1 });
    const [day] = await buckets(alice, `bucket_width=1d&limit=1&start_time=${T0 / 1000 - 10 * 3600}`);
    expect(day?.results.reduce((sum, result) => sum + result.num_runs, 0)).toBe(3);
    const [malloryHour] = await buckets(mallory, `bucket_width=1h&limit=1&start_time=${T0 / 1000}`);
    expect(malloryHour?.results).toEqual([
      { object: 'usage.runs.result', status: 'completed', error_code: null, num_runs: 1 },
    ]);
    // The hour before has none.
    const [before] = await buckets(alice, `bucket_width=1h&limit=1&start_time=${T0 / 1000 - 3600}`);
    expect(before?.results).toEqual([]);
  });

  it("refuses bad input naming the field, and an organisation's key another organisation's workspace", async () => {
    for (const [query, param] of [
      ['bucket_width=1w', 'bucket_width'],
      ['bucket_width=1d&limit=32', 'limit'],
      ['group_by=model', 'group_by'],
      ['start_time=10&end_time=5', 'end_time'],
    ]) {
      const refused = await errorOf(await alice.request(`/v1/usage/runs?${query}`));
      expect(refused.status, query).toBe(400);
      expect(refused.param, query).toBe(param);
    }
    const foreign = await gateway.request(`/v1/usage/runs?workspace_id=${mallory.tenant.workspace.id}`, {
      key: alice.tenant.orgKey,
    });
    expect(foreign.status).toBe(403);
  });
});
