import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { organisations, runs } from '../src/db/schema';
import { newId, newUuid } from '../src/lib/ids';
import { nodeConfig } from '../src/runtime/node/config';
import { createNodeApp } from '../src/runtime/node/app';
import { createNodeDeps } from '../src/runtime/node/deps';
import { createApiKey } from '../src/resources/identities/api-keys';
import { createWorkspace } from '../src/resources/identities/workspaces';
import { cycle, measure, round } from './support';

/**
 * `npm run bench:usage`: 1,000,000 runs over 30 days in one workspace (20 API keys, 5 models, 4
 * virtual keys), ended the way the gateway ends them (an UPDATE of their status, which the usage
 * trigger of migration 0006 counts); then GET /v1/usage through the whole app in-process:
 * 30 daily buckets, grouped and not, and 168 hourly ones. Prints what ending a run costs with the
 * trigger against without it (per run, in batches), and the reads' p50/p99.
 */

const RUNS = Number(process.env.BENCH_RUNS ?? 1_000_000);
const DAYS = 30;
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 200);
const BATCH = 5_000;

const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-usage-'));
const config = nodeConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
const database = await openDatabase(config);
await migrateDatabase(database.db);
const db = database.db;
const app = createNodeApp(await createNodeDeps(config, database));

const organisationId = newUuid();
await db.insert(organisations).values({ id: organisationId, name: 'bench', createdAt: Date.now() });
const workspace = await createWorkspace(db, { organisationId, slug: 'bench', now: Date.now() });
const key = await createApiKey(db, {
  kind: 'workspace',
  organisationId,
  workspaceId: workspace.id,
  name: 'bench',
  now: Date.now(),
});
const apiKeys = Array.from({ length: 20 }, () => newUuid());
const virtualKeys = Array.from({ length: 4 }, () => newUuid());
const models = ['gpt-4o', 'gpt-4o-mini', 'o3', 'llama3.1', 'qwen2.5'];
const end = Date.now();
const start = end - DAYS * 86_400_000;

/** Inserts `count` in-progress runs spread over the 30 days, then ends them in batches; ms per run ended. */
async function endRuns(count: number): Promise<number> {
  for (let first = 0; first < count; first += 500) {
    const rows = [];
    for (let i = first; i < Math.min(count, first + 500); i++) {
      rows.push({
        id: newId('run'),
        workspaceId: workspace.id,
        threadId: `thread_${i}`,
        assistantId: 'asst_bench',
        virtualKeyId: cycle(virtualKeys, i),
        apiKeyId: cycle(apiKeys, i),
        status: 'in_progress' as const,
        createdAt: start + Math.floor((i / count) * (end - start)),
        model: cycle(models, i),
        instructions: '',
        tools: [],
        metadata: {},
        truncationStrategy: { type: 'auto' as const, last_messages: null },
        toolChoice: 'auto' as const,
        parallelToolCalls: true,
        responseFormat: 'auto' as const,
      });
    }
    await db.insert(runs).values(rows);
  }
  const usage = JSON.stringify({ prompt_tokens: 120, completion_tokens: 40, total_tokens: 160 });
  const started = performance.now();
  for (;;) {
    // As the gateway ends a run: one UPDATE setting its status and usage (here a batch at a time).
    const ended = await db.run(sql`UPDATE ${runs} SET status = 'completed', usage = ${usage}
      WHERE seq IN (SELECT seq FROM ${runs} WHERE status = 'in_progress' LIMIT ${BATCH})`);
    if (ended.rowsAffected === 0) break;
  }
  return (performance.now() - started) / count;
}

const withTrigger = await endRuns(RUNS);
// The same on rows the trigger does not see: what the UPDATE costs alone.
await db.run(sql`DROP TRIGGER usage_of_ended_runs`);
const sample = Math.min(RUNS, 200_000);
const withoutTrigger = await endRuns(sample);

const get = (query: string) => async () => {
  const response = await app.request(`/v1/usage?${query}`, { headers: { authorization: `Bearer ${key.plaintext}` } });
  if (response.status !== 200) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  await response.arrayBuffer();
};
const since = Math.floor(start / 1000);
const reads = {
  days_30_total: await measure(get(`start_time=${since}&limit=31`), ITERATIONS),
  days_30_by_model_and_api_key: await measure(
    get(`start_time=${since}&limit=31&group_by=model,api_key_id`),
    ITERATIONS,
  ),
  days_30_by_virtual_key: await measure(get(`start_time=${since}&limit=31&group_by=virtual_key`), ITERATIONS),
  hours_168_by_model: await measure(
    get(`start_time=${Math.floor((end - 7 * 86_400_000) / 1000)}&bucket_width=1h&limit=168&group_by=model`),
    ITERATIONS,
  ),
};
const [{ rows: usageRows }] = [await db.get<{ rows: number }>(sql`SELECT count(*) AS rows FROM usage`)];

console.log(
  JSON.stringify(
    {
      benchmark: 'usage',
      setup: `${RUNS} runs over ${DAYS} days in one workspace (20 API keys, 5 models, 4 virtual keys), embedded libSQL, the app in-process`,
      usage_rows: usageRows,
      end_run_ms_per_run: {
        with_usage_trigger: round(withTrigger, 4),
        without: round(withoutTrigger, 4),
        added: round(withTrigger - withoutTrigger, 4),
      },
      reads,
    },
    null,
    2,
  ),
);
database.close();
rmSync(dataDir, { recursive: true, force: true });
process.exit(0);
