import { env, exports } from 'cloudflare:workers';
import { runInDurableObject } from 'cloudflare:test';
import { beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { MetricsAggregate } from '../../src/runtime/workers/metrics';
import { defined } from '../support/defined';
import { json } from '../support/envelope';
import { expectScrapeRefusals } from '../support/scrape-refusals';
import { parsePrometheusText, samplesOf, total, type MetricFamily } from '../support/prometheus';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * GET /metrics on workerd: the figures every isolate recorded (the entry's requests, the run's in
 * its RunExecutor), handed to the one MetricsAggregate and read by a strict reader of the text
 * format; they agree with GET /v1/usage after a streamed run through the fake provider. Test files
 * run beside this one on the same Worker, so what only this file does is told apart by its labels
 * (a model and a virtual key of its own); the rest is compared before and after.
 */

const tenant = inject('workersTenant');
const model = `metrics-${crypto.randomUUID().slice(0, 8)}`;
let virtualKeyId: string;
let headers: Record<string, string>;

/** The deployment's one aggregate (runtime/workers/metrics.ts). */
const aggregate = () => env.METRICS.get(env.METRICS.idFromName('gateway'));

const scrape = (scrapeHeaders: Record<string, string> = { authorization: `Bearer ${tenant.orgKey}` }) =>
  exports.default.fetch('http://gateway/metrics', { headers: scrapeHeaders });

async function scraped(): Promise<Map<string, MetricFamily>> {
  const response = await scrape();
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  return parsePrometheusText(await response.text());
}

interface UsageResult {
  kind: string;
  model: string;
  input_tokens: number;
  output_tokens: number;
  num_requests: number;
}

/** This file's model's usage, as GET /v1/usage counts it. */
async function usageOfModel(): Promise<UsageResult | undefined> {
  const response = await exports.default.fetch('http://gateway/v1/usage?group_by=model,kind&bucket_width=1d', {
    headers,
  });
  const body = (await json(response)) as { data: { results: UsageResult[] }[] };
  return body.data.flatMap((bucket) => bucket.results).find((result) => result.model === model);
}

beforeAll(async () => {
  const slug = `metrics-${crypto.randomUUID().slice(0, 8)}`;
  const created = (await fakeProviderKey(tenant.workspaceKey, slug)) as { id: string };
  virtualKeyId = created.id;
  headers = { 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug };
});

describe('GET /metrics on workerd', () => {
  it("adds up every isolate's figures, which agree with GET /v1/usage after a streamed run", async () => {
    const before = await scraped();
    const client = gatewayClient(headers);
    const assistant = await client.beta.assistants.create({ model });
    const stream = await client.beta.threads.createAndRun({
      assistant_id: assistant.id,
      thread: { messages: [{ role: 'user', content: 'Hello' }] },
      stream: true,
    });
    let completed = '';
    for await (const event of stream) if (event.event === 'thread.run.completed') completed = event.data.id;
    expect(completed).toMatch(/^run_/);
    const usage = await vi.waitFor(async () => defined(await usageOfModel()), { timeout: 20_000, interval: 100 });
    expect(usage).toMatchObject({ kind: 'run', num_requests: 1 });
    expect(usage.input_tokens + usage.output_tokens).toBeGreaterThan(0);

    // The isolates hand their figures to the aggregate themselves, after the requests and the run,
    // before any scrape asks (a scrape hands off its own isolate's too, which here is also the
    // run's). Traffic goes on, as on a deployment: a hand-off that a dropped timer missed goes with
    // the next request past the interval.
    await vi.waitFor(
      async () => {
        await (await exports.default.fetch('http://gateway/health')).body?.cancel();
        const sums = await runInDurableObject(aggregate(), (instance) => instance.scrape([]));
        const tokens = sums.find((family) => family.name === 'gateway_tokens_total')?.series ?? [];
        const handed = tokens.filter((series) => series.labels.model === model);
        expect(handed.reduce((sum, series) => sum + ('value' in series ? series.value : 0), 0)).toBe(
          usage.input_tokens + usage.output_tokens,
        );
      },
      { timeout: 20_000, interval: 100 },
    );

    // The scrape's figures, in the text format.
    const after = await vi.waitFor(
      async () => {
        const families = await scraped();
        const tokens = (type: string) => total(families, 'gateway_tokens_total', { kind: 'run', model, type });
        expect([tokens('prompt'), tokens('completion')]).toEqual([usage.input_tokens, usage.output_tokens]);
        const key = { virtual_key_id: virtualKeyId };
        expect(total(families, 'gateway_provider_calls_total', key)).toBe(1);
        expect(total(families, 'gateway_provider_calls_total', { ...key, outcome: 'ok' })).toBe(1);
        return families;
      },
      { timeout: 20_000, interval: 100 },
    );
    const key = { virtual_key_id: virtualKeyId };
    const firstByte = 'gateway_provider_first_byte_seconds';
    expect(total(after, firstByte, key, `${firstByte}_count`)).toBe(1);
    const duration = 'gateway_provider_call_duration_seconds';
    expect(total(after, duration, { ...key, outcome: 'ok' }, `${duration}_count`)).toBe(1);
    expect(total(after, duration, { ...key, outcome: 'ok' }, `${duration}_sum`)).toBeGreaterThan(0);

    // Runs and requests carry no label of this file's: they grew by at least this file's own.
    const grew = (family: string, labels: Record<string, string>, name = family) =>
      total(after, family, labels, name) - total(before, family, labels, name);
    expect(grew('gateway_runs_ended_total', { kind: 'run', status: 'completed' })).toBeGreaterThanOrEqual(
      usage.num_requests,
    );
    expect(
      grew('gateway_http_requests_total', { method: 'POST', route: '/v1/threads/runs', status: '200' }),
    ).toBeGreaterThanOrEqual(1);
    const seconds = 'gateway_http_request_duration_seconds';
    expect(
      grew(seconds, { method: 'POST', route: '/v1/threads/runs', status_class: '2xx' }, `${seconds}_count`),
    ).toBeGreaterThanOrEqual(1);
    // The database's round trips, timed on Workers as a libSQL server's are on Node.
    const statements = 'gateway_db_statement_duration_seconds';
    expect(grew(statements, {}, `${statements}_count`)).toBeGreaterThan(0);
    expect(
      total(
        after,
        'gateway_db_commit_duration_seconds',
        { path: 'server' },
        'gateway_db_commit_duration_seconds_count',
      ),
    ).toBeGreaterThan(0);

    // Read at the scrape from the database, as on Node; an isolate has no process memory to report.
    expect(samplesOf(after, 'gateway_ingestion_queue_files').map((sample) => sample.labels.state)).toEqual([
      'ingesting',
      'waiting',
    ]);
    expect(after.has('process_resident_memory_bytes')).toBe(false);
    expect(after.has('nodejs_heap_size_used_bytes')).toBe(false);
  });

  it('keeps the sums in its storage: an object started afresh on it reads the same', async () => {
    await scraped();
    const [kept, reread] = await runInDurableObject(aggregate(), async (instance, state) => [
      await instance.scrape([]),
      await new MetricsAggregate(state, env).scrape([]),
    ]);
    const tokens = (families: typeof kept) => families.find((family) => family.name === 'gateway_tokens_total');
    expect(defined(tokens(kept)).series.length).toBeGreaterThan(0);
    expect(reread).toEqual(kept);
  });

  it('takes an organisation key, as Bearer or in x-gateway-api-key', async () => {
    const keys: Record<string, string>[] = [
      { 'x-gateway-api-key': tenant.orgKey },
      { authorization: `Bearer ${tenant.orgKey}` },
    ];
    for (const scrapeHeaders of keys) {
      const response = await scrape(scrapeHeaders);
      expect(response.status).toBe(200);
      await response.body?.cancel();
    }
  });

  it('refuses a scrape without a key, with an unknown key and with a workspace key, in the one envelope', async () => {
    await expectScrapeRefusals(scrape, tenant.workspaceKey);
  });

  it("keeps a client's valid X-Request-Id", async () => {
    const response = await exports.default.fetch('http://gateway/health', { headers: { 'x-request-id': 'edge-42' } });
    expect(response.headers.get('x-request-id')).toBe('edge-42');
    await response.body?.cancel();
  });
});
