import { eq } from 'drizzle-orm';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { organisations, rateLimitPolicies } from '../src/db/schema';
import { newUuid } from '../src/lib/ids';
import { createLogger } from '../src/logger';
import { createNodeDeps, nodeConfig } from '../src/node-runtime';
import { admitRequest, type RequestAttributes } from '../src/ratelimit';
import { createWorkspace } from '../src/services/workspaces';
import { measure, round, summarise } from './support';

/**
 * `npm run bench:ratelimit`: the cost of the rate-limit decision. One embedded database holds a
 * workspace with 10,000 active policies, of which 10 match the benchmark's request (on different
 * keys, three of them tokens policies), and a workspace with none. admitRequest is timed for the
 * same request in each; the difference is what the decision adds. Limits are high enough that
 * nothing is refused: every admission writes its counters, as a real one does.
 */

const POLICIES = Number(process.env.BENCH_POLICIES ?? 10_000);
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 5000);
const CONCURRENCY = 32;

const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-ratelimit-'));
const config = nodeConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
const database = await openDatabase(config);
await migrateDatabase(database.db);
// BENCH_SYNCHRONOUS=normal shows what SQLite's synchronous=NORMAL (no fsync per commit in WAL mode) would change.
const SYNCHRONOUS = process.env.BENCH_SYNCHRONOUS ?? 'full';
await database.client.execute(`PRAGMA synchronous = ${SYNCHRONOUS === 'normal' ? 'NORMAL' : 'FULL'}`);
const { deps } = await createNodeDeps(config, database, { log: createLogger('warn') });
const db = database.db;

const organisationId = newUuid();
await db.insert(organisations).values({ id: organisationId, name: 'bench', createdAt: Date.now() });
const limited = await createWorkspace(db, { organisationId, slug: 'limited', now: Date.now() });
const unlimited = await createWorkspace(db, { organisationId, slug: 'unlimited', now: Date.now() });

const request = (workspaceId: string): RequestAttributes => ({
  api_key: 'key-bench',
  workspace_id: workspaceId,
  virtual_key: 'vk-main',
  provider: 'openai',
  model: 'gpt-4o',
  metadata: { team: 'blue', user: 'u-1' },
});

type Condition = { key: string; value: string };
const HIGH = 1e15;
const matching: { type: 'requests' | 'tokens'; unit: 'rpm' | 'rph' | 'rpd'; conditions: Condition[]; group: string }[] = [
  { type: 'requests', unit: 'rpm', conditions: [{ key: 'model', value: 'gpt-4o' }], group: 'api_key' },
  { type: 'requests', unit: 'rph', conditions: [{ key: 'api_key', value: 'key-bench' }], group: 'api_key' },
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
  { type: 'requests', unit: 'rpm', conditions: [{ key: 'workspace_id', value: limited.id }], group: 'api_key' },
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
  const spec = i < matching.length ? matching[i]! : null;
  const now = Date.now();
  rows.push({
    id: newUuid(),
    organisationId,
    workspaceId: limited.id,
    name: spec ? `matching ${i}` : `other ${i}`,
    type: spec?.type ?? (i % 2 ? 'tokens' : 'requests'),
    unit: spec?.unit ?? (['rpm', 'rph', 'rpd'] as const)[i % 3]!,
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

const withPolicies = request(limited.id);
const withoutPolicies = request(unlimited.id);
const check = await admitRequest(deps, withPolicies);
if (check.ticket?.policies.length !== 3 || !check.headers['x-ratelimit-limit-requests']) {
  throw new Error(`the benchmark request should match 10 policies (3 of tokens): ${JSON.stringify(check)}`);
}
const cacheLoad = await (async () => {
  // A policy write anywhere in the workspace makes the next admission reload its 10,000 policies.
  await db.update(rateLimitPolicies).set({ lastUpdatedAt: Date.now() }).where(eq(rateLimitPolicies.id, rows[matching.length]!.id));
  const start = performance.now();
  await admitRequest(deps, withPolicies);
  return round(performance.now() - start);
})();

async function throughput(attributes: RequestAttributes, concurrency: number) {
  const started = performance.now();
  let done = 0;
  while (done < ITERATIONS) {
    const batch = Math.min(concurrency, ITERATIONS - done);
    await Promise.all(Array.from({ length: batch }, () => admitRequest(deps, attributes)));
    done += batch;
  }
  return round(ITERATIONS / ((performance.now() - started) / 1000), 0);
}

/** Alternating runs, so that the machine's noise falls on both sides alike. */
async function latency(rounds = 4) {
  const samples = { with: [] as number[], without: [] as number[] };
  const time = async (attributes: RequestAttributes, into: number[]) => {
    const start = performance.now();
    await admitRequest(deps, attributes);
    into.push(performance.now() - start);
  };
  await measure(() => admitRequest(deps, withPolicies), 500);
  await measure(() => admitRequest(deps, withoutPolicies), 500);
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < ITERATIONS / rounds; i++) await time(withPolicies, samples.with);
    for (let i = 0; i < ITERATIONS / rounds; i++) await time(withoutPolicies, samples.without);
  }
  return { with: summarise(samples.with), without: summarise(samples.without) };
}

const { with: withTen, without: withNone } = await latency();
const rate = {
  sequential: { ten_matching: await throughput(withPolicies, 1), no_policies: await throughput(withoutPolicies, 1) },
  concurrency_32: {
    ten_matching: await throughput(withPolicies, CONCURRENCY),
    no_policies: await throughput(withoutPolicies, CONCURRENCY),
  },
};

database.close();
rmSync(dataDir, { recursive: true, force: true });

console.log(
  JSON.stringify(
    {
      benchmark: 'ratelimit',
      through: 'admitRequest in-process on the embedded libSQL file (WAL), every admission writing its counters',
      synchronous: SYNCHRONOUS,
      targets: 'added p99 < 1 ms; admissions per second with 10 matching policies >= 0.8 x with none',
      policies_in_workspace: POLICIES,
      matching_policies: matching.length,
      seed_seconds: round(seedSeconds, 1),
      reload_after_a_policy_change_ms: cacheLoad,
      latency_ms: { ten_matching: withTen, no_policies: withNone },
      added_ms: { p50: round(withTen.p50_ms - withNone.p50_ms), p99: round(withTen.p99_ms - withNone.p99_ms) },
      admissions_per_second: rate,
      throughput_ratio: {
        sequential: round(rate.sequential.ten_matching / rate.sequential.no_policies, 2),
        concurrency_32: round(rate.concurrency_32.ten_matching / rate.concurrency_32.no_policies, 2),
      },
    },
    null,
    2,
  ),
);
