import { defined } from '../support/defined';
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type Client } from '@libsql/client';
import { expect } from 'vitest';
import { readEvents } from '../support/events';
import { fakeDirective, type FakeScenario } from '../support/fake-upstream';
import {
  memoryOf,
  percentile,
  resetPeakMemory,
  runCli,
  startFakeUpstreamProcess,
  startGatewayProcess,
  startHealthPoller,
  type FakeUpstreamProcess,
  type GatewayProcess,
} from '../support/processes';
import { recordTally, type Tally } from '../support/tally';
import { sleep, waitFor } from '../support/wait';

export { sleep, waitFor } from '../support/wait';

/**
 * What the reliability suites share: a gateway process seen from outside (keys read from its first
 * start, a virtual key and an assistant created over HTTP), its database read directly (never
 * through the gateway, whose reads settle left-behind runs on the way), and the integrity checks
 * run against that database.
 */

export interface Target {
  url: string;
  workspaceKey: string;
  /** x-gateway-api-key and x-gateway-virtual-key, content-type. */
  headers: Record<string, string>;
  assistantId: string;
}

/** A fresh gateway's workspace key (printed once), a virtual key on `upstreamBaseURL`, an assistant. */
export async function prepare(gateway: GatewayProcess, upstreamBaseURL: string): Promise<Target> {
  const deadline = Date.now() + 10_000;
  while (!/workspace API key\s+gk_/.test(gateway.stdout()) && Date.now() < deadline) await sleep(20);
  const workspaceKey = /workspace API key\s+(gk_[A-Za-z0-9_-]+)/.exec(gateway.stdout())?.[1];
  if (!workspaceKey) throw new Error(`no workspace key printed:\n${gateway.stdout()}`);
  return prepareWorkspace(gateway.url, workspaceKey, upstreamBaseURL);
}

/**
 * In the workspace of `workspaceKey`, on the gateway at `url` (a process, or the Worker), a
 * virtual key on `upstreamBaseURL` (`reliability`) and an assistant, made over HTTP.
 */
export async function prepareWorkspace(url: string, workspaceKey: string, upstreamBaseURL: string): Promise<Target> {
  const headers = { 'x-gateway-api-key': workspaceKey, 'content-type': 'application/json' };
  const post = async (path: string, body: unknown) => {
    const response = await fetch(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    if (!response.ok) throw new Error(`POST ${path}: ${response.status} ${await response.text()}`);
    return (await response.json()) as { id: string };
  };
  await post('/v1/virtual-keys', {
    slug: 'reliability',
    provider: 'openai',
    base_url: upstreamBaseURL,
    api_key: 'sk-reliability',
  });
  const assistant = await post('/v1/assistants', { model: 'fake-model' });
  return {
    url,
    workspaceKey,
    headers: { ...headers, 'x-gateway-virtual-key': 'reliability' },
    assistantId: assistant.id,
  };
}

export function createRunRequest(target: Target, scenario: FakeScenario, stream: boolean): Promise<Response> {
  return fetch(`${target.url}/v1/threads/runs`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({
      assistant_id: target.assistantId,
      stream,
      thread: { messages: [{ role: 'user', content: `Go\n${fakeDirective(scenario)}` }] },
    }),
  });
}

/** A POST of JSON whose answer must be a success (a 5xx is counted in `tally`): its JSON. */
export async function postJson<T = { id: string }>(
  target: Pick<Target, 'url' | 'headers'>,
  path: string,
  body: unknown,
  tally: { answered5xx: number },
): Promise<T> {
  const response = await fetch(`${target.url}${path}`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify(body),
  });
  if (response.status >= 500) tally.answered5xx++;
  if (!response.ok) throw new Error(`POST ${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

export interface EndedRun {
  id: string;
  thread_id: string;
  status: string;
  last_error: { code: string; message: string } | null;
  incomplete_details: { reason: string } | null;
  required_action: unknown;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
}

/** A run created (POST /v1/threads/runs, not streamed, `body`), followed through the API to its end (60 s at most). */
export async function runToEnd(
  target: Pick<Target, 'url' | 'headers'>,
  body: unknown,
  tally: { answered5xx: number; runsCreated: number },
): Promise<EndedRun> {
  const created = await postJson<{ id: string; thread_id: string }>(target, '/v1/threads/runs', body, tally);
  tally.runsCreated++;
  return waitFor(
    async () => {
      const response = await fetch(`${target.url}/v1/threads/${created.thread_id}/runs/${created.id}`, {
        headers: target.headers,
      });
      if (response.status >= 500) tally.answered5xx++;
      return (await response.json()) as EndedRun;
    },
    (current) => !['queued', 'in_progress', 'cancelling'].includes(current.status),
    60_000,
  );
}

/** The run ended as `expected` says; a run that did not is counted lost in `tally`. */
export function expectRunEnded(
  run: EndedRun,
  expected: Partial<EndedRun> | Record<string, unknown>,
  tally: { runsLost: number },
): void {
  try {
    expect(run).toMatchObject(expected);
  } catch (error) {
    tally.runsLost++;
    throw error;
  }
}

/** The gateway's database, read beside it (WAL mode allows readers while it writes). */
export function openDataDir(dataDir: string): Client {
  return createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
}

const ACTIVE = "('queued', 'in_progress', 'cancelling')";

export async function activeRunCount(db: Client): Promise<number> {
  return Number(defined((await db.execute(`SELECT count(*) FROM runs WHERE status IN ${ACTIVE}`)).rows[0])[0]);
}

/** Every run's status and last_error, by id. */
export async function runStates(
  db: Client,
): Promise<Map<string, { status: string; lastError: { code: string; message: string } | null }>> {
  const rows = (await db.execute('SELECT id, status, last_error FROM runs')).rows;
  return new Map(
    rows.map((row) => [
      String(row[0]),
      { status: String(row[1]), lastError: row[2] ? JSON.parse(String(row[2])) : null },
    ]),
  );
}

/**
 * Rows that only part of a write left, once no run is active: a run without its thread or its
 * user message, a step or message still in progress under an ended run, a completed run without its
 * completed answer, a message without its thread. Answers a description of each.
 */
export async function halfWrittenRows(db: Client): Promise<string[]> {
  const checks: [string, string][] = [
    ['run without its thread', 'SELECT r.id FROM runs r LEFT JOIN threads t ON t.id = r.thread_id WHERE t.id IS NULL'],
    [
      'message without its thread',
      'SELECT m.id FROM messages m LEFT JOIN threads t ON t.id = m.thread_id WHERE t.id IS NULL',
    ],
    [
      'thread without a message',
      'SELECT t.id FROM threads t WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = t.id)',
    ],
    ['step of a missing run', 'SELECT s.id FROM run_steps s LEFT JOIN runs r ON r.id = s.run_id WHERE r.id IS NULL'],
    [
      'step in progress under an ended run',
      `SELECT s.id FROM run_steps s JOIN runs r ON r.id = s.run_id WHERE s.status = 'in_progress' AND r.status NOT IN ${ACTIVE}`,
    ],
    [
      'message in progress under an ended run',
      `SELECT m.id FROM messages m JOIN runs r ON r.id = m.run_id WHERE m.status = 'in_progress' AND r.status NOT IN ${ACTIVE}`,
    ],
    [
      'completed run without its completed answer',
      `SELECT r.id FROM runs r WHERE r.status = 'completed'
         AND NOT EXISTS (SELECT 1 FROM messages m
           WHERE m.thread_id = r.thread_id AND m.run_id = r.id AND m.role = 'assistant' AND m.status = 'completed')`,
    ],
  ];
  const found: string[] = [];
  for (const [what, query] of checks) {
    for (const row of (await db.execute(query)).rows) found.push(`${what}: ${String(row[0])}`);
  }
  return found;
}

/**
 * Measured figures beside the tally (latency, throughput, memory), for the closing table of
 * `npm run test:reliability` (figures.jsonl in RELIABILITY_REPORT_DIR); nothing when unset.
 */
export function recordFigures(suite: string, figures: Record<string, number>): void {
  const dir = process.env.RELIABILITY_REPORT_DIR;
  if (!dir) return;
  appendFileSync(join(dir, 'figures.jsonl'), `${JSON.stringify({ suite, ...figures })}\n`);
}

/** A /health answer slower than this, of the gateway's own part of the time, is a stall. */
export const STALL_MS = 50;

/** What whileMeasured watches, and where it counts what it saw. */
export interface Watch {
  gateway: GatewayProcess;
  /** Another tenant, whose streamed runs go on back to back and must not notice. */
  bystander: Target;
  tally: { gatewayStalls: number; outOfMemoryDeaths: number; answered5xx: number };
  figures: Record<string, number>;
  /** The gateway's resident memory at rest, for the log line. */
  idleRssMb: number;
}

export interface HealthyRun {
  ok: boolean;
  detail: string;
  /** From the request to the stream's end. */
  ms: number;
}

/** One streamed run of `target` that must complete with its whole answer (a 5xx is counted in `tally`). */
export async function healthyRun(target: Target, tally: Pick<Watch['tally'], 'answered5xx'>): Promise<HealthyRun> {
  const words = Array.from({ length: 24 }, (_, i) => `w${i}`).join(' ');
  const started = performance.now();
  const response = await fetch(`${target.url}/v1/threads/runs`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({
      assistant_id: target.assistantId,
      stream: true,
      thread: { messages: [{ role: 'user', content: `Hi\n${fakeDirective({ reply: words, chunk_delay_ms: 10 })}` }] },
    }),
  });
  if (response.status >= 500) tally.answered5xx++;
  if (!response.ok) return { ok: false, detail: `HTTP ${response.status}`, ms: performance.now() - started };
  let text = '';
  let final = '';
  await readEvents(response, ({ event, data }) => {
    if (event === 'thread.message.delta') text += data.delta.content[0].text.value;
    if (event.startsWith('thread.run.')) final = event;
  });
  return {
    ok: final === 'thread.run.completed' && text === words,
    detail: `${final}: ${text.slice(0, 80)}`,
    ms: performance.now() - started,
  };
}

export interface Measured<T> {
  result: T;
  /** /health p99, of the gateway's own part of the latency (see whileMeasured). */
  p99Ms: number;
  stalls: number;
  peakRssGrowthMb: number;
  /** The other tenant's runs meanwhile. */
  healthy: HealthyRun[];
}

export { percentile };

/**
 * Runs `work` while a poller times the gateway's /health every millisecond or so and the other
 * tenant runs healthy runs back to back; then asserts: /health p99 under STALL_MS and no stall
 * (no answer over STALL_MS), peak RSS within `rssBoundMb` of what it was before, every healthy run
 * complete, and the gateway alive. Figures go to `watch.figures` under `name`.
 *
 * Latencies are judged by the gateway's own part: the time a health check took minus the time
 * the gateway's event-loop thread and the poller's spent waiting for a CPU meanwhile
 * (/proc/<pid>/schedstat). On a machine shared with other work (this fake upstream, the test
 * runner, anything else) the rest measures the neighbours, not the gateway; both figures are
 * reported. The poller is a process of its own (health-poller.ts): polling from this process, an
 * answer waited for this process's other work (`work`'s runs, the other tenant's streams) and for
 * this process's turns on a CPU, and both were counted as the gateway's.
 */
export async function whileMeasured<T>(
  watch: Watch,
  name: string,
  work: () => Promise<T>,
  rssBoundMb: number,
): Promise<Measured<T>> {
  const { gateway, tally, figures } = watch;
  const pid = defined(gateway.child.pid);
  const beforeRssMb = memoryOf(pid).rssMb;
  resetPeakMemory(pid);
  let done = false;
  const poller = await startHealthPoller(gateway.url, pid);
  const healthy: HealthyRun[] = [];
  const bystander = (async () => {
    do healthy.push(await healthyRun(watch.bystander, tally));
    while (!done);
  })();
  let result: T;
  let polled: { raw: number[]; own: number[] };
  try {
    result = await work();
  } finally {
    done = true;
    [polled] = await Promise.all([poller.stop(), bystander.catch(() => undefined)]);
  }
  const { raw, own } = polled;
  const alive = gateway.child.exitCode === null && gateway.child.signalCode === null;
  if (!alive || /heap out of memory|Invalid string length/.test(gateway.stderr())) tally.outOfMemoryDeaths++;
  expect(alive).toBe(true);

  const p99Ms = percentile(own, 0.99);
  const stalls = own.filter((ms) => ms > STALL_MS).length;
  tally.gatewayStalls += stalls;
  const peakRssGrowthMb = memoryOf(pid).peakMb - beforeRssMb;
  const round = (value: number) => Math.round(value * 10) / 10;
  Object.assign(figures, {
    [`${name}_health_p99_ms`]: round(p99Ms),
    [`${name}_health_max_ms`]: round(Math.max(...own)),
    [`${name}_health_raw_p99_ms`]: round(percentile(raw, 0.99)),
    [`${name}_rss_growth_mb`]: Math.round(peakRssGrowthMb),
  });
  console.log(
    `${name}: /health p99 ${p99Ms.toFixed(1)} ms, max ${Math.max(...own).toFixed(1)} ms over ${own.length} polls ` +
      `(with the waits for a CPU: p99 ${percentile(raw, 0.99).toFixed(1)} ms, max ${Math.max(...raw).toFixed(1)} ms); ` +
      `peak RSS +${peakRssGrowthMb.toFixed(1)} MB over ${beforeRssMb.toFixed(0)} MB (idle ${watch.idleRssMb.toFixed(0)} MB)`,
  );

  expect(healthy.length).toBeGreaterThan(0);
  expect(healthy.filter((run) => !run.ok)).toEqual([]);
  expect(own.length).toBeGreaterThan(10);
  expect(p99Ms).toBeLessThan(STALL_MS);
  expect(stalls).toBe(0);
  expect(peakRssGrowthMb).toBeLessThan(rssBoundMb);
  return { result, p99Ms, stalls, peakRssGrowthMb, healthy };
}

/**
 * Where a hostile suite happens (hostile.test.ts, turn-bounds.test.ts): a gateway process on a
 * data directory of its own, an attacker's workspace whose provider is the fake at the lowest
 * priority (producing hostile answers must not take the CPU from the gateway under test), and
 * another tenant's workspace whose provider is another fake at the usual priority (one starved
 * by the attacker's would fail that tenant's runs whatever the gateway did).
 */
export interface Arena {
  dataDir: string;
  fake: FakeUpstreamProcess;
  bystanderFake: FakeUpstreamProcess;
  gateway: GatewayProcess;
  /** The attacker's workspace: its virtual key `reliability` on `fake`, and an assistant (prepare). */
  attacker: Target;
  /** The other tenant: a second workspace with its own key, a virtual key on `bystanderFake`, an assistant. */
  other: Target;
  db: Client;
}

export async function openArena(
  name: string,
  env: Record<string, string>,
  tally: { answered5xx: number },
): Promise<Arena> {
  const dataDir = mkdtempSync(join(tmpdir(), `reliability-${name}-`));
  const started: { stop(): Promise<unknown> }[] = [];
  try {
    const [fake, bystanderFake] = await Promise.all([startFakeUpstreamProcess(), startFakeUpstreamProcess()]);
    started.push(fake, bystanderFake);
    setPriority(defined(fake.child.pid), 19);
    const gateway = await startGatewayProcess({ ...env, DATA_DIR: dataDir });
    started.push({ stop: () => gateway.stop('SIGKILL') });
    const attacker = await prepare(gateway, fake.baseURL);
    const cli = { DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
    expect((await runCli(['workspaces', 'create', '--slug', 'bystander', '--json'], cli)).code).toBe(0);
    const key = JSON.parse((await runCli(['api-keys', 'create', '--workspace', 'bystander', '--json'], cli)).stdout)
      .key as string;
    const headers = { 'x-gateway-api-key': key, 'content-type': 'application/json' };
    const base = { url: gateway.url, workspaceKey: key, headers, assistantId: '' };
    await postJson(
      base,
      '/v1/virtual-keys',
      { slug: 'bystander', provider: 'openai', base_url: bystanderFake.baseURL, api_key: 'sk-bystander-key' },
      tally,
    );
    const assistant = await postJson(base, '/v1/assistants', { model: 'fake-model' }, tally);
    const other = { ...base, headers: { ...headers, 'x-gateway-virtual-key': 'bystander' }, assistantId: assistant.id };
    return { dataDir, fake, bystanderFake, gateway, attacker, other, db: openDataDir(dataDir) };
  } catch (error) {
    // Nothing left running when the suite cannot start.
    await Promise.allSettled(started.map((process) => process.stop()));
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * The arena at rest, once the other tenant has run a few runs (so that lazily loaded code and
 * caches count as rest): what whileMeasured watches, and the other tenant's median run time then
 * (the first two runs left out). Both go to `figures` too.
 */
export async function atRest(
  arena: Arena,
  tally: Watch['tally'],
  figures: Record<string, number>,
): Promise<{ watch: Watch; baselineMs: number }> {
  const times: number[] = [];
  for (let i = 0; i < 7; i++) {
    const run = await healthyRun(arena.other, tally);
    expect(run.ok).toBe(true);
    times.push(run.ms);
  }
  const baselineMs = percentile(times.slice(2), 0.5);
  await sleep(500);
  const idleRssMb = memoryOf(defined(arena.gateway.child.pid)).rssMb;
  figures.idle_rss_mb = Math.round(idleRssMb);
  figures.bystander_baseline_ms = Math.round(baselineMs);
  return { watch: { gateway: arena.gateway, bystander: arena.other, tally, figures, idleRssMb }, baselineMs };
}

/** Records the suite's tally and figures, and stops and removes what openArena started. */
export async function closeArena(
  arena: Arena | undefined,
  suite: string,
  tally: Tally,
  figures: Record<string, number>,
): Promise<void> {
  recordTally(suite, tally);
  recordFigures(suite, figures);
  if (!arena) return;
  arena.db.close();
  await arena.gateway.stop('SIGKILL');
  await arena.fake.stop();
  await arena.bystanderFake.stop();
  rmSync(arena.dataDir, { recursive: true, force: true });
}
