import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { count, sql } from 'drizzle-orm';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { organisations, rateLimitPolicies } from '../src/db/schema';
import { newUuid } from '../src/lib/ids';
import { nodeConfig } from '../src/runtime/node/config';
import { createNodeApp } from '../src/runtime/node/app';
import { createNodeDeps } from '../src/runtime/node/deps';
import { createApiKey } from '../src/resources/identities/api-keys';
import { createWorkspace } from '../src/resources/identities/workspaces';
import { cycle, measure, required, round } from './support';

/**
 * `npm run bench:policies`: 100,000 policies over 100 workspaces in the embedded database; p50/p99
 * of listing (first page, a deep page, filtered) and creating, through the whole app in-process
 * (auth, validation, queries, JSON). The same scenario on a database holding one workspace only
 * shows whether other workspaces' policies cost anything.
 */

const WORKSPACES = Number(process.env.BENCH_WORKSPACES ?? 100);
const PER_WORKSPACE = Number(process.env.BENCH_POLICIES_PER_WORKSPACE ?? 1000);
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 2000);

async function scenario(workspaceCount: number) {
  const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-policies-'));
  // The workspace starts with 900 active policies and gains ITERATIONS more: a cap raised for it.
  const config = nodeConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', GATEWAY_MAX_POLICIES_PER_WORKSPACE: '1000000' });
  const database = await openDatabase(config);
  await migrateDatabase(database.db);
  const app = createNodeApp(await createNodeDeps(config, database));
  const db = database.db;

  const organisationId = newUuid();
  await db.insert(organisations).values({ id: organisationId, name: 'bench', createdAt: Date.now() });
  const workspaces = [];
  for (let w = 0; w < workspaceCount; w++) {
    workspaces.push(await createWorkspace(db, { organisationId, slug: `ws-${w}`, now: Date.now() }));
  }
  const seedStarted = performance.now();
  const types = ['requests', 'tokens'] as const;
  const units = ['rpm', 'rph', 'rpd'] as const;
  // Interleaved across workspaces, as real traffic would create them; one in ten archived.
  for (let first = 0; first < PER_WORKSPACE; first += 10) {
    const rows = [];
    for (const workspace of workspaces) {
      for (let i = first; i < first + 10; i++) {
        const now = Date.now();
        rows.push({
          id: newUuid(),
          organisationId,
          workspaceId: workspace.id,
          name: `policy ${i}`,
          type: cycle(types, i),
          unit: cycle(units, i),
          value: 100 + i,
          status: i % 10 === 9 ? ('archived' as const) : ('active' as const),
          conditions: [{ key: 'model', value: `model-${i % 7}` }],
          groupBy: [{ key: 'api_key' }],
          createdAt: now,
          lastUpdatedAt: now,
        });
      }
    }
    await db.insert(rateLimitPolicies).values(rows);
  }
  const seedSeconds = (performance.now() - seedStarted) / 1000;

  const target = required(workspaces[workspaceCount >> 1], 'the middle workspace');
  const { plaintext: key } = await createApiKey(db, {
    kind: 'workspace',
    organisationId,
    workspaceId: target.id,
    name: 'bench',
    now: Date.now(),
  });
  const headers = { 'x-gateway-api-key': key };
  const get = async (path: string) => {
    const response = await app.request(path, { headers });
    if (response.status !== 200) throw new Error(`${path}: ${response.status} ${await response.text()}`);
    return response.json() as Promise<{ data: unknown[]; total: number }>;
  };

  const active = (await get('/v1/policies/rate-limits?page_size=0')).total;
  const deepPage = Math.floor(active / 50) - 1;
  const results = {
    first_page: await measure(() => get('/v1/policies/rate-limits'), ITERATIONS),
    deep_page: await measure(() => get(`/v1/policies/rate-limits?current_page=${deepPage}`), ITERATIONS),
    filtered: await measure(() => get('/v1/policies/rate-limits?type=tokens&unit=rph&page_size=20'), ITERATIONS),
    create: await measure(async (i) => {
      const response = await app.request('/v1/policies/rate-limits', {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify({
          name: `bench ${i}`,
          conditions: [{ key: 'model', value: 'gpt-4o' }],
          group_by: [{ key: 'api_key' }],
          type: 'requests',
          unit: 'rpm',
          value: 10,
        }),
      });
      if (response.status !== 200) throw new Error(`create: ${response.status} ${await response.text()}`);
    }, ITERATIONS),
  };
  const [{ total }] = (await db.select({ total: count() }).from(rateLimitPolicies)) as [{ total: number }];
  const plan = await db.all<{ detail: string }>(
    sql`EXPLAIN QUERY PLAN SELECT * FROM rate_limit_policies WHERE workspace_id = ${target.id} AND status = 'active' AND type = 'tokens' ORDER BY seq DESC LIMIT 50 OFFSET 850`,
  );
  database.close();
  rmSync(dataDir, { recursive: true, force: true });
  return {
    policies_in_database: total,
    workspaces: workspaceCount,
    active_policies_in_listed_workspace: active,
    deep_page_index: deepPage,
    seed_seconds: round(seedSeconds, 1),
    query_plan: plan.map((row) => row.detail),
    ...results,
  };
}

const crowded = await scenario(WORKSPACES);
const alone = await scenario(1);
const ratio = (key: 'first_page' | 'deep_page' | 'filtered') => round(crowded[key].p99_ms / alone[key].p99_ms, 2);
console.log(
  JSON.stringify(
    {
      benchmark: 'policies',
      through: 'app.request in-process (auth + validation + queries + JSON), embedded libSQL file in WAL mode',
      target: 'list p99 < 10 ms, independent of other workspaces',
      crowded,
      alone,
      p99_ratio_crowded_over_alone: {
        first_page: ratio('first_page'),
        deep_page: ratio('deep_page'),
        filtered: ratio('filtered'),
      },
    },
    null,
    2,
  ),
);
