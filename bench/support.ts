import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FakeScenario } from '../test/support/fake-upstream';
import { ROOT, startGatewayProcess } from '../test/support/processes';

/** Shared by the benchmarks: timing and percentiles, printed as JSON; the fake provider. */

/** The fake provider's words arrive BENCH_WORD_GAP_MS apart (2), as a real model's tokens do; 0 sends them at once. */
export const WORD_GAP_MS = Number(process.env.BENCH_WORD_GAP_MS ?? 2);
/** An answer of 8 words, one chunk each, WORD_GAP_MS apart. */
export const SHORT_REPLY: FakeScenario = { reply: 'a b c d e f g h', chunk_delay_ms: WORD_GAP_MS };
/** The same with 64 words: the difference in CPU over the 56 more chunks is what one chunk costs (cpuPerChunk). */
export const LONG_REPLY: FakeScenario = {
  reply: Array.from({ length: 64 }, (_, i) => `w${i}`).join(' '),
  chunk_delay_ms: WORD_GAP_MS,
};

/** A server's CPU for one more streamed chunk, from its CPU per exchange answering SHORT_REPLY and LONG_REPLY. */
export function cpuPerChunk(shortCpuMs: number, longCpuMs: number): number {
  const words = (scenario: FakeScenario) => scenario.reply?.split(' ').length ?? NaN;
  return round((longCpuMs - shortCpuMs) / (words(LONG_REPLY) - words(SHORT_REPLY)), 4);
}

/** `value`, or an error naming `what`, which the benchmark cannot go on without. */
export function required<T>(value: T | null | undefined, what: string): T {
  if (value === null || value === undefined) throw new Error(`${what} is missing`);
  return value;
}

/** The element at `i` of a list gone through again and again. */
export const cycle = <T>(values: readonly T[], i: number): T =>
  required(values[i % values.length], 'an element of an empty list');

/** A started child process's id (none: it could not be started). */
export const pidOf = (child: ChildProcess): number => required(child.pid, `the process id of ${child.spawnfile}`);

const WORKSPACE_KEY = /workspace API key\s+(gk_[A-Za-z0-9_-]+)/;

/** The workspace API key a gateway started on an empty database prints, once it has. */
export async function printedWorkspaceKey(stdout: () => string): Promise<string> {
  await until(() => /workspace API key\s+gk_/.test(stdout()));
  return required(WORKSPACE_KEY.exec(stdout())?.[1], "the gateway's workspace API key");
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, index)] ?? NaN;
}

export const round = (value: number, digits = 3) => Number(value.toFixed(digits));

/** Runs `fn` `iterations` times after `warmup` runs; latency figures in milliseconds. */
export async function measure(fn: (i: number) => unknown, iterations: number, warmup = Math.min(200, iterations)) {
  for (let i = 0; i < warmup; i++) await fn(i);
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    await fn(i);
    samples.push(performance.now() - start);
  }
  return summarise(samples);
}

export function summarise(samples: number[]) {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50_ms: round(percentile(sorted, 50)),
    p99_ms: round(percentile(sorted, 99)),
    max_ms: round(sorted[sorted.length - 1] ?? NaN),
  };
}

/**
 * The fake provider (test/support/fake-upstream.ts) in a process of its own, so that its work is
 * not counted as the gateway's; answers its base URL and its pid (to read the CPU it spends).
 * Stopped when this process exits.
 */
export function startFakeProvider(): Promise<{ url: string; pid: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/fake-upstream.ts', '--port', '0'], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  process.once('exit', () => child.kill());
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk;
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) resolve({ url: line.trim(), pid: pidOf(child) });
    });
    child.once('exit', (code) => reject(new Error(`fake upstream exited with ${code}`)));
  });
}

/**
 * A fresh gateway process (dist/node.js, as `npm start` runs it) on a data directory of its own,
 * its workspace's default virtual key to the fake provider at `fakeUrl`: its API key's headers.
 */
export async function freshGateway(fakeUrl: string) {
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-gateway-'));
  const gateway = await startGatewayProcess({ LOG_LEVEL: 'warn', DATA_DIR: dataDir });
  const key = await printedWorkspaceKey(() => gateway.stdout());
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  await post(`${gateway.url}/v1/virtual-keys`, headers, {
    slug: 'bench',
    provider: 'openai',
    base_url: `${fakeUrl}/v1`,
    api_key: 'sk-bench',
    default: true,
  });
  return {
    url: gateway.url,
    pid: pidOf(gateway.child),
    headers,
    stop: async () => {
      await gateway.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** CPU time of a process, every thread, in ms (Linux /proc/<pid>/stat: utime + stime, in ticks of 10 ms). */
export function cpuMs(pid: number): number {
  return statCpuMs(`/proc/${pid}/stat`);
}

/**
 * CPU time of a process's main thread alone (its JavaScript's, on Node), in ms: the rest of
 * cpuMs(pid) is its other threads' (V8's garbage collection and compilers, the embedded
 * database's writer thread, libuv's pool).
 */
export function mainThreadCpuMs(pid: number): number {
  return statCpuMs(`/proc/${pid}/task/${pid}/stat`);
}

function statCpuMs(path: string): number {
  // After the command's name, which may hold spaces, in parentheses.
  const fields = (readFileSync(path, 'utf8').split(') ')[1] ?? '').split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** POSTs `body` as JSON; answers the JSON answer, fails on a non-2xx one. */
export async function post(url: string, headers: Record<string, string>, body: unknown): Promise<unknown> {
  const response = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${await response.text()}`);
  return response.json();
}

/** Reads a response's body as text as it arrives; fails on a non-2xx answer. */
export async function readStream(response: Response, onText: (text: string) => void): Promise<void> {
  if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  const decoder = new TextDecoder();
  for await (const chunk of response.body) onText(decoder.decode(chunk as Uint8Array, { stream: true }));
}

export async function sequential<T>(n: number, task: () => Promise<T>): Promise<T[]> {
  const results: T[] = [];
  for (let i = 0; i < n; i++) results.push(await task());
  return results;
}

/** Runs `n` tasks with at most `concurrency` in flight. */
export async function pool<T>(n: number, concurrency: number, task: () => Promise<T>): Promise<T[]> {
  const results: T[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        next++;
        results.push(await task());
      }
    }),
  );
  return results;
}

/** Runs `task` back to back on `concurrency` loops for `seconds`; answers how many ended. */
export async function forSeconds(seconds: number, concurrency: number, task: () => Promise<unknown>): Promise<number> {
  const deadline = performance.now() + seconds * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        await task();
        done++;
      }
    }),
  );
  return done;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `condition` holds, checking every 20 ms. */
export async function until(condition: () => boolean, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A server in a node process of its own, once its output says `ready`; its output is the error if it exits first. */
export async function startServer(
  what: string,
  args: string[],
  ready: string,
  env: Record<string, string> = {},
): Promise<ChildProcess> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk));
  await until(() => output.includes(ready) || child.exitCode !== null, 20_000);
  if (child.exitCode !== null) throw new Error(`${what} exited: ${output}`);
  return child;
}

export function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
