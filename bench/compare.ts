import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fakeDirective } from '../test/support/fake-upstream';
import { freePort } from '../scripts/sqld';
import { memoryOf, resetPeakMemory, ROOT } from '../test/support/processes';
import { loadFor } from './load';
import {
  cpuMs,
  cpuPerChunk,
  freshGateway,
  LONG_REPLY,
  mainThreadCpuMs,
  pidOf,
  pool,
  post,
  readStream,
  required,
  round,
  sequential,
  SHORT_REPLY,
  sleep,
  startFakeProvider,
  startServer,
  stopChild,
  summarise,
} from './support';

/**
 * `npm run bench:compare`: this gateway against the reference, Portkey's OSS gateway 1.15.2
 * (`@portkey-ai/gateway` on npm, with the hono 4.9.7 and @hono/node-server 1.13.5 its lockfile
 * pins), on the same fake provider, side by side and interleaved over BENCH_ROUNDS rounds (3).
 * Our exchange is a whole streamed run (POST /v1/threads/runs: thread, message and run stored,
 * the run executed and streamed); the reference's a proxied streamed chat completion, which this
 * gateway also serves (`this_gateway_proxied`: POST /v1/chat/completions under a requests and a
 * tokens policy, its usage recorded). All answer the same 8-word reply from the fake provider,
 * which runs in a process of its own.
 *
 * Each target is first warmed by BENCH_WARMUP_SECONDS (20) of load, the JIT's work over a server's
 * first thousands of exchanges included. Then, for each: whole streamed exchanges per second at 32 connections (wrk when installed, else this
 * process as the client over raw kept-alive connections, load.ts: said in the output), the server's CPU per exchange (utime + stime from
 * /proc over the load) and the fake provider's (which shares the machine: it bounds what any gateway
 * can serve here), the first token added over calling the provider directly (p50/p99 at
 * concurrency 1 and 32), RSS idle after warm-up, peak under load, and BENCH_SETTLE_SECONDS (12)
 * after the load ended (what a server holds between bursts). Medians over the rounds.
 *
 * Beside them, the stack's floor (bench/floor-proxy.js): the same completion passed through on
 * this gateway's own stack (hono, @hono/node-server, undici) and nothing else, measured the same
 * way; and for the targets that pass a chat completion through, the CPU of one more streamed chunk
 * (`server_cpu_ms_per_chunk`: 64 words against 8). It is what any gateway on this stack pays; the gateway's figures less the floor's are what
 * storing and executing a run cost (`this_gateway_over_floor`). And the stored floor
 * (bench/floor-run.js, `stored_floor`): the same whole run as ours, its rows stored in as many
 * commits on the same storage and its events the same, with nothing else (no keys, settings,
 * validation, policies or bounds): what storing and streaming a run costs on this stack at the
 * least (`this_gateway_over_stored_floor`), and against the reference, how near to it a run can
 * be made here (`ratios_stored_floor_over_reference`).
 *
 * And a streamed response (`this_gateway_response`: POST /v1/responses, stored, on the same setup as
 * the proxied completion): `response_over_proxied` is what storing the exchange as a response adds.
 * `npm run bench:responses` measures the provider, the proxied completion and the response alone.
 *
 * The reference is not a dependency: it is installed on first use into a directory under the
 * system's temporary directory, and when the registry cannot be reached this says so and
 * measures this gateway alone.
 */

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const LOAD_SECONDS = Number(process.env.BENCH_LOAD_SECONDS ?? 8);
const CONNECTIONS = 32;
const SETTLE_SECONDS = Number(process.env.BENCH_SETTLE_SECONDS ?? 12);
/** Seconds of load at CONNECTIONS before anything is measured (see measure()). */
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 20);
const N1 = Number(process.env.BENCH_SEQUENTIAL ?? 200);
const N32 = Number(process.env.BENCH_CONCURRENT ?? 800);
/**
 * Newer @hono/node-server breaks the reference's streaming (its responses' headers are immutable
 * there), and the gateway's own dependencies pull one in nested: overrides hold every copy to
 * what its lockfile pins.
 */
const REFERENCE = {
  package: '@portkey-ai/gateway@1.15.2',
  pins: ['hono@4.9.7', '@hono/node-server@1.13.5'],
  overrides: { hono: '4.9.7', '@hono/node-server': '1.13.5' },
};

interface Target {
  name: string;
  pid: number;
  url: string;
  headers: Record<string, string>;
  body: string;
  /** The body asking for LONG_REPLY, for targets that pass a chat completion through. */
  longBody?: string;
  /** Text that marks the first token in the target's stream. */
  firstToken: RegExp;
  stop(): Promise<unknown>;
}

const { url: fakeUrl, pid: fakePid } = await startFakeProvider();
const content = `go\n${fakeDirective(SHORT_REPLY)}`;
const longContent = `go\n${fakeDirective(LONG_REPLY)}`;

// ── The targets ───────────────────────────────────────────────────────────────────────────────

async function ours(): Promise<Target> {
  const gateway = await freshGateway(fakeUrl);
  const assistant = (await post(`${gateway.url}/v1/assistants`, gateway.headers, { model: 'bench-model' })) as {
    id: string;
  };
  return {
    ...gateway,
    name: 'this_gateway',
    url: `${gateway.url}/v1/threads/runs`,
    body: JSON.stringify({
      assistant_id: assistant.id,
      stream: true,
      thread: { messages: [{ role: 'user', content }] },
    }),
    firstToken: /event: thread\.message\.delta/,
  };
}

/**
 * The same exchange as the reference's: this gateway passing the streamed chat completion through
 * (POST /v1/chat/completions), a requests policy and a tokens policy enforced on it (limits it never
 * reaches) and its usage recorded, on a fresh gateway of its own.
 */
async function oursProxied(): Promise<Target> {
  const gateway = await freshGateway(fakeUrl);
  for (const type of ['requests', 'tokens']) {
    await post(`${gateway.url}/v1/policies/rate-limits`, gateway.headers, {
      conditions: [{ key: 'model', value: '*' }],
      group_by: [{ key: 'workspace_id' }],
      type,
      unit: 'rpm',
      value: 1_000_000_000,
    });
  }
  return {
    ...direct(),
    ...gateway,
    name: 'this_gateway_proxied',
    url: `${gateway.url}/v1/chat/completions`,
  };
}

/**
 * A streamed response (POST /v1/responses) on the same gateway setup as the proxied completion,
 * the same policies on it: the response stored (its thread, input, run and output) and its events
 * the Responses API's. Against the proxied completion, what storing the exchange costs.
 */
async function oursResponse(): Promise<Target> {
  const proxied = await oursProxied();
  const url = proxied.url.replace(/\/chat\/completions$/, '/responses');
  const body = (input: string) => JSON.stringify({ model: 'bench-model', stream: true, input });
  return {
    ...proxied,
    name: 'this_gateway_response',
    url,
    body: body(content),
    longBody: body(longContent),
    firstToken: /event: response\.output_text\.delta/,
  };
}

/** The reference's start script, installed on demand; null (with the reason) when it cannot be. */
function installReference(): { script: string } | { unavailable: string } {
  const dir = join(tmpdir(), 'assistants-gateway-bench-reference-1.15.2-pinned');
  const script = join(dir, 'node_modules/@portkey-ai/gateway/build/start-server.js');
  if (existsSync(script)) return { script };
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({ name: 'bench-reference', private: true, overrides: REFERENCE.overrides }),
  );
  process.stderr.write(`Installing the reference (${REFERENCE.package}) into ${dir}…\n`);
  const installed = spawnSync(
    'npm',
    ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--prefix', dir, REFERENCE.package, ...REFERENCE.pins],
    { encoding: 'utf8', timeout: 300_000 },
  );
  if (installed.status !== 0 || !existsSync(script)) {
    const reason = (installed.stderr || installed.error?.message || 'npm install failed')
      .trim()
      .split('\n')
      .slice(-3)
      .join(' ');
    return { unavailable: `the reference could not be installed from the registry: ${reason}` };
  }
  return { script };
}

async function reference(script: string): Promise<Target> {
  const port = await freePort();
  const child = await startServer('the reference', [script, `--port=${port}`, '--headless'], 'Ready for connections', {
    NODE_ENV: 'production',
  });
  return {
    name: 'reference',
    pid: pidOf(child),
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-bench',
      'x-portkey-provider': 'openai',
      'x-portkey-custom-host': `${fakeUrl}/v1`,
    },
    body: chatBody(content),
    longBody: chatBody(longContent),
    firstToken: /"content":"[^"]/,
    stop: () => stopChild(child),
  };
}

/** One of the floors (bench/floor-*.js), a plain server on the provider: its process, its address and how it stops. */
async function floorServer(script: string) {
  const port = await freePort();
  const child = await startServer(
    script,
    ['--v8-pool-size=1', join(ROOT, 'bench', script), String(port), new URL(fakeUrl).origin],
    'ready',
  );
  return { pid: pidOf(child), origin: `http://127.0.0.1:${port}`, stop: () => stopChild(child) };
}

/** The stack's floor: the completion passed through on this gateway's own stack, nothing stored. */
async function floor(): Promise<Target> {
  const { origin, ...server } = await floorServer('floor-proxy.js');
  return { ...direct(), ...server, name: 'stack_floor', url: `${origin}/v1/chat/completions` };
}

/** The stack's floor for a stored run: a whole streamed run stored on this gateway's own stack and storage, nothing else. */
async function storedFloor(): Promise<Target> {
  const { origin, ...server } = await floorServer('floor-run.js');
  return {
    ...server,
    name: 'stored_floor',
    url: `${origin}/v1/threads/runs`,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      assistant_id: 'asst_bench',
      stream: true,
      thread: { messages: [{ role: 'user', content }] },
    }),
    firstToken: /event: thread\.message\.delta/,
  };
}

/** The provider itself, for the baseline. */
function direct(): Omit<Target, 'pid' | 'stop'> {
  return {
    name: 'direct_provider',
    url: `${fakeUrl}/v1/chat/completions`,
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench' },
    body: chatBody(content),
    longBody: chatBody(longContent),
    firstToken: /"content":"[^"]/,
  };
}

function chatBody(text: string): string {
  return JSON.stringify({
    model: 'bench-model',
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: text }],
  });
}

// ── Measurements ──────────────────────────────────────────────────────────────────────────────

/** ms to the first token of one exchange. */
async function firstToken(target: Omit<Target, 'pid' | 'stop'>): Promise<number> {
  const started = performance.now();
  const response = await fetch(target.url, { method: 'POST', headers: target.headers, body: target.body });
  let first = NaN;
  await readStream(response, (text) => {
    if (Number.isNaN(first) && target.firstToken.test(text)) first = performance.now() - started;
  });
  if (Number.isNaN(first)) throw new Error(`${target.name}: no token arrived`);
  return first;
}

const HAS_WRK = spawnSync('wrk', ['--version']).error === undefined;

/**
 * Whole exchanges per second at CONNECTIONS, the server's CPU ms per exchange, and the fake
 * provider's: on a machine the client, the server and the provider share, what the provider
 * spends bounds what the server can serve.
 */
async function load(target: Omit<Target, 'stop'> | Omit<Target, 'pid' | 'stop'>, duration = LOAD_SECONDS) {
  const pid = 'pid' in target ? target.pid : undefined;
  const cpuBefore = pid ? cpuMs(pid) : 0;
  const mainCpuBefore = pid ? mainThreadCpuMs(pid) : 0;
  const providerCpuBefore = cpuMs(fakePid);
  const clientCpuBefore = process.cpuUsage();
  if (pid) resetPeakMemory(pid);
  let exchanges: number;
  let seconds: number;
  let errors = 0;
  if (HAS_WRK) {
    const dir = mkdtempSync(join(tmpdir(), 'bench-wrk-'));
    const script = join(dir, 'post.lua');
    const headers = Object.entries(target.headers).map(
      ([name, value]) => `wrk.headers[${JSON.stringify(name)}] = ${JSON.stringify(value)}`,
    );
    writeFileSync(script, ['wrk.method = "POST"', `wrk.body = ${JSON.stringify(target.body)}`, ...headers].join('\n'));
    const out = await runWrk(['-t2', `-c${CONNECTIONS}`, `-d${duration}s`, '-s', script, target.url]);
    rmSync(dir, { recursive: true, force: true });
    exchanges = Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN);
    seconds = Number(/requests in ([\d.]+)s/.exec(out)?.[1] ?? NaN);
    errors =
      Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0) +
      Number(/Socket errors:.*?timeout (\d+)/.exec(out)?.[1] ?? 0);
  } else {
    ({ exchanges, errors, seconds } = await loadFor(target.url, target.headers, target.body, duration, CONNECTIONS));
  }
  const clientCpu = process.cpuUsage(clientCpuBefore);
  return {
    exchanges_per_second: round(exchanges / seconds, 0),
    errors,
    provider_cpu_ms_per_exchange: round((cpuMs(fakePid) - providerCpuBefore) / exchanges, 3),
    // This process's, as the client (unless wrk is): on the same cores, it bounds what any target can serve.
    client_cpu_ms_per_exchange: HAS_WRK ? NaN : round((clientCpu.user + clientCpu.system) / 1000 / exchanges, 3),
    ...(pid && {
      server_cpu_ms_per_exchange: round((cpuMs(pid) - cpuBefore) / exchanges, 3),
      server_main_thread_cpu_ms_per_exchange: round((mainThreadCpuMs(pid) - mainCpuBefore) / exchanges, 3),
      peak_rss_mb: round(memoryOf(pid).peakMb, 1),
    }),
  };
}

function runWrk(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk));
    child.on('error', reject);
    child.on('exit', () => resolve(out));
  });
}

async function measure(target: Target) {
  // Warm up: pools, caches, and the JIT, whose optimising compiler works on for thousands of
  // exchanges (about 0.7 ms of CPU an exchange over the first thousand, here): what is measured is
  // the server as it runs for hours, not its first seconds. Each target is warmed the same way.
  await pool(300, 8, () => firstToken(target));
  const idle = memoryOf(target.pid).rssMb;
  await load(target, WARMUP_SECONDS);
  const c1 = summarise(await sequential(N1, () => firstToken(target)));
  const c32 = summarise(await pool(N32, CONNECTIONS, () => firstToken(target)));
  const loaded = await load(target);
  const chunk = target.longBody === undefined ? {} : perChunk(loaded, await load({ ...target, body: target.longBody }));
  await sleep(SETTLE_SECONDS * 1000);
  const settled = memoryOf(target.pid).rssMb;
  return {
    idle_rss_mb: round(idle, 1),
    first_token_c1: c1,
    first_token_c32: c32,
    ...loaded,
    ...chunk,
    rss_after_load_settled_mb: round(settled, 1),
  };
}

/** The server's CPU for one more chunk: 64 words' exchange against 8 words', over the 56 more. */
function perChunk(short: Awaited<ReturnType<typeof load>>, long: Awaited<ReturnType<typeof load>>) {
  if (short.server_cpu_ms_per_exchange === undefined || long.server_cpu_ms_per_exchange === undefined) return {};
  return { server_cpu_ms_per_chunk: cpuPerChunk(short.server_cpu_ms_per_exchange, long.server_cpu_ms_per_exchange) };
}

async function measureDirect() {
  const target = direct();
  await pool(300, 8, () => firstToken(target));
  const c1 = summarise(await sequential(N1, () => firstToken(target)));
  const c32 = summarise(await pool(N32, CONNECTIONS, () => firstToken(target)));
  return { first_token_c1: c1, first_token_c32: c32, ...(await load(target)) };
}

// ── Rounds ────────────────────────────────────────────────────────────────────────────────────

type Figures = Record<string, number>;

function flatten(result: Awaited<ReturnType<typeof measure>> | Awaited<ReturnType<typeof measureDirect>>): Figures {
  const figures: Figures = {
    exchanges_per_second: result.exchanges_per_second,
    load_errors: result.errors,
    provider_cpu_ms_per_exchange: result.provider_cpu_ms_per_exchange,
    client_cpu_ms_per_exchange: result.client_cpu_ms_per_exchange,
    first_token_c1_p50_ms: result.first_token_c1.p50_ms,
    first_token_c1_p99_ms: result.first_token_c1.p99_ms,
    first_token_c32_p50_ms: result.first_token_c32.p50_ms,
    first_token_c32_p99_ms: result.first_token_c32.p99_ms,
  };
  if ('server_cpu_ms_per_exchange' in result && result.server_cpu_ms_per_exchange !== undefined) {
    figures.server_cpu_ms_per_exchange = result.server_cpu_ms_per_exchange;
    figures.server_main_thread_cpu_ms_per_exchange = result.server_main_thread_cpu_ms_per_exchange ?? NaN;
    figures.peak_rss_mb = result.peak_rss_mb ?? NaN;
  }
  if ('server_cpu_ms_per_chunk' in result && result.server_cpu_ms_per_chunk !== undefined) {
    figures.server_cpu_ms_per_chunk = result.server_cpu_ms_per_chunk;
  }
  if ('idle_rss_mb' in result) {
    figures.idle_rss_mb = result.idle_rss_mb;
    figures.rss_after_load_settled_mb = result.rss_after_load_settled_mb;
  }
  return figures;
}

/** A figure of a target; one it does not have (not every target has every figure) prints as null. */
const figure = (figures: Figures, key: string): number => figures[key] ?? NaN;
const less = (a: Figures, b: Figures, key: string, digits: number) => round(figure(a, key) - figure(b, key), digits);
const ratio = (a: Figures, b: Figures, key: string) => round(figure(a, key) / figure(b, key), 2);

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

function medians(rounds: Figures[]): Figures {
  const out: Figures = {};
  for (const key of Object.keys(rounds[0] ?? {}))
    out[key] = round(median(rounds.map((figures) => figure(figures, key))), 3);
  return out;
}

/**
 * The targets, measured in this order each round; BENCH_TARGETS (names, comma-separated) keeps
 * some: `npm run bench:responses` keeps the provider, the proxied completion and the response.
 */
const installed = installReference();
const TARGETS: { name: string; start: () => Promise<Target> }[] = [
  { name: 'stack_floor', start: floor },
  { name: 'stored_floor', start: storedFloor },
  { name: 'this_gateway', start: ours },
  { name: 'this_gateway_proxied', start: oursProxied },
  { name: 'this_gateway_response', start: oursResponse },
  ...('script' in installed ? [{ name: 'reference', start: () => reference(installed.script) }] : []),
];
const chosen = process.env.BENCH_TARGETS?.split(',');
const measured = TARGETS.filter((target) => chosen === undefined || chosen.includes(target.name));
const rounds: Record<string, Figures[]> = { direct_provider: [] };
for (let i = 0; i < ROUNDS; i++) {
  rounds.direct_provider?.push(flatten(await measureDirect()));
  for (const { name, start } of measured) {
    const target = await start();
    try {
      (rounds[name] ??= []).push(flatten(await measure(target)));
    } finally {
      await target.stop();
    }
  }
}

const result: Record<string, Figures> = {};
for (const [name, figures] of Object.entries(rounds)) if (figures.length > 0) result[name] = medians(figures);
const added = (name: string) => {
  const figures = result[name];
  const base = required(result.direct_provider, "the direct provider's figures");
  if (!figures) return undefined;
  return {
    first_token_added_c1_p50_ms: less(figures, base, 'first_token_c1_p50_ms', 2),
    first_token_added_c1_p99_ms: less(figures, base, 'first_token_c1_p99_ms', 2),
    first_token_added_c32_p50_ms: less(figures, base, 'first_token_c32_p50_ms', 2),
    first_token_added_c32_p99_ms: less(figures, base, 'first_token_c32_p99_ms', 2),
  };
};
const provider = required(result.direct_provider, "the direct provider's figures");
const mine = result.this_gateway;
const theirs = result.reference;
const base = result.stack_floor;
console.log(
  JSON.stringify(
    {
      benchmark: 'compare',
      setup:
        `client (${HAS_WRK ? 'wrk -t2' : 'this process over raw kept-alive connections (load.ts); wrk not installed'}) -> gateway process -> fake provider process, loopback, ` +
        `${ROUNDS} interleaved rounds, medians; load ${LOAD_SECONDS} s at ${CONNECTIONS} connections after ${WARMUP_SECONDS} s of it to warm up`,
      reference_gateway:
        'script' in installed ? `${REFERENCE.package} with ${REFERENCE.pins.join(', ')}` : installed.unavailable,
      goals: {
        response_over_proxied: '<= +0.3 ms of CPU per exchange, <= +0.5 ms first token (c1 p50)',
        proxied_over_reference:
          '>= 2x the exchanges per second, <= 0.5x the CPU per exchange, <= 1x the CPU per chunk, <= 0.3x the first token added at 32 (p99); added at 1 <= 0.5 / 2 ms (p50 / p99)',
        exchanges_per_second: '>= 2x the reference',
        server_cpu_ms_per_exchange: '<= 0.8',
        first_token_added_c1: '<= 1 / 3 ms (p50 / p99)',
        first_token_added_c32: '<= 10 / 40 ms',
        idle_rss_mb: '<= 60',
        peak_rss_mb: '<= 120',
      },
      ...result,
      added: {
        this_gateway: added('this_gateway'),
        this_gateway_proxied: added('this_gateway_proxied'),
        this_gateway_response: added('this_gateway_response'),
        reference: added('reference'),
        stack_floor: added('stack_floor'),
        stored_floor: added('stored_floor'),
      },
      ...(mine &&
        base && {
          this_gateway_over_floor: {
            server_cpu_ms_per_exchange: less(mine, base, 'server_cpu_ms_per_exchange', 3),
            first_token_c1_p50_ms: less(mine, base, 'first_token_c1_p50_ms', 2),
            first_token_c32_p50_ms: less(mine, base, 'first_token_c32_p50_ms', 2),
            idle_rss_mb: less(mine, base, 'idle_rss_mb', 1),
            peak_rss_mb: less(mine, base, 'peak_rss_mb', 1),
          },
        }),
      ...(mine &&
        result.stored_floor && {
          this_gateway_over_stored_floor: {
            server_cpu_ms_per_exchange: less(mine, result.stored_floor, 'server_cpu_ms_per_exchange', 3),
            first_token_c1_p50_ms: less(mine, result.stored_floor, 'first_token_c1_p50_ms', 2),
            idle_rss_mb: less(mine, result.stored_floor, 'idle_rss_mb', 1),
            peak_rss_mb: less(mine, result.stored_floor, 'peak_rss_mb', 1),
          },
        }),
      ...(result.stored_floor &&
        theirs && {
          ratios_stored_floor_over_reference: {
            exchanges_per_second: ratio(result.stored_floor, theirs, 'exchanges_per_second'),
            server_cpu_ms_per_exchange: ratio(result.stored_floor, theirs, 'server_cpu_ms_per_exchange'),
          },
        }),
      ...(mine &&
        theirs && {
          ratios_this_over_reference: {
            exchanges_per_second: ratio(mine, theirs, 'exchanges_per_second'),
            server_cpu_ms_per_exchange: ratio(mine, theirs, 'server_cpu_ms_per_exchange'),
            idle_rss_mb: ratio(mine, theirs, 'idle_rss_mb'),
            peak_rss_mb: ratio(mine, theirs, 'peak_rss_mb'),
            rss_after_load_settled_mb: ratio(mine, theirs, 'rss_after_load_settled_mb'),
          },
        }),
      ...(result.this_gateway_response &&
        result.this_gateway_proxied && {
          response_over_proxied: {
            server_cpu_ms_per_exchange: less(
              result.this_gateway_response,
              result.this_gateway_proxied,
              'server_cpu_ms_per_exchange',
              3,
            ),
            server_cpu_ms_per_chunk: less(
              result.this_gateway_response,
              result.this_gateway_proxied,
              'server_cpu_ms_per_chunk',
              4,
            ),
            first_token_c1_p50_ms: less(
              result.this_gateway_response,
              result.this_gateway_proxied,
              'first_token_c1_p50_ms',
              2,
            ),
          },
        }),
      ...(theirs &&
        result.this_gateway_proxied && {
          ratios_proxied_over_reference: {
            exchanges_per_second: ratio(result.this_gateway_proxied, theirs, 'exchanges_per_second'),
            server_cpu_ms_per_exchange: ratio(result.this_gateway_proxied, theirs, 'server_cpu_ms_per_exchange'),
            server_cpu_ms_per_chunk: ratio(result.this_gateway_proxied, theirs, 'server_cpu_ms_per_chunk'),
            first_token_added_c32_p99_ms: round(
              less(result.this_gateway_proxied, provider, 'first_token_c32_p99_ms', 2) /
                less(theirs, provider, 'first_token_c32_p99_ms', 2),
              2,
            ),
          },
        }),
    },
    null,
    2,
  ),
);
process.exit(0);
