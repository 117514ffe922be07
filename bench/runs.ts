import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fakeDirective, type FakeScenario } from '../test/support/fake-upstream';
import { memoryOf, resetPeakMemory, startGatewayProcess, type GatewayProcess } from '../test/support/processes';
import {
  cpuMs,
  cpuPerChunk,
  LONG_REPLY,
  pidOf,
  pool,
  post,
  printedWorkspaceKey,
  readStream,
  round,
  sequential,
  SHORT_REPLY,
  startFakeProvider,
  sleep,
  summarise,
  WORD_GAP_MS,
} from './support';

/**
 * `npm run bench:runs`: what the gateway adds to a run, measured from outside over HTTP, with the
 * fake provider and the gateway in processes of their own (the client is this process).
 *
 * - first delta: the time to a streamed run's first `thread.message.delta`, against the time to the
 *   provider's own first content chunk when called directly; p50/p99 at concurrency 1 and 32;
 * - non-streamed create: latency of POST /v1/threads/runs answering the queued run, at
 *   concurrency 32, and the requests per second that makes;
 * - whole streamed runs (first byte to [DONE]) at concurrency 32, the provider's answer 8 words and
 *   64 words long, one chunk a word, BENCH_WORD_GAP_MS (2) apart as a model's tokens are: runs per
 *   second and the gateway's CPU per run (all its threads, from /proc) of each, and the CPU of one
 *   more chunk (the difference over the 56 more);
 * - the SDK's usual flow (a thread, a message, a streamed run on it, its messages listed), 8 at a
 *   time: flows per second, and the gateway's CPU per flow (all its threads, from /proc);
 * - memory: the gateway's RSS over rounds of streamed 1 MB answers against 1 KB ones (flat: it
 *   settles instead of growing with the runs served).
 *
 * BENCH_VIRTUAL_KEY chooses how runs find their virtual key: `header` (the default, the slug in
 * x-gateway-virtual-key), `models` (no header; the key's models match the run's model, beside 10
 * other keys of 3 patterns each, none of them tied) or `default` (no header; the workspace's default key).
 * BENCH_ONLY=latency skips the memory rounds, BENCH_ONLY=memory the rest.
 * BENCH_MEMORY_CONCURRENCY (4): how many answers the memory rounds stream at a time.
 */

const N1 = Number(process.env.BENCH_SEQUENTIAL ?? 300);
const N32 = Number(process.env.BENCH_CONCURRENT ?? 1600);
const CONCURRENCY = 32;
/** The SDK's usual flow runs this many at a time (sdkFlow). */
const FLOW_CONCURRENCY = 8;
/**
 * The memory rounds stream this many answers at a time (memory; BENCH_MEMORY_CONCURRENCY): two runs
 * at different counts tell what each answer in flight holds from what the rounds hold whatever the count.
 */
const MEMORY_CONCURRENCY = Number(process.env.BENCH_MEMORY_CONCURRENCY ?? 4);
/** Quiet long enough for the gateway's idle trim to end (runtime/node/memory-trim.ts: 2 s, then 6 s to the second collection), with a margin. */
const IDLE_TRIM_MS = 10_000;

const RESOLVE = process.env.BENCH_VIRTUAL_KEY ?? 'header';
if (!['header', 'models', 'default'].includes(RESOLVE))
  throw new Error(`BENCH_VIRTUAL_KEY: header, models or default, not ${RESOLVE}`);

const { url: fakeUrl } = await startFakeProvider();
const env = { LOG_LEVEL: 'warn' };

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-runs-'));
  const gateway = await startGatewayProcess({ ...env, DATA_DIR: dataDir });
  try {
    const target = await prepare(gateway);

    // Warm both paths (JIT, connection pools, SQLite caches) before measuring.
    await pool(200, 8, () => viaGatewayFirstDelta(target));
    await pool(200, 8, () => directFirstChunk());

    const direct1 = summarise(await sequential(N1, () => directFirstChunk()));
    const gateway1 = summarise(await sequential(N1, () => viaGatewayFirstDelta(target)));
    const direct32 = summarise(await pool(N32, CONCURRENCY, () => directFirstChunk()));
    const gateway32 = summarise(await pool(N32, CONCURRENCY, () => viaGatewayFirstDelta(target)));

    const createStarted = performance.now();
    const creates = summarise(await pool(N32 * 2, CONCURRENCY, () => createNonStreamed(target)));
    const createSeconds = (performance.now() - createStarted) / 1000;

    const short = await streamedRuns(gateway, target, SHORT_REPLY);
    const long = await streamedRuns(gateway, target, LONG_REPLY);

    await pool(100, FLOW_CONCURRENCY, () => sdkFlow(target));
    const flowCpu = cpuMs(pidOf(gateway.child));
    const flowStarted = performance.now();
    await pool(N32 / 2, FLOW_CONCURRENCY, () => sdkFlow(target));
    const flowSeconds = (performance.now() - flowStarted) / 1000;
    const flowCpuMs = (cpuMs(pidOf(gateway.child)) - flowCpu) / (N32 / 2);

    return {
      first_delta: {
        concurrency_1: {
          direct_provider: direct1,
          via_gateway: gateway1,
          added_p50_ms: diff(gateway1, direct1, 'p50_ms'),
          added_p99_ms: diff(gateway1, direct1, 'p99_ms'),
        },
        concurrency_32: {
          direct_provider: direct32,
          via_gateway: gateway32,
          added_p50_ms: diff(gateway32, direct32, 'p50_ms'),
          added_p99_ms: diff(gateway32, direct32, 'p99_ms'),
        },
      },
      non_streamed_create_concurrency_32: { ...creates, requests_per_second: round(creates.n / createSeconds, 0) },
      streamed_runs_concurrency_32: {
        word_gap_ms: WORD_GAP_MS,
        words_8: short,
        words_64: long,
        server_cpu_ms_per_chunk: cpuPerChunk(short.server_cpu_ms_per_run, long.server_cpu_ms_per_run),
      },
      sdk_flow_concurrency_8: {
        flows_per_second: round(N32 / 2 / flowSeconds, 0),
        server_cpu_ms_per_flow: round(flowCpuMs, 2),
      },
    };
  } finally {
    await gateway.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** N32 whole streamed runs of `scenario`'s answer, 32 at a time: runs per second and the gateway's CPU per run. */
async function streamedRuns(gateway: GatewayProcess, target: Target, scenario: FakeScenario) {
  const cpuBefore = cpuMs(pidOf(gateway.child));
  const started = performance.now();
  await pool(N32, CONCURRENCY, () => wholeStreamedRun(target, scenario));
  const seconds = (performance.now() - started) / 1000;
  return {
    runs_per_second: round(N32 / seconds, 0),
    server_cpu_ms_per_run: round((cpuMs(pidOf(gateway.child)) - cpuBefore) / N32, 3),
  };
}

/**
 * A fresh gateway process streaming answers of `bytes` each, MEMORY_CONCURRENCY at a time, in rounds of `count`
 * runs: its RSS after each round, its peak, and 12 s after the last round (the gateway gives back
 * what a burst grew once idle: runtime/node/memory-trim.ts). Flat memory means the RSS stops growing with
 * the runs served (nothing is kept per run once it ends); what a run holds meanwhile is garbage
 * that V8 collects at its own pace, so the level it settles at says more than any single sample.
 */
async function memory(bytes: number, count: number, rounds = 5) {
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-mem-'));
  const gateway = await startGatewayProcess({ ...env, DATA_DIR: dataDir });
  try {
    const target = await prepare(gateway);
    await pool(20, MEMORY_CONCURRENCY, () => wholeStreamedRun(target, { reply: 'warm up' }));
    // Idle until the gateway gave back what start-up and the warm-up grew (memory-trim.ts: 2 s of
    // quiet, then two collections 6 s apart): without it, a process measured before its first trim
    // started the rounds 15 to 35 MB higher than one measured after, more than a 1 MB answer's
    // whole difference, and which one a process was depended on timing alone.
    await sleep(IDLE_TRIM_MS);
    const before = memoryOf(pidOf(gateway.child)).rssMb;
    // The peak of the rounds alone: start-up's own (the migrations, the modules' loading) is no answer's.
    resetPeakMemory(pidOf(gateway.child));
    const scenario = { stream_bytes: bytes, chunk_bytes: 1024 };
    const rssAfterRound: number[] = [];
    let received = 0;
    for (let i = 0; i < rounds; i++) {
      received += (await pool(count, MEMORY_CONCURRENCY, () => wholeStreamedRun(target, scenario))).reduce(
        (a, b) => a + b,
        0,
      );
      rssAfterRound.push(round(memoryOf(pidOf(gateway.child)).rssMb, 1));
    }
    const peak = memoryOf(pidOf(gateway.child)).peakMb;
    await sleep(12_000);
    return {
      answer_bytes: bytes,
      received_bytes_per_run: Math.round(received / (count * rounds)),
      runs_per_round: count,
      rss_before_mb: round(before, 1),
      rss_after_each_round_mb: rssAfterRound,
      peak_rss_mb: round(peak, 1),
      peak_rss_growth_mb: round(peak - before, 1),
      rss_12s_after_mb: round(memoryOf(pidOf(gateway.child)).rssMb, 1),
    };
  } finally {
    await gateway.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

interface Target {
  url: string;
  headers: Record<string, string>;
  assistantId: string;
}

async function prepare(gateway: GatewayProcess): Promise<Target> {
  const key = await printedWorkspaceKey(() => gateway.stdout());
  const headers = { 'x-gateway-api-key': key, 'content-type': 'application/json' };
  const virtualKey = { slug: 'bench', provider: 'openai', base_url: `${fakeUrl}/v1`, api_key: 'sk-bench' };
  if (RESOLVE === 'models') {
    for (let i = 0; i < 10; i++) {
      const models = [`other-${i}`, `other-${i}-*`, `legacy-${i}.*`];
      await post(`${gateway.url}/v1/virtual-keys`, headers, { ...virtualKey, slug: `other-${i}`, models });
    }
  }
  const routing: Record<string, unknown> =
    RESOLVE === 'models' ? { models: ['bench-*'] } : RESOLVE === 'default' ? { default: true } : {};
  await post(`${gateway.url}/v1/virtual-keys`, headers, { ...virtualKey, ...routing });
  const assistant = (await post(`${gateway.url}/v1/assistants`, headers, { model: 'bench-model' })) as { id: string };
  const named: Record<string, string> = RESOLVE === 'header' ? { 'x-gateway-virtual-key': 'bench' } : {};
  return { url: gateway.url, headers: { ...headers, ...named }, assistantId: assistant.id };
}

const SHORT: FakeScenario = { reply: 'Hello there, this is a short answer.' };

/** ms to the first content chunk of a streamed Chat Completions call straight to the provider. */
async function directFirstChunk(): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${fakeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench' },
    body: JSON.stringify({
      model: 'bench-model',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: `hi\n${fakeDirective(SHORT)}` }],
    }),
  });
  let first = NaN;
  await readStream(response, (text) => {
    if (Number.isNaN(first) && /"content":"[^"]/.test(text)) first = performance.now() - started;
  });
  return first;
}

/** ms to the first thread.message.delta of a streamed run through the gateway. */
async function viaGatewayFirstDelta(target: Target): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${target.url}/v1/threads/runs`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({
      assistant_id: target.assistantId,
      stream: true,
      thread: { messages: [{ role: 'user', content: `hi\n${fakeDirective(SHORT)}` }] },
    }),
  });
  let first = NaN;
  await readStream(response, (text) => {
    if (Number.isNaN(first) && text.includes('event: thread.message.delta')) first = performance.now() - started;
  });
  if (Number.isNaN(first)) throw new Error('no delta arrived');
  return first;
}

async function createNonStreamed(target: Target): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${target.url}/v1/threads/runs`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({
      assistant_id: target.assistantId,
      thread: { messages: [{ role: 'user', content: `hi\n${fakeDirective(SHORT)}` }] },
    }),
  });
  const body = (await response.json()) as { status?: string };
  if (body.status !== 'queued') throw new Error(`unexpected answer ${JSON.stringify(body)}`);
  return performance.now() - started;
}

/**
 * The SDK's usual flow, four requests: a thread, a message on it, a streamed run on it, and the
 * thread's messages listed (what `threads.create`, `messages.create`, `runs.stream` and
 * `messages.list` send).
 */
async function sdkFlow(target: Target): Promise<void> {
  const thread = (await post(`${target.url}/v1/threads`, target.headers, {})) as { id: string };
  await post(`${target.url}/v1/threads/${thread.id}/messages`, target.headers, {
    role: 'user',
    content: `hi\n${fakeDirective(SHORT_REPLY)}`,
  });
  const run = await fetch(`${target.url}/v1/threads/${thread.id}/runs`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({ assistant_id: target.assistantId, stream: true }),
  });
  await readToDone(run);
  const listed = (await (
    await fetch(`${target.url}/v1/threads/${thread.id}/messages`, { headers: target.headers })
  ).json()) as { data?: unknown[] };
  if (listed.data?.length !== 2) throw new Error(`unexpected messages ${JSON.stringify(listed)}`);
}

/** A whole streamed run; answers the bytes received. */
async function wholeStreamedRun(target: Target, scenario: FakeScenario): Promise<number> {
  const response = await fetch(`${target.url}/v1/threads/runs`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({
      assistant_id: target.assistantId,
      stream: true,
      thread: { messages: [{ role: 'user', content: `go\n${fakeDirective(scenario)}` }] },
    }),
  });
  return readToDone(response);
}

/** A run's event stream read to its end, which must be `[DONE]`; answers the bytes received. */
async function readToDone(response: Response): Promise<number> {
  let bytes = 0;
  let tail = '';
  await readStream(response, (text) => {
    bytes += text.length;
    tail = (tail + text).slice(-64);
  });
  if (!tail.includes('[DONE]')) throw new Error('the stream did not finish');
  return bytes;
}

// ── Harness ──────────────────────────────────────────────────────────────────────────────────

const diff = (a: Record<string, number>, b: Record<string, number>, key: string) =>
  round((a[key] ?? NaN) - (b[key] ?? NaN));

const latency = process.env.BENCH_ONLY === 'memory' ? {} : { virtual_key: RESOLVE, ...(await main()) };
const withMemory = process.env.BENCH_ONLY !== 'latency';
const small = withMemory ? await memory(1024, 40) : undefined;
const large = withMemory ? await memory(1024 * 1024, 40) : undefined;
console.log(
  JSON.stringify(
    {
      benchmark: 'runs',
      setup:
        'client (this process) -> gateway process (embedded libSQL, WAL) -> fake provider process, over loopback HTTP',
      targets: {
        added_first_delta_p50_ms: 2,
        added_first_delta_p99_ms: 10,
        create_p99_ms: 20,
        memory: 'flat',
        peak_rss_growth_per_answer_in_flight_mb: '<= 1 MB (its size) + a constant',
      },
      ...latency,
      ...(small &&
        large && {
          memory: {
            answers_at_a_time: MEMORY_CONCURRENCY,
            answer_1kb: small,
            answer_1mb: large,
            peak_rss_growth_1mb_over_1kb_mb: round(large.peak_rss_growth_mb - small.peak_rss_growth_mb, 1),
            // What one 1 MB answer in flight holds over a 1 KB one: the goal is its size plus a
            // constant. Each process's peak over its own settled start, so that two processes'
            // different starts do not count as the answers'.
            peak_rss_growth_per_answer_in_flight_mb: round(
              (large.peak_rss_growth_mb - small.peak_rss_growth_mb) / MEMORY_CONCURRENCY,
              1,
            ),
            rss_growth_last_rounds_1mb_mb: round(
              (large.rss_after_each_round_mb.at(-1) ?? NaN) - (large.rss_after_each_round_mb[1] ?? NaN),
              1,
            ),
          },
        }),
    },
    null,
    2,
  ),
);
process.exit(0);
