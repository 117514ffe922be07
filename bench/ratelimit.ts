import { eq } from 'drizzle-orm';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { organisations, rateLimitPolicies } from '../src/db/schema';
import { newUuid } from '../src/lib/ids';
import { createLogger } from '../src/logger';
import { nodeConfig } from '../src/runtime/node/config';
import { createNodeApp } from '../src/runtime/node/app';
import { createNodeDeps } from '../src/runtime/node/deps';
import { admitRequest, type RequestAttributes } from '../src/ratelimit';
import { createApiKey } from '../src/resources/identities/api-keys';
import { createVirtualKey } from '../src/resources/virtual-keys/commands';
import { createWorkspace } from '../src/resources/identities/workspaces';
import { fakeDirective } from '../test/support/fake-upstream';
import { cycle, required, round, startFakeProvider, summarise } from './support';

/**
 * `npm run bench:ratelimit`: what rate limiting adds to run traffic. The real app runs in this
 * process on an embedded libSQL file (WAL, synchronous=FULL), and is called with app.request
 * (no sockets: the comparison is the stricter for it); the fake provider runs in a process of its
 * own. Two workspaces, each with a virtual key on the fake and an assistant: one with 10,000 active
 * policies of which 10 match its runs (on different keys and units, three of them tokens
 * policies), the other with none. The same non-streamed POST /v1/threads/runs is timed in each;
 * the difference is what the decision adds. Limits are high enough that nothing is refused: every
 * admission writes its counters and every run charges its tokens, as real ones do. Each run
 * executes in the background against the fake, as it would in production.
 */

const POLICIES = Number(process.env.BENCH_POLICIES ?? 10_000);
/** Run creations per latency sample set and per throughput measurement. */
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 1000);
const CONCURRENCY = 32;

const { url: fakeUrl } = await startFakeProvider();
const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-ratelimit-'));
const config = nodeConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
const database = await openDatabase(config);
await migrateDatabase(database.db);
const deps = await createNodeDeps(config, database, { log: createLogger('warn') });
const app = createNodeApp(deps);
const { tasks } = app;
const db = database.db;

const organisationId = newUuid();
await db.insert(organisations).values({ id: organisationId, name: 'bench', createdAt: Date.now() });

interface Caller {
  workspaceId: string;
  keyId: string;
  headers: Record<string, string>;
  assistantId: string;
}

/** A workspace with a workspace key, a virtual key `vk-main` on the fake and an assistant. */
async function caller(slug: string): Promise<Caller> {
  const now = Date.now();
  const workspace = await createWorkspace(db, { organisationId, slug, now });
  const key = await createApiKey(db, {
    kind: 'workspace',
    organisationId,
    workspaceId: workspace.id,
    name: 'bench',
    now,
  });
  await createVirtualKey(db, deps.secrets, {
    workspaceId: workspace.id,
    body: { slug: 'vk-main', provider: 'openai', api_key: 'sk-bench', base_url: `${fakeUrl}/v1` },
    upstreamRules: { allowPrivate: true },
    maxKeys: deps.config.GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE,
    now,
  });
  const headers = {
    'x-gateway-api-key': key.plaintext,
    'x-gateway-virtual-key': 'vk-main',
    'x-gateway-metadata': JSON.stringify({ team: 'blue', user: 'u-1' }),
    'content-type': 'application/json',
  };
  const assistant = await app.request('/v1/assistants', {
    method: 'POST',
    headers,
    body: JSON.stringify({ model: 'gpt-4o' }),
  });
  if (assistant.status !== 200) throw new Error(`assistant: HTTP ${assistant.status} ${await assistant.text()}`);
  return {
    workspaceId: workspace.id,
    keyId: key.record.id,
    headers,
    assistantId: ((await assistant.json()) as { id: string }).id,
  };
}

const limited = await caller('limited');
const unlimited = await caller('unlimited');

type Condition = { key: string; value: string };
const HIGH = 1e15;
const matching: { type: 'requests' | 'tokens'; unit: 'rpm' | 'rph' | 'rpd'; conditions: Condition[]; group: string }[] =
  [
    { type: 'requests', unit: 'rpm', conditions: [{ key: 'model', value: 'gpt-4o' }], group: 'api_key' },
    { type: 'requests', unit: 'rph', conditions: [{ key: 'api_key', value: limited.keyId }], group: 'api_key' },
    { type: 'requests', unit: 'rpd', conditions: [{ key: 'virtual_key', value: 'vk-main' }], group: 'workspace_id' },
    { type: 'requests', unit: 'rpm', conditions: [{ key: 'provider', value: 'openai' }], group: 'metadata.user' },
    { type: 'requests', unit: 'rpm', conditions: [{ key: 'metadata.team', value: 'blue' }], group: 'metadata.team' },
    {
      type: 'requests',
      unit: 'rph',
      conditions: [
        { key: 'model', value: '*' },
        { key: 'metadata.user', value: '*' },
      ],
      group: 'metadata.user',
    },
    {
      type: 'requests',
      unit: 'rpm',
      conditions: [{ key: 'workspace_id', value: limited.workspaceId }],
      group: 'api_key',
    },
    { type: 'tokens', unit: 'rpm', conditions: [{ key: 'model', value: 'gpt-4o' }], group: 'api_key' },
    {
      type: 'tokens',
      unit: 'rph',
      conditions: [
        { key: 'provider', value: 'openai' },
        { key: 'virtual_key', value: 'vk-main' },
      ],
      group: 'virtual_key',
    },
    { type: 'tokens', unit: 'rpd', conditions: [{ key: 'metadata.team', value: '*' }], group: 'workspace_id' },
  ];

/** Policies that miss the request in different ways, some only on their last condition. */
function missing(i: number): Condition[] {
  switch (i % 6) {
    case 0:
      return [{ key: 'model', value: `model-${i}` }];
    case 1:
      return [{ key: 'api_key', value: `key-${i}` }];
    case 2:
      return [{ key: 'virtual_key', value: `vk-${i}` }];
    case 3:
      return [{ key: `metadata.absent-${i % 50}`, value: '*' }];
    case 4:
      return [
        { key: 'model', value: 'gpt-4o' },
        { key: 'metadata.team', value: `team-${i}` },
      ];
    default:
      return [
        { key: 'provider', value: 'openai' },
        { key: 'metadata.user', value: `user-${i}` },
      ];
  }
}

const seedStarted = performance.now();
const rows = [];
for (let i = 0; i < POLICIES; i++) {
  const spec = matching[i] ?? null;
  const now = Date.now();
  rows.push({
    id: newUuid(),
    organisationId,
    workspaceId: limited.workspaceId,
    name: spec ? `matching ${i}` : `other ${i}`,
    type: spec?.type ?? (i % 2 ? 'tokens' : 'requests'),
    unit: spec?.unit ?? cycle(['rpm', 'rph', 'rpd'] as const, i),
    value: HIGH,
    status: 'active' as const,
    conditions: spec?.conditions ?? missing(i),
    groupBy: [{ key: spec?.group ?? 'api_key' }],
    createdAt: now,
    lastUpdatedAt: now,
  });
}
for (let first = 0; first < rows.length; first += 500) {
  await db.insert(rateLimitPolicies).values(rows.slice(first, first + 500));
}
const seedSeconds = (performance.now() - seedStarted) / 1000;

let sent = 0;
/** A non-streamed run creation: ms to the queued run, checked to be governed by policies in `limited` only. */
async function createRun(who: Caller): Promise<number> {
  const body = JSON.stringify({
    assistant_id: who.assistantId,
    thread: { messages: [{ role: 'user', content: `Run ${sent++}\n${fakeDirective({ reply: 'A short answer.' })}` }] },
  });
  const started = performance.now();
  const response = await app.request('/v1/threads/runs', { method: 'POST', headers: who.headers, body });
  const run = (await response.json()) as { status?: string };
  const elapsed = performance.now() - started;
  if (run.status !== 'queued') throw new Error(`unexpected answer ${JSON.stringify(run)}`);
  const limitedHeader = response.headers.get('x-ratelimit-limit-requests');
  if ((limitedHeader !== null) !== (who === limited)) throw new Error(`wrong policies applied: ${limitedHeader}`);
  return elapsed;
}

/** Lets the runs executing in the background end, so that one phase's work does not weigh on the next. */
async function drain() {
  if (!(await tasks.drain(120_000))) throw new Error('background runs did not end');
}

const attributes = (who: Caller): RequestAttributes => ({
  api_key: who.keyId,
  workspace_id: who.workspaceId,
  virtual_key: 'vk-main',
  provider: 'openai',
  model: 'gpt-4o',
  metadata: { team: 'blue', user: 'u-1' },
});
/** The decision alone, as for a turn that reserves nothing (the runs created below reserve their own). */
const TURN = { reservation: 0, baseTokens: 0 };
const check = await admitRequest(deps, attributes(limited), TURN);
if (check.ticket?.policies.length !== 3 || !check.headers['x-ratelimit-limit-requests']) {
  throw new Error(`the benchmark request should match 10 policies (3 of tokens): ${JSON.stringify(check)}`);
}
const cacheLoad = await (async () => {
  // A policy write anywhere in the workspace makes the next admission reload what changed: one row.
  await db
    .update(rateLimitPolicies)
    .set({ lastUpdatedAt: Date.now() })
    .where(eq(rateLimitPolicies.id, required(rows[matching.length], 'a policy that does not match').id));
  const start = performance.now();
  await admitRequest(deps, attributes(limited), TURN);
  return round(performance.now() - start);
})();

/**
 * One creation in each workspace in turn, so that the machine's noise falls on both sides alike,
 * each after the runs before it ended: what is timed is the creation, not the runs executing
 * beside it. Also the decision on its own: admitRequest for the same request, between them.
 */
async function latency() {
  const samples = { with: [] as number[], without: [] as number[], decision: [] as number[] };
  for (let i = 0; i < ITERATIONS; i++) {
    samples.with.push(await createRun(limited));
    await drain();
    samples.without.push(await createRun(unlimited));
    await drain();
    const started = performance.now();
    await admitRequest(deps, attributes(limited), TURN);
    samples.decision.push(performance.now() - started);
  }
  return { with: summarise(samples.with), without: summarise(samples.without), decision: summarise(samples.decision) };
}

/** Run creations per second (answers, the runs then executing in the background). */
async function throughput(who: Caller, concurrency: number) {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < ITERATIONS) {
        next++;
        await createRun(who);
      }
    }),
  );
  const perSecond = ITERATIONS / ((performance.now() - started) / 1000);
  await drain();
  return perSecond;
}

/** Several alternating measurements of each side; the median of each. */
async function rates(concurrency: number, repeats = 3) {
  const withTen: number[] = [];
  const withNone: number[] = [];
  for (let r = 0; r < repeats; r++) {
    withTen.push(await throughput(limited, concurrency));
    withNone.push(await throughput(unlimited, concurrency));
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;
  return { ten_matching: round(median(withTen), 0), no_policies: round(median(withNone), 0) };
}

// Warm both paths (JIT, prepared statements, SQLite's cache, connections to the fake).
for (let i = 0; i < 300; i++) await Promise.all([createRun(limited), createRun(unlimited)]);
await drain();

const { with: withTen, without: withNone, decision } = await latency();
const rate = { sequential: await rates(1), concurrency_32: await rates(CONCURRENCY) };

database.close();
rmSync(dataDir, { recursive: true, force: true });

console.log(
  JSON.stringify(
    {
      benchmark: 'ratelimit',
      through:
        'non-streamed POST /v1/threads/runs via app.request on the real app (embedded libSQL file, WAL, synchronous=FULL); runs execute in the background against the fake provider in its own process',
      targets: 'added p99 < 1 ms; run creations per second with 10 matching policies >= 0.8 x with none',
      // Other work on the machine skews the figures: this says how much there was.
      load_average_at_start: loadavg().map((load) => round(load, 2)),
      policies_in_workspace: POLICIES,
      matching_policies: matching.length,
      seed_seconds: round(seedSeconds, 1),
      reload_after_a_policy_change_ms: cacheLoad,
      create_latency_ms: { ten_matching: withTen, no_policies: withNone },
      added_ms: { p50: round(withTen.p50_ms - withNone.p50_ms), p99: round(withTen.p99_ms - withNone.p99_ms) },
      decision_alone_ms: decision,
      creations_per_second: rate,
      throughput_ratio: {
        sequential: round(rate.sequential.ten_matching / rate.sequential.no_policies, 2),
        concurrency_32: round(rate.concurrency_32.ten_matching / rate.concurrency_32.no_policies, 2),
      },
    },
    null,
    2,
  ),
);
process.exit(0);
