import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { Miniflare } from 'miniflare';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';
import { bundleWorker, TARGETS } from '../scripts/bundle-worker';
import { startSqld } from '../scripts/sqld';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { generateKeyBase64 } from '../src/lib/secrets';
import { initialise } from '../src/services/organisations';
import { fakeDirective } from '../test/support/fake-upstream';
import { cpuMs, pool, post, readStream, round, sequential, startFakeProvider, summarise } from './support';

/**
 * `npm run bench:worker`: the gateway Worker's CPU per run on the Workers runtime. The Worker is
 * the bundle `wrangler deploy` uploads (`npm run build:worker`'s), with wrangler.toml's bindings,
 * in a workerd of its own started by Miniflare (as the workerd tests start the ingest Worker), on a
 * local sqld, with the fake provider in a process of its own; this process is the client. The run
 * is bench:compare's: POST /v1/threads/runs, streamed, a thread of one message, an 8-word answer
 * (the fetch handler, then the run's Durable Object executing it: both billed).
 *
 * For BENCH_SEQUENTIAL runs one at a time (200) and BENCH_CONCURRENT runs 32 at a time (800),
 * after a warm-up: runs per second, the first token's latency (p50/p99), and the workerd
 * process's CPU ms per run (/proc utime + stime over the phase, every thread).
 *
 * Cloudflare bills a request's CPU time, which its tail events report as `cpuTime`; workerd run
 * locally reports 0 there (tail and streaming tail workers alike), so the process's CPU is the
 * figure here: an upper bound of the billed one, since it also counts what the runtime does
 * outside the isolate (HTTP, the connections to sqld and the provider, RPC to the object).
 * Not `wrangler dev`: it turns on the inspector's network events, which workerd then emits for every
 * subrequest (each SQL statement is one) and a second workerd, wrangler's proxy in front, relays:
 * measured that way, the proxy alone took about as much CPU per run as the Worker's workerd.
 */

const N1 = Number(process.env.BENCH_SEQUENTIAL ?? 200);
const N32 = Number(process.env.BENCH_CONCURRENT ?? 800);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const content = `go\n${fakeDirective({ reply: 'a b c d e f g h' })}`;

const { url: fakeUrl } = await startFakeProvider();
const bundleDir = mkdtempSync(join(tmpdir(), 'bench-worker-'));
// sqld sheds load with 429s when its requests slow down, as they do with this machine's cores busy
// at 32 runs at a time: not what is measured here.
const sqld = await startSqld({ args: ['--disable-intelligent-throttling'] });
let worker: Miniflare | undefined;
try {
  const workspaceKey = await tenant();
  worker = startWorker(await bundleWorker(TARGETS.gateway, bundleDir, 'ignore'));
  const url = (await worker.ready).origin;
  const pid = workerdProcess();
  const target = await prepare(url, { authorization: `Bearer ${workspaceKey}`, 'content-type': 'application/json' });
  await pool(100, 8, () => firstToken(target));
  const result = {
    benchmark: 'worker',
    setup:
      'client (this process) -> workerd (Miniflare: the deployed bundle, its runs in Durable Objects) -> fake provider ' +
      'process and sqld, loopback; CPU of the workerd process from /proc (utime + stime) over each phase',
    billed_cpu: 'not reported locally (workerd gives tail workers cpuTime 0): cpu_ms_per_run is its upper bound',
    sequential: await phase(target, pid, N1, 1),
    [`concurrency_${CONCURRENCY}`]: await phase(target, pid, N32, CONCURRENCY),
  };
  console.log(JSON.stringify(result, null, 2));
} finally {
  await worker?.dispose();
  await sqld.stop();
  rmSync(bundleDir, { recursive: true, force: true });
}
process.exit(0);

/** Migrates sqld and creates the tenant; answers its workspace key. */
async function tenant(): Promise<string> {
  const database = await openDatabase({ DATA_DIR: sqld.dir, LIBSQL_URL: sqld.url });
  try {
    await migrateDatabase(database.db);
    const created = await initialise(database.db, Date.now());
    if (!created) throw new Error('a fresh sqld database was already initialised');
    return created.workspace_api_key;
  } finally {
    database.close();
  }
}

/** `script` with wrangler.toml's bindings, its Durable Objects' storage in memory, on a free port. */
function startWorker(script: string): Miniflare {
  const { workerOptions } = unstable_getMiniflareWorkerOptions(TARGETS.gateway.config);
  return new Miniflare({
    host: '127.0.0.1',
    port: 0,
    // The Worker's logs (warnings and errors) on stderr: stdout is the JSON.
    handleRuntimeStdio: (stdout: Readable, stderr: Readable) => {
      stdout.pipe(process.stderr);
      stderr.pipe(process.stderr);
    },
    workers: [
      {
        ...workerOptions,
        modules: true,
        scriptPath: script,
        modulesRoot: dirname(script),
        bindings: {
          ...workerOptions.bindings,
          LIBSQL_URL: sqld.url,
          GATEWAY_ENCRYPTION_KEY: generateKeyBase64(),
          GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
          LOG_LEVEL: 'warn',
        },
      },
    ],
  });
}

interface Target {
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** The virtual key (the workspace's default) and the assistant, made through the Worker. */
async function prepare(url: string, headers: Record<string, string>): Promise<Target> {
  await post(`${url}/v1/virtual-keys`, headers, { slug: 'bench', provider: 'openai', base_url: `${fakeUrl}/v1`, api_key: 'sk-bench', default: true });
  const assistant = (await post(`${url}/v1/assistants`, headers, { model: 'bench-model' })) as { id: string };
  const body = JSON.stringify({ assistant_id: assistant.id, stream: true, thread: { messages: [{ role: 'user', content }] } });
  return { url: `${url}/v1/threads/runs`, headers, body };
}

/** ms to the first thread.message.delta of a whole streamed run (read to its end). */
async function firstToken(target: Target): Promise<number> {
  const started = performance.now();
  const response = await fetch(target.url, { method: 'POST', headers: target.headers, body: target.body });
  let first = NaN;
  let tail = '';
  await readStream(response, (text) => {
    if (Number.isNaN(first) && text.includes('event: thread.message.delta')) first = performance.now() - started;
    tail = (tail + text).slice(-64);
  });
  if (Number.isNaN(first) || !tail.includes('[DONE]')) throw new Error('the run did not stream its answer to the end');
  return first;
}

/**
 * `runs` runs, `concurrency` at a time: runs/s, first token, and the workerd process's CPU per run;
 * a run that fails is counted (its message kept) and left out of the latencies.
 */
async function phase(target: Target, pid: number, runs: number, concurrency: number) {
  const cpuBefore = cpuMs(pid);
  const started = performance.now();
  const failures = new Map<string, number>();
  const task = () =>
    firstToken(target).catch((error: unknown) => {
      const message = error instanceof Error ? error.message : String(error);
      failures.set(message, (failures.get(message) ?? 0) + 1);
      return NaN;
    });
  const firsts = concurrency === 1 ? await sequential(runs, task) : await pool(runs, concurrency, task);
  const seconds = (performance.now() - started) / 1000;
  return {
    runs,
    concurrency,
    runs_per_second: round(runs / seconds, 1),
    first_token: summarise(firsts.filter((ms) => !Number.isNaN(ms))),
    cpu_ms_per_run: round((cpuMs(pid) - cpuBefore) / runs, 3),
    failed_runs: Object.fromEntries(failures),
  };
}

/** Miniflare's workerd: this process's one child of that name (Linux /proc). */
function workerdProcess(): number {
  const found = readdirSync('/proc').filter((entry) => {
    if (!/^\d+$/.test(entry)) return false;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[1]);
      return parent === process.pid && stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(') ')) === 'workerd';
    } catch {
      return false; // exited meanwhile
    }
  });
  if (found.length !== 1) throw new Error(`expected one workerd child process, found ${found.length}`);
  return Number(found[0]);
}
