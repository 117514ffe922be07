import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import { createFakeUpstream, fakeThread } from '../support/fake-upstream';
import { organisations } from '../../src/db/schema';
import {
  createTestGateway,
  errorOf,
  gatewayWithDefaultKey,
  json,
  type Tenant,
  type TestGateway,
} from '../support/gateway';
import { createPolicy, freshMinute, NO_RESERVATION, requestAttributes } from '../support/ratelimit';
import { admitRequest } from '../../src/ratelimit';
import { expectScrapeRefusals } from '../support/scrape-refusals';
import { parsePrometheusText, samplesOf, total, type MetricFamily } from '../support/prometheus';
import { defined } from '../support/defined';

/**
 * GET /metrics on the real app: a scrape read by a strict reader of the text format, its figures
 * checked against what the API itself says after runs and calls through the fake provider
 * (GET /v1/usage for tokens and runs, each run's own status), and its protection.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let client: OpenAI;
let assistantId: string;
let virtualKeyId: string;

beforeAll(async () => {
  ({ gateway, tenant, client } = await gatewayWithDefaultKey(upstream.fetch));
  const assistant = await client.beta.assistants.create({ model: 'gpt-4o' });
  assistantId = assistant.id;
  const keys = await json(await gateway.request('/v1/virtual-keys', { key: tenant.workspaceKey }));
  virtualKeyId = defined((keys as { data: { id: string }[] }).data[0]).id;
});
afterAll(() => gateway?.close());

async function scrape(headers: Record<string, string> = { authorization: `Bearer ${tenant.orgKey}` }) {
  return gateway.app.request('/metrics', { headers });
}

async function scraped(): Promise<Map<string, MetricFamily>> {
  const response = await scrape();
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  return parsePrometheusText(await response.text());
}

describe('GET /metrics', () => {
  it('agrees with GET /v1/usage and the runs themselves after runs and calls through the fake provider', async () => {
    const completed = await client.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread('Hello', { reply: 'one two three' }) },
      { pollIntervalMs: 5 },
    );
    const failed = await client.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: fakeThread('Hello', { status: 500 }) },
      { pollIntervalMs: 5 },
    );
    const stream = await client.beta.threads.createAndRun({
      assistant_id: assistantId,
      thread: fakeThread('Hello', { reply: 'four five' }),
      stream: true,
    });
    let streamedId = '';
    for await (const event of stream) if (event.event === 'thread.run.completed') streamedId = event.data.id;
    const completion = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Hi' }],
    });
    await gateway.tasks.drain(10_000);
    expect([completed.status, failed.status]).toEqual(['completed', 'failed']);
    expect(streamedId).toMatch(/^run_/);

    const families = await scraped();
    // Runs by final status, as the runs say of themselves.
    expect(total(families, 'gateway_runs_ended_total', { kind: 'run', status: 'completed' })).toBe(2);
    expect(total(families, 'gateway_runs_ended_total', { kind: 'run', status: 'failed' })).toBe(1);

    // Tokens by model and kind, and runs counted, as GET /v1/usage counts them.
    const usage = await json(
      await gateway.request('/v1/usage?group_by=model,kind&bucket_width=1h', { key: tenant.orgKey }),
    );
    const results = (usage as { data: { results: UsageResult[] }[] }).data.flatMap((bucket) => bucket.results);
    expect(results.length).toBeGreaterThan(0);
    for (const result of results) {
      const labels = { kind: defined(result.kind), model: defined(result.model) };
      expect(total(families, 'gateway_tokens_total', { ...labels, type: 'prompt' })).toBe(result.input_tokens);
      expect(total(families, 'gateway_tokens_total', { ...labels, type: 'completion' })).toBe(result.output_tokens);
    }
    const runs = results.filter((result) => result.kind === 'run').reduce((sum, r) => sum + r.num_requests, 0);
    expect(total(families, 'gateway_runs_ended_total', { kind: 'run' })).toBe(runs);
    expect(total(families, 'gateway_tokens_total', { kind: 'chat_completions', model: 'gpt-4o-mini' })).toBe(
      defined(completion.usage).total_tokens,
    );
    expect(results.map((result) => `${result.kind} ${result.model}`).sort()).toEqual([
      'chat_completions gpt-4o-mini',
      'run gpt-4o',
    ]);
    expect(defined(completed.usage).total_tokens).toBeGreaterThan(0);

    // Provider calls: three that answered, one refused with a 500; each timed to its first byte and end.
    const key = { virtual_key_id: virtualKeyId };
    expect(total(families, 'gateway_provider_calls_total', { ...key, outcome: 'ok' })).toBe(3);
    expect(total(families, 'gateway_provider_calls_total', { ...key, outcome: 'http_5xx' })).toBe(1);
    const firstByte = 'gateway_provider_first_byte_seconds';
    expect(total(families, firstByte, key, `${firstByte}_count`)).toBe(4);
    const duration = 'gateway_provider_call_duration_seconds';
    expect(total(families, duration, { ...key, outcome: 'ok' }, `${duration}_count`)).toBe(3);
    expect(total(families, duration, { ...key, outcome: 'ok' }, `${duration}_sum`)).toBeGreaterThan(0);

    // Requests by the route's pattern, never the path with its ids.
    const routes = samplesOf(families, 'gateway_http_requests_total').map((sample) => sample.labels.route);
    expect(routes).toContain('/v1/threads/runs');
    expect(routes).toContain('/v1/threads/:thread_id/runs/:run_id');
    expect(routes.filter((route) => /[a-z]+_[0-9A-Za-z]{24}/.test(route ?? ''))).toEqual([]);
    expect(
      total(families, 'gateway_http_requests_total', { method: 'POST', route: '/v1/chat/completions', status: '200' }),
    ).toBe(1);

    // The process's memory and the ingestion queue, read at the scrape.
    expect(total(families, 'process_resident_memory_bytes')).toBeGreaterThan(1e6);
    expect(total(families, 'nodejs_heap_size_used_bytes')).toBeGreaterThan(1e5);
    expect(samplesOf(families, 'gateway_ingestion_queue_files').map((s) => [s.labels.state, s.value])).toEqual([
      ['ingesting', 0],
      ['waiting', 0],
    ]);
  });

  it("counts each matching policy's decision: allowed, then refused", async () => {
    freshMinute(gateway.clock);
    const other = await gateway.tenant({ organisationId: tenant.organisationId });
    await gateway.virtualKey(other, { base_url: 'http://fake.test/v1', default: true });
    const policy = await createPolicy(gateway, other, { value: 1 });
    const create = () =>
      gateway.request('/v1/chat/completions', {
        key: other.workspaceKey,
        body: { model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] },
      });
    expect((await create()).status).toBe(200);
    expect((await create()).status).toBe(429);
    await gateway.tasks.drain(10_000);
    const families = await scraped();
    expect(total(families, 'gateway_rate_limit_decisions_total', { policy_id: policy, decision: 'allowed' })).toBe(1);
    expect(total(families, 'gateway_rate_limit_decisions_total', { policy_id: policy, decision: 'refused' })).toBe(1);
    expect(
      total(families, 'gateway_http_requests_total', { route: '/v1/chat/completions', status: '429' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('takes an organisation key, as Bearer or in x-gateway-api-key', async () => {
    expect((await scrape({ 'x-gateway-api-key': tenant.orgKey })).status).toBe(200);
    expect((await scrape({ authorization: `Bearer ${tenant.orgKey}` })).status).toBe(200);
  });

  it('refuses a scrape without a key, with an unknown key and with a workspace key, in the one envelope', async () => {
    await expectScrapeRefusals(scrape, tenant.workspaceKey);

    // A refusal before the route is counted under the route asked for; a path no route has, as unmatched.
    const families = await scraped();
    expect(total(families, 'gateway_http_requests_total', { route: '/metrics', status: '401' })).toBe(2);
    expect(total(families, 'gateway_http_requests_total', { route: '/metrics', status: '403' })).toBe(1);
    await gateway.request('/v1/threads/thread_x', { method: 'GET' });
    await gateway.request('/nowhere/at/all');
    const after = await scraped();
    expect(total(after, 'gateway_http_requests_total', { route: '/v1/threads/:thread_id', status: '401' })).toBe(1);
    expect(total(after, 'gateway_http_requests_total', { route: 'unmatched', status: '404' })).toBe(1);
  });

  it("times requests by method, route pattern and status class, and the database's statements and commits by path", async () => {
    const count = (families: Map<string, MetricFamily>, family: string, labels: Record<string, string> = {}) =>
      total(families, family, labels, `${family}_count`);
    const route = { method: 'GET', route: '/v1/assistants/:assistant_id' };
    const before = await scraped();

    await client.beta.assistants.retrieve(assistantId);
    await client.beta.assistants.retrieve(assistantId);
    const missing = await gateway.request('/v1/assistants/asst_none', { key: tenant.workspaceKey });
    expect(missing.status).toBe(404);
    // A write of the app (a group on the writer thread) and a rate-limit admission (the counters'
    // immediate commit).
    await client.beta.assistants.create({ model: 'gpt-4o' });
    freshMinute(gateway.clock);
    await createPolicy(gateway, tenant, { value: 10 });
    await admitRequest(gateway.deps, requestAttributes(tenant), NO_RESERVATION);

    const after = await scraped();
    const grew = (family: string, labels: Record<string, string> = {}) =>
      count(after, family, labels) - count(before, family, labels);
    const requests = 'gateway_http_request_duration_seconds';
    expect(after.get(requests)?.type).toBe('histogram');
    expect(grew(requests, { ...route, status_class: '2xx' })).toBe(2);
    expect(grew(requests, { ...route, status_class: '4xx' })).toBe(1);
    // The path is never a label: one series per pattern, whatever ids were asked for.
    expect(samplesOf(after, requests, {}, `${requests}_count`).some((s) => s.labels.route?.includes('asst_'))).toBe(
      false,
    );
    const series = { ...route, status_class: '2xx' };
    expect(total(after, requests, { ...series, le: '+Inf' }, `${requests}_bucket`)).toBe(
      count(after, requests, series),
    );
    expect(total(after, requests, series, `${requests}_sum`)).toBeGreaterThan(0);

    expect(after.get('gateway_db_statement_duration_seconds')?.type).toBe('histogram');
    expect(grew('gateway_db_statement_duration_seconds')).toBeGreaterThanOrEqual(3);
    expect(grew('gateway_db_commit_duration_seconds', { path: 'group' })).toBeGreaterThanOrEqual(1);
    expect(grew('gateway_db_commit_duration_seconds', { path: 'immediate' })).toBeGreaterThanOrEqual(1);
    expect(
      total(after, 'gateway_db_commit_duration_seconds', { path: 'group' }, 'gateway_db_commit_duration_seconds_sum'),
    ).toBeGreaterThan(0);
  });

  // Last: it adds an organisation to the suite's gateway.
  it("is one organisation's to read: with a second one, neither's key reads it unless GATEWAY_METRICS_ORGANISATION names it", async () => {
    const stranger = await gateway.tenant();
    for (const key of [tenant.orgKey, stranger.orgKey]) {
      const refused = await scrape({ authorization: `Bearer ${key}` });
      expect(refused.status).toBe(403);
      expect((await errorOf(refused)).message).toMatch(/GATEWAY_METRICS_ORGANISATION/);
    }
    const named = await createTestGateway({ env: { GATEWAY_METRICS_ORGANISATION: 'org_metrics' } });
    try {
      await named.deps.db.insert(organisations).values({ id: 'org_metrics', name: 'metrics', createdAt: Date.now() });
      const owner = await named.tenant({ organisationId: 'org_metrics' });
      const other = await named.tenant();
      const read = (key: string) => named.app.request('/metrics', { headers: { authorization: `Bearer ${key}` } });
      expect((await read(owner.orgKey)).status).toBe(200);
      expect((await read(other.orgKey)).status).toBe(403);
    } finally {
      await named.close();
    }
  });
});

interface UsageResult {
  kind: string | null;
  model: string | null;
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
  num_requests: number;
}
