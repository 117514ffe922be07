import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { newUuid } from '../src/lib/ids';
import { createLogger } from '../src/logger';
import { nodeConfig } from '../src/runtime/node/config';
import { createNodeApp } from '../src/runtime/node/app';
import { createNodeDeps } from '../src/runtime/node/deps';
import { createApiKey } from '../src/resources/identities/api-keys';
import { createWorkspace } from '../src/resources/identities/workspaces';
import { fakeDirective } from '../test/support/fake-upstream';
import { cycle, round, sleep, startFakeProvider, summarise } from './support';

/**
 * `npm run bench:reload`: what one workspace's policy reloads cost every other workspace. One
 * workspace holds 10,000 policies of 32 conditions each (as one created before the caps, or under
 * a raised cap, can) and loops: change one policy, then create a run (whose admission reloads the
 * workspace's policies). Meanwhile another workspace reads its assistant (GET /v1/assistants/{id},
 * with its virtual key) every few milliseconds, open loop: each request's latency counts from when
 * it was due, so a stalled event loop shows in full. Phases:
 *
 * - idle: the big workspace does nothing (the baseline);
 * - runs: the big workspace creates runs, changing nothing (what its traffic costs by itself);
 * - put: a PUT of one policy's value before each run;
 * - replace: one policy deleted and inserted again by plain SQL before each run (a row gone from
 *   the workspace, which no incremental reload can see: the cache loads everything).
 *
 * The real app in this process (app.request, embedded libSQL file, as `npm start`), the fake
 * provider in a process of its own. Only the HTTP API and plain SQL are used, so the same file
 * measures an older version of the gateway too.
 */

const POLICIES = Number(process.env.BENCH_POLICIES ?? 10_000);
const CONDITIONS = 32;
const INTERVAL_MS = Number(process.env.BENCH_INTERVAL_MS ?? 5);
const PHASE_MS = Number(process.env.BENCH_PHASE_SECONDS ?? 15) * 1000;

const fakeUrl = await startFakeProvider();
const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-reload-'));
const config = nodeConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
const database = await openDatabase(config);
await migrateDatabase(database.db);
const deps = await createNodeDeps(config, database, { log: createLogger('warn') });
const app = createNodeApp(deps);
const { tasks } = app;
const { db, client } = database;

const organisationId = newUuid();
await client.execute({
  sql: 'INSERT INTO organisations (id, name, created_at) VALUES (?, ?, ?)',
  args: [organisationId, 'bench', Date.now()],
});

interface Tenant {
  workspaceId: string;
  headers: Record<string, string>;
  assistantId: string;
}

async function request(path: string, headers: Record<string, string>, init: { method?: string; body?: unknown } = {}) {
  const response = await app.request(path, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers: { ...headers, 'content-type': 'application/json' },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  if (response.status !== 200) throw new Error(`${path}: HTTP ${response.status} ${await response.text()}`);
  return (await response.json()) as Record<string, unknown>;
}

/** A workspace with its key, a virtual key on the fake and an assistant, all through the API. */
async function tenant(slug: string): Promise<Tenant> {
  const workspace = await createWorkspace(db, { organisationId, slug, now: Date.now() });
  const key = await createApiKey(db, {
    kind: 'workspace',
    organisationId,
    workspaceId: workspace.id,
    name: 'bench',
    now: Date.now(),
  });
  const headers = { 'x-gateway-api-key': key.plaintext };
  await request('/v1/virtual-keys', headers, {
    body: { slug: 'vk-main', provider: 'openai', base_url: `${fakeUrl}/v1`, api_key: 'sk-bench' },
  });
  const withKey = { ...headers, 'x-gateway-virtual-key': 'vk-main' };
  const assistant = await request('/v1/assistants', withKey, { body: { model: 'gpt-4o', instructions: 'Be brief.' } });
  return { workspaceId: workspace.id, headers: withKey, assistantId: String(assistant.id) };
}

const big = await tenant('big');
const other = await tenant('other');

// The big workspace's policies, by plain SQL in batches: none matches its runs (model gpt-4o).
const seedStarted = performance.now();
const ids: string[] = [];
const rowOf = (i: number, id: string) => {
  const conditions = [
    { key: 'model', value: `model-${i}` },
    ...Array.from({ length: CONDITIONS - 1 }, (_, j) => ({ key: `metadata.key-${j}`, value: `value-${i % 97}-${j}` })),
  ];
  const now = Date.now();
  return [
    id,
    organisationId,
    big.workspaceId,
    `policy ${i}`,
    'requests',
    'rpm',
    1000,
    'active',
    JSON.stringify(conditions),
    '[{"key":"api_key"}]',
    now,
    now,
  ];
};
const INSERT = (rows: number) =>
  `INSERT INTO rate_limit_policies (id, organisation_id, workspace_id, name, type, unit, value, status, conditions, group_by, created_at, last_updated_at) VALUES ${Array.from({ length: rows }, () => '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)').join(', ')}`;
for (let first = 0; first < POLICIES; first += 500) {
  const batch = [];
  for (let i = first; i < Math.min(POLICIES, first + 500); i++) {
    const id = newUuid();
    ids.push(id);
    batch.push(...rowOf(i, id));
  }
  await client.execute({ sql: INSERT(batch.length / 12), args: batch });
}
const seedSeconds = (performance.now() - seedStarted) / 1000;
// The seed's WAL copied into the database now, not by a checkpoint in the middle of a phase.
await client.execute('PRAGMA wal_checkpoint(TRUNCATE)');

let sent = 0;
const runBody = () => ({
  assistant_id: big.assistantId,
  thread: { messages: [{ role: 'user', content: `Run ${sent++}\n${fakeDirective({ reply: 'A short answer.' })}` }] },
});

/** One loop of the big workspace: the change, then a timed run creation (its admission reloads). */
const changes = {
  none: async () => {},
  put: async (i: number) => {
    await request(`/v1/policies/rate-limits/${ids[i % ids.length]}`, big.headers, {
      method: 'PUT',
      body: { value: 1000 + (i % 1000) },
    });
  },
  replace: async (i: number) => {
    const index = i % ids.length;
    await client.execute({ sql: 'DELETE FROM rate_limit_policies WHERE id = ?', args: [cycle(ids, index)] });
    const id = newUuid();
    ids[index] = id;
    await client.execute({ sql: INSERT(1), args: rowOf(index, id) });
  },
};

/**
 * The other workspace's requests, one every INTERVAL_MS for PHASE_MS, each timed from when it was
 * due, while `loop` (if any) runs the big workspace.
 */
async function phase(change?: (i: number) => Promise<void>) {
  // Every phase starts from an empty WAL, so that checkpoints (which copy it into the database on
  // the event loop, and come with the runs' writes) weigh on each phase alike.
  await client.execute('PRAGMA wal_checkpoint(TRUNCATE)');
  let running = true;
  let loops = 0;
  const creates: number[] = [];
  const bigLoop = (async () => {
    while (running && change) {
      await change(loops);
      const started = performance.now();
      await request('/v1/threads/runs', big.headers, { body: runBody() });
      creates.push(performance.now() - started);
      loops++;
    }
  })();
  const samples: number[] = [];
  const pending: Promise<unknown>[] = [];
  // How long the event loop was held at a time: what every request of every tenant waits behind.
  const stalls = monitorEventLoopDelay({ resolution: 1 });
  stalls.enable();
  const start = performance.now();
  for (let i = 0; start + i * INTERVAL_MS < start + PHASE_MS; i++) {
    const due = start + i * INTERVAL_MS;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    pending.push(
      request(`/v1/assistants/${other.assistantId}`, other.headers).then(() => samples.push(performance.now() - due)),
    );
  }
  await Promise.all(pending);
  stalls.disable();
  running = false;
  await bigLoop;
  if (!(await tasks.drain(120_000))) throw new Error('background runs did not end');
  return {
    other_workspace_get_assistant_ms: summarise(samples),
    event_loop_delay_ms: { p99: round(stalls.percentile(99) / 1e6), max: round(stalls.max / 1e6) },
    big_workspace: { loops, run_create_ms: summarise(creates) },
  };
}

// Warm up: JIT, prepared statements, the policy cache (a first full load), the fake's connections.
for (let i = 0; i < 200; i++) await request(`/v1/assistants/${other.assistantId}`, other.headers);
await request('/v1/threads/runs', big.headers, { body: runBody() });
await tasks.drain(60_000);

const idle = await phase();
const runs = await phase(changes.none);
const put = await phase(changes.put);
const replace = await phase(changes.replace);
const added = (during: typeof idle) => ({
  p50: round(during.other_workspace_get_assistant_ms.p50_ms - idle.other_workspace_get_assistant_ms.p50_ms),
  p99: round(during.other_workspace_get_assistant_ms.p99_ms - idle.other_workspace_get_assistant_ms.p99_ms),
});

database.close();
rmSync(dataDir, { recursive: true, force: true });

console.log(
  JSON.stringify(
    {
      benchmark: 'reload',
      through:
        'app.request on the real app (embedded libSQL file); the other workspace sends GET /v1/assistants/{id} every interval, open loop',
      target: "a reload of the big workspace adds at most 10 ms to the other workspace's p99",
      load_average_at_start: loadavg().map((load) => round(load, 2)),
      policies_in_big_workspace: POLICIES,
      conditions_per_policy: CONDITIONS,
      interval_ms: INTERVAL_MS,
      phase_seconds: PHASE_MS / 1000,
      seed_seconds: round(seedSeconds, 1),
      idle,
      runs_only: runs,
      put_before_each_run: put,
      replace_before_each_run: replace,
      added_to_other_workspace_ms: {
        runs_only: added(runs),
        put_before_each_run: added(put),
        replace_before_each_run: added(replace),
      },
    },
    null,
    2,
  ),
);
process.exit(0);
