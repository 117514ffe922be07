import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/sqld';
import { openDatabase, type NodeDatabase } from '../../src/db/node';
import { files, runs, vectorStoreFiles } from '../../src/db/schema';
import { defined } from '../support/defined';
import { insertDiedIngestion } from '../support/died-ingestion';
import { fakeDirective } from '../support/fake-upstream';
import { ROOT, startFakeUpstreamProcess, type FakeUpstreamProcess } from '../support/processes';
import { recordTally } from '../support/tally';
import { waitFor } from '../support/wait';
import { initialiseTenant } from '../support/workerd';
import { prepareWorkspace, type Target } from './support';

/**
 * `npm run dev:worker` as a developer runs it (wrangler dev, both Workers in one workerd, its sqld
 * on 127.0.0.1:8080), with its data in a directory of this test's own:
 *
 * - streamed runs 32 at a time all succeed. Its sqld used to collapse under them (its waiting
 *   connections spinning on the write lock, hundreds of its threads runnable on 2 cores: 50 of 320
 *   runs failed at 16 at once, every one of 640 at 32 once it had tipped over) until it was started
 *   to serve a few connections at once and queue the rest (scripts/sqld.ts DEV_SQLD_ARGS);
 * - `npm run dev:scheduled -- gateway` and `-- ingest` run each Worker's cron handler in it, seen
 *   by what each does: the sweep expires a run left waiting for tool outputs past its expiry, the
 *   ingest Worker's cron wakes its queue for a file whose ingestion died.
 *
 * The ingest Worker reads LIBSQL_URL from .dev.vars only (dev-worker.ts's overrides reach the
 * gateway alone): it must be the local sqld's, as .dev.vars.example has it. 8080 must be free.
 * DEV_WORKER_RUNS (640) sets the runs.
 */

const RUNS = Number(process.env.DEV_WORKER_RUNS ?? 640);
const CONCURRENCY = 32;
const SQLD_URL = 'http://127.0.0.1:8080';

let dataDir: string;
let upstream: FakeUpstreamProcess;
let devWorker: ChildProcess | undefined;
/** The end of dev:worker's output (wrangler's and the Workers' logs). */
let output = '';
let database: NodeDatabase;
let target: Target;

beforeAll(async () => {
  const taken = await fetch(`${SQLD_URL}/health`).then(
    () => true,
    () => false,
  );
  if (taken) throw new Error(`${SQLD_URL} answers: stop the dev:worker (or sqld) there, this test starts its own`);
  dataDir = mkdtempSync(join(tmpdir(), 'dev-worker-'));
  upstream = await startFakeUpstreamProcess();
  const port = await freePort();
  devWorker = spawn(
    process.execPath,
    ['--import', 'tsx', 'scripts/dev-worker.ts', '--port', String(port), '--data', dataDir],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  for (const stream of [defined(devWorker.stdout), defined(devWorker.stderr)])
    stream.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000)));
  const ready = await waitFor(
    () => output,
    (text) => text.includes(`Ready on http://127.0.0.1:${port}`) || devWorker?.exitCode !== null,
    120_000,
  );
  if (!ready.includes('Ready on')) throw new Error(`dev:worker did not start:\n${ready}`);
  const workspaceKey = await initialiseTenant({ url: SQLD_URL, dir: dataDir });
  target = await prepareWorkspace(`http://127.0.0.1:${port}`, workspaceKey, upstream.baseURL);
  database = await openDatabase({ DATA_DIR: dataDir, LIBSQL_URL: SQLD_URL });
}, 180_000);

afterAll(async () => {
  database?.close();
  if (devWorker && devWorker.exitCode === null) {
    const exited = new Promise((resolve) => devWorker?.once('exit', resolve));
    devWorker.kill('SIGTERM'); // dev-worker.ts stops wrangler, then sqld
    await exited;
  }
  await upstream?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
}, 60_000);

describe('npm run dev:worker', () => {
  it(`streams ${RUNS} runs ${CONCURRENCY} at a time, every one to its end`, async () => {
    const body = JSON.stringify({
      assistant_id: target.assistantId,
      stream: true,
      thread: { messages: [{ role: 'user', content: `Go\n${fakeDirective({ reply: 'a b c d e f g h' })}` }] },
    });
    const failures: Record<string, number> = {};
    let answered5xx = 0;
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < RUNS) {
          next++;
          const failure = await streamRun(body).catch((error: unknown) => String(error));
          if (failure === null) continue;
          if (failure.startsWith('HTTP 5')) answered5xx++;
          failures[failure] = (failures[failure] ?? 0) + 1;
        }
      }),
    );
    recordTally('dev-worker', { runsCreated: RUNS, answered5xx });
    const logs = output.split('\n').filter((line) => !line.includes('"level":"info"') && !line.includes(' 200 OK '));
    expect(failures, logs.join('\n').slice(-6000)).toEqual({});
  }, 600_000);

  it("runs the gateway's cron handler on `npm run dev:scheduled -- gateway`: the sweep expires an overdue run", async () => {
    const assistant = await post<{ id: string }>('/v1/assistants', {
      model: 'fake-model',
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
    });
    const created = await post<{ id: string; thread_id: string }>('/v1/threads/runs', {
      assistant_id: assistant.id,
      thread: { messages: [{ role: 'user', content: `Look it up\n${fakeDirective({ tool_calls: true })}` }] },
    });
    const path = `/v1/threads/${created.thread_id}/runs/${created.id}`;
    const waiting = await waitFor(
      () => get<{ status: string }>(path),
      (run) => run.status === 'requires_action',
      30_000,
    );
    expect(waiting.status).toBe('requires_action');
    const { db } = database;
    await db
      .update(runs)
      .set({ expiresAt: Date.now() - 1000 })
      .where(eq(runs.id, created.id));

    await scheduled('gateway');
    // Its row, not the API: a read through the gateway settles an overdue run on the way.
    const [row] = await db.select({ status: runs.status }).from(runs).where(eq(runs.id, created.id));
    expect(row?.status).toBe('expired');
  }, 120_000);

  it("runs the ingest Worker's cron handler on `npm run dev:scheduled -- ingest`: a file whose ingestion died is taken up", async () => {
    const form = new FormData();
    form.set('purpose', 'assistants');
    form.set('file', new Blob(['The harbour master rings the bell at noon.']), 'orphan.txt');
    const file = await post<{ id: string }>('/v1/files', form);
    const store = await post<{ id: string }>('/v1/vector_stores', { name: 'crashed ingestion' });
    const { db } = database;
    const [stored] = await db.select({ workspaceId: files.workspaceId }).from(files).where(eq(files.id, file.id));
    await insertDiedIngestion(db, {
      vectorStoreId: store.id,
      fileId: file.id,
      workspaceId: defined(stored).workspaceId,
    });

    await scheduled('ingest');
    const claimed = await waitFor(
      async () =>
        (
          await db
            .select({ attempts: vectorStoreFiles.attempts })
            .from(vectorStoreFiles)
            .where(and(eq(vectorStoreFiles.vectorStoreId, store.id), eq(vectorStoreFiles.fileId, file.id)))
        )[0],
      (row) => row?.attempts === 2,
      60_000,
    );
    expect(claimed?.attempts).toBe(2);
  }, 120_000);
});

/** One streamed run read to its end: null, or what went wrong (its ids left out, so alike failures count together). */
async function streamRun(body: string): Promise<string | null> {
  const response = await fetch(`${target.url}/v1/threads/runs`, { method: 'POST', headers: target.headers, body });
  const text = await response.text();
  if (response.status !== 200) return `HTTP ${response.status} ${text.slice(0, 200)}`;
  if (text.includes('event: thread.run.completed') && text.endsWith('data: [DONE]\n\n')) return null;
  const [, event, data = ''] = /event: (error|thread\.run\.failed)\ndata: (.*)/.exec(text) ?? [];
  return event
    ? `stream: ${event} ${data.replace(/"(run|thread|msg|step)_\w+"/g, '"$1_…"')}`
    : `stream: ${text.slice(-200)}`;
}

async function post<T>(path: string, body: FormData | object): Promise<T> {
  const form = body instanceof FormData;
  const headers: Record<string, string> = { ...target.headers };
  if (form) delete headers['content-type'];
  const response = await fetch(`${target.url}${path}`, {
    method: 'POST',
    headers,
    body: form ? body : JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`POST ${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

async function get<T>(path: string): Promise<T> {
  const response = await fetch(`${target.url}${path}`, { headers: target.headers });
  if (!response.ok) throw new Error(`GET ${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

/** `npm run dev:scheduled -- <worker>` against this test's dev:worker: fails unless it ran the handler. */
async function scheduled(worker: 'gateway' | 'ingest'): Promise<void> {
  const { stdout } = await promisify(execFile)('npm', ['run', '-s', 'dev:scheduled', '--', worker, '--data', dataDir], {
    cwd: ROOT,
  });
  expect(stdout).toContain('the scheduled handler ran');
}
