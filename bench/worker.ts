import { fakeDirective } from '../test/support/fake-upstream';
import { startLocalWorker, type LocalWorker } from '../test/support/workerd';
import { cpuMs, pool, post, readStream, round, sequential, startFakeProvider, summarise } from './support';

/**
 * `npm run bench:worker`: the gateway Worker's CPU per run on the Workers runtime. The Worker is
 * the bundle `wrangler deploy` uploads (`npm run build:worker`'s), with wrangler.toml's bindings,
 * in a workerd of its own started by Miniflare (test/support/workerd.ts), on a local sqld, with the
 * fake provider in a process of its own; this process is the client. The run
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
 * Not `wrangler dev`: measured that way, its proxy alone took about as much CPU per run as the
 * Worker's workerd.
 */

const N1 = Number(process.env.BENCH_SEQUENTIAL ?? 200);
const N32 = Number(process.env.BENCH_CONCURRENT ?? 800);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const content = `go\n${fakeDirective({ reply: 'a b c d e f g h' })}`;

const { url: fakeUrl } = await startFakeProvider();
let worker: LocalWorker | undefined;
try {
  // sqld sheds load with 429s when its requests slow down, as they do with this machine's cores
  // busy at 32 runs at a time: not what is measured here.
  worker = await startLocalWorker({ sqldArgs: ['--disable-intelligent-throttling'] });
  const pid = worker.pid();
  const target = await prepare(worker.url, {
    authorization: `Bearer ${worker.workspaceKey}`,
    'content-type': 'application/json',
  });
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
  await worker?.stop();
}
process.exit(0);

interface Target {
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** The virtual key (the workspace's default) and the assistant, made through the Worker. */
async function prepare(url: string, headers: Record<string, string>): Promise<Target> {
  await post(`${url}/v1/virtual-keys`, headers, {
    slug: 'bench',
    provider: 'openai',
    base_url: `${fakeUrl}/v1`,
    api_key: 'sk-bench',
    default: true,
  });
  const assistant = (await post(`${url}/v1/assistants`, headers, { model: 'bench-model' })) as { id: string };
  const body = JSON.stringify({
    assistant_id: assistant.id,
    stream: true,
    thread: { messages: [{ role: 'user', content }] },
  });
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
