import { defined } from '../support/defined';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type Client } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { THREAD_HOLDING_SQL } from '../../src/db/run-statuses';
import { json } from '../support/envelope';
import { readEvents } from '../support/events';
import { fakeDirective, type FakeScenario } from '../support/fake-upstream';
import { freshGate, remoteGate } from '../support/gates';
import {
  startFakeUpstreamProcess,
  startGatewayProcess,
  type FakeUpstreamProcess,
  type GatewayProcess,
} from '../support/processes';
import { recordTally } from '../support/tally';
import { startLocalWorker, type LocalWorker } from '../support/workerd';
import { openDataDir, prepare, prepareWorkspace, recordFigures, waitFor, type Target } from './support';

/**
 * One active run per thread and token reservations, raced while a CPU hog keeps every core busy
 * (a busy loop per core at the usual priority, as other work on a shared machine does), on Node (a
 * gateway process as `npm start` runs it) and on workerd (the deployed bundle under Miniflare on a
 * local sqld, test/support/workerd.ts, as the workerd tests run the ingest Worker). The workerd
 * tests' own racers run inside workerd and stop at their first failed assertion; driven from here
 * over HTTP, the same races count every violation. STARVATION_ROUNDS rounds (default 5) of each:
 *
 * - 20 runs created at once on a thread: one admitted, the others refused `thread_has_active_run`,
 *   one active run on the thread meanwhile, the winner completed, and the thread holding the rows
 *   of the winner alone;
 * - 8 streamed racers, whose upstream calls begin while their rows commit: the same, and no loser's
 *   exchange left open at the provider;
 * - a tokens policy of value 1: a failing run's reservation refuses a racer while it executes and is
 *   given back when it fails; the next run's reservation refuses 9 racers; once it has completed,
 *   the counter holds its tokens exactly.
 *
 * Every winner's answer waits at a gate of the fake provider (a process of its own) until every
 * racer has been answered, so nothing here depends on how fast the machine is. Each broken guarantee
 * is a violation (the tally's `starvationViolations`, which must be 0), named in the failure.
 */

const ROUNDS = Number(process.env.STARVATION_ROUNDS ?? 5);
const RACERS = 20;
const STREAMED_RACERS = 8;
const TOKEN_RACERS = 9;
/** How long a run may take to end, or a reservation to be given back, on a starved machine. */
const DEADLINE_MS = 30_000;

/** A gateway under test: where to send requests, and its database, read beside it. */
interface Runtime {
  name: string;
  target: Target;
  db: Client;
}

let fake: FakeUpstreamProcess;
let dataDir: string;
let gateway: GatewayProcess;
let worker: LocalWorker;
const runtimes = new Map<'node' | 'workerd', Runtime>();
const tally = { runsCreated: 0, answered5xx: 0, starvationViolations: 0 };
const figures: Record<string, number> = { rounds: ROUNDS, hog_processes: availableParallelism() };

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'reliability-starvation-'));
  [fake, gateway, worker] = await Promise.all([
    startFakeUpstreamProcess(),
    startGatewayProcess({ LOG_LEVEL: 'warn', DATA_DIR: dataDir, GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' }),
    startLocalWorker(),
  ]);
  runtimes.set('node', { name: 'node', target: await prepare(gateway, fake.baseURL), db: openDataDir(dataDir) });
  runtimes.set('workerd', {
    name: 'workerd',
    target: await prepareWorkspace(worker.url, worker.workspaceKey, fake.baseURL),
    db: createClient({ url: worker.sqld.url }),
  });
}, 120_000);

afterAll(async () => {
  recordTally('starvation', tally);
  recordFigures('starvation', figures);
  for (const runtime of runtimes.values()) runtime.db.close();
  await gateway?.stop('SIGKILL');
  await worker?.stop();
  await fake?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('under CPU starvation', () => {
  for (const name of ['node', 'workerd'] as const) {
    it(`keeps one active run per thread and exact reservations on ${name}`, async () => {
      const runtime = defined(runtimes.get(name));
      const violations: string[] = [];
      const broken = (what: string) => violations.push(what);
      const hog = startCpuHog();
      const started = performance.now();
      try {
        for (let round = 0; round < ROUNDS; round++) {
          await racersOnAThread(runtime, broken);
          await streamedRacers(runtime, broken);
          await tokenReservations(runtime, broken);
        }
      } finally {
        await hog.stop();
      }
      figures[`${name}_seconds`] = Math.round((performance.now() - started) / 1000);
      tally.starvationViolations += violations.length;
      expect(violations).toEqual([]);
    });
  }
});

/**
 * Busy loops at the usual priority, one per core. Each one ends itself once this process is gone
 * (its parent changes), so that a test killed midway leaves no loop behind.
 */
function startCpuHog(): { stop(): Promise<void> } {
  const loop =
    'const parent = process.ppid; for (;;) { if (process.ppid !== parent) process.exit(); for (let i = 0; i < 1e7; i++); }';
  const children = Array.from({ length: availableParallelism() }, () =>
    spawn(process.execPath, ['-e', loop], { stdio: 'ignore' }),
  );
  return { stop: () => Promise.all(children.map(kill)).then(() => undefined) };
}

function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  return exited;
}

// ── The races ──────────────────────────────────────────────────────────────────────────────────

async function racersOnAThread(runtime: Runtime, broken: (what: string) => void): Promise<void> {
  const threadId = await threadWithATurn(runtime, broken);
  const gate = remoteGate(fake.baseURL, freshGate('racers'));
  const responses = await Promise.all(
    Array.from({ length: RACERS }, (_, i) =>
      send(
        runtime,
        `/v1/threads/${threadId}/runs`,
        onThread(runtime, `Racer ${i}`, { reply: 'Done.', hold: gate.name }),
      ),
    ),
  );
  const admitted = await settleRacers(runtime, responses, 'thread_has_active_run', broken);
  await expectOneActive(runtime, threadId, broken);
  await gate.open();
  await expectCompleted(runtime, admitted, broken);
  await expectThreadRows(runtime, threadId, admitted.length, broken);
}

async function streamedRacers(runtime: Runtime, broken: (what: string) => void): Promise<void> {
  const threadId = await threadWithATurn(runtime, broken);
  const gates = Array.from({ length: STREAMED_RACERS }, () => remoteGate(fake.baseURL, freshGate('streamed')));
  const responses = await Promise.all(
    gates.map((gate, i) =>
      send(runtime, `/v1/threads/${threadId}/runs`, {
        ...onThread(runtime, `Racer ${i}`, { reply: 'Slow answer.', hold: gate.name }),
        stream: true,
      }),
    ),
  );
  const winners = responses.filter((response) => response.status === 200);
  await settleRacers(
    runtime,
    responses.filter((response) => response.status !== 200),
    'thread_has_active_run',
    broken,
  );
  if (winners.length !== 1)
    broken(`${runtime.name}: ${winners.length} of ${STREAMED_RACERS} streamed racers admitted on one thread`);
  await expectOneActive(runtime, threadId, broken);
  // The thread's newest message names the racer whose run it took: its gate alone opens (all of
  // them, should more than one have won).
  const newest = await json(await send(runtime, `/v1/threads/${threadId}/messages?limit=1`));
  const racer = Number(/^Racer (\d+)/.exec(newest.data[0]?.content[0]?.text.value ?? '')?.[1]);
  await Promise.all((winners.length === 1 && gates[racer] ? [gates[racer]] : gates).map((gate) => gate.open()));
  for (const winner of winners) {
    const events = await readEvents(winner);
    const ending = events.at(-2);
    if (ending?.event !== 'thread.run.completed')
      broken(`${runtime.name}: a streamed winner ended with ${ending?.event}`);
  }
  tally.runsCreated += winners.length;
  await expectThreadRows(runtime, threadId, winners.length, broken);
  const open = await waitFor(
    () => fake.openExchanges(),
    (n) => n === 0,
    DEADLINE_MS,
  );
  if (open !== 0) broken(`${runtime.name}: ${open} exchanges left open at the provider after the streamed racers`);
}

async function tokenReservations(runtime: Runtime, broken: (what: string) => void): Promise<void> {
  const model = `tokens-${crypto.randomUUID().slice(0, 8)}`;
  const policy = await send(runtime, '/v1/policies/rate-limits', {
    type: 'tokens',
    unit: 'rpd',
    value: 1,
    conditions: [{ key: 'model', value: model }],
    group_by: [{ key: 'api_key' }],
  });
  if (policy.status !== 200) throw new Error(`the tokens policy was refused: ${policy.status} ${await policy.text()}`);
  const run = (scenario: FakeScenario) =>
    send(runtime, '/v1/threads/runs', {
      assistant_id: runtime.target.assistantId,
      model,
      thread: { messages: [userMessage('Count me', scenario)] },
    });

  // A failing run holds its reservation while it executes, and gives it back when it fails.
  const failingGate = remoteGate(fake.baseURL, freshGate('failing'));
  const failing = await settleRacers(
    runtime,
    [await run({ status: 500, hold: failingGate.name })],
    'rate_limit_exceeded',
    broken,
  );
  if (failing.length === 0) broken(`${runtime.name}: the first run of a fresh tokens policy was refused`);
  await settleRacers(runtime, [await run({ reply: 'Counted' })], 'rate_limit_exceeded', broken, 0);
  await failingGate.open();
  for (const created of failing) {
    const ended = await endOf(runtime, created);
    if (ended.status !== 'failed') broken(`${runtime.name}: a run whose provider answered 500 ended ${ended.status}`);
  }

  // Given back: a run is admitted again, and its reservation refuses the racers while it executes.
  const gate = remoteGate(fake.baseURL, freshGate('counted'));
  const first = await waitFor(
    async () => {
      const response = await run({ reply: 'Counted', hold: gate.name });
      if (response.status === 429) await response.arrayBuffer();
      return response;
    },
    (response) => response.status !== 429,
    DEADLINE_MS,
  );
  const admitted = await settleRacers(runtime, [first], 'rate_limit_exceeded', broken);
  if (admitted.length === 0) broken(`${runtime.name}: a failed run's token reservation was not given back`);
  const racers = await Promise.all(Array.from({ length: TOKEN_RACERS }, () => run({ reply: 'Counted' })));
  const past = await settleRacers(runtime, racers, 'rate_limit_exceeded', broken, 0);
  await gate.open();
  const ended = await Promise.all([...admitted, ...past].map((created) => endOf(runtime, created)));
  for (const { status, last_error } of ended) {
    if (status !== 'completed')
      broken(`${runtime.name}: a counted run ended ${status}${last_error ? `: ${last_error.message}` : ''}`);
  }

  // Settled: the counter holds what the runs used, exactly (a refusal says how much it holds).
  const used = ended.reduce((sum, { usage }) => sum + (usage?.total_tokens ?? 0), 0);
  const expected = `Limit 1, Used ${used}.`;
  const answer = async () => {
    const response = await run({ reply: 'Counted' });
    const body = await json(response);
    return {
      status: response.status,
      said: response.status === 200 ? `admitted ${body.id}` : String(body.error?.message),
    };
  };
  const last = await waitFor(answer, ({ status, said }) => status !== 429 || said.includes(expected), DEADLINE_MS);
  if (last.status !== 429 || !last.said.includes(expected)) {
    broken(
      `${runtime.name}: after the runs settled, the counter did not hold their ${used} tokens (${last.status}: ${last.said})`,
    );
  }
}

// ── Checks ─────────────────────────────────────────────────────────────────────────────────────

/**
 * The racers' answers: the runs admitted (a violation past `allowed` of them), and a violation for
 * each refusal that is not the error `code` (a 5xx, another error).
 */
async function settleRacers(
  runtime: Runtime,
  responses: Response[],
  code: string,
  broken: (what: string) => void,
  allowed = 1,
) {
  const admitted: { id: string; thread_id: string }[] = [];
  for (const response of responses) {
    const body = await json(response);
    if (response.status === 200) admitted.push(body);
    else if (body.error?.code !== code)
      broken(`${runtime.name}: a racer was answered ${response.status} ${body.error?.code}: ${body.error?.message}`);
  }
  tally.runsCreated += admitted.length;
  if (admitted.length > allowed)
    broken(`${runtime.name}: ${admitted.length} racers admitted where ${allowed} could be (${code})`);
  return admitted;
}

/** While its winner is held: one run holds the thread, in the database. */
async function expectOneActive(runtime: Runtime, threadId: string, broken: (what: string) => void) {
  const { rows } = await runtime.db.execute({
    sql: `SELECT count(*) AS n FROM runs WHERE thread_id = ? AND ${THREAD_HOLDING_SQL}`,
    args: [threadId],
  });
  if (Number(defined(rows[0]).n) !== 1)
    broken(`${runtime.name}: ${defined(rows[0]).n} active runs on one thread while its winner was held`);
}

async function expectCompleted(
  runtime: Runtime,
  runs: { id: string; thread_id: string }[],
  broken: (what: string) => void,
) {
  for (const created of runs) {
    const { status, last_error } = await endOf(runtime, created);
    if (status !== 'completed')
      broken(
        `${runtime.name}: a run admitted on its thread ended ${status}${last_error ? `: ${last_error.message}` : ''}`,
      );
  }
}

/** The thread holds its first turn and the rows of its `admitted` racers' runs, nothing of the others'. */
async function expectThreadRows(runtime: Runtime, threadId: string, admitted: number, broken: (what: string) => void) {
  const count = async (table: string) =>
    Number(
      defined(
        (await runtime.db.execute({ sql: `SELECT count(*) AS n FROM ${table} WHERE thread_id = ?`, args: [threadId] }))
          .rows[0],
      ).n,
    );
  const [runs, messages] = [await count('runs'), await count('messages')];
  if (runs !== 1 + admitted || messages !== 2 + 2 * admitted) {
    broken(`${runtime.name}: a thread with ${admitted} racer admitted holds ${runs} runs and ${messages} messages`);
  }
}

// ── Requests ───────────────────────────────────────────────────────────────────────────────────

/** A thread whose first run completed: answers its id. */
async function threadWithATurn(runtime: Runtime, broken: (what: string) => void): Promise<string> {
  const created = await json(
    await send(runtime, '/v1/threads/runs', {
      assistant_id: runtime.target.assistantId,
      thread: { messages: [userMessage('Hi', { reply: 'Hello.' })] },
    }),
  );
  if (!created.id) throw new Error(`the thread's first run was refused: ${JSON.stringify(created)}`);
  tally.runsCreated++;
  await expectCompleted(runtime, [created], broken);
  return created.thread_id;
}

/** A run on a thread, its one additional message saying `scenario` to the fake. */
function onThread(runtime: Runtime, text: string, scenario: FakeScenario) {
  return { assistant_id: runtime.target.assistantId, additional_messages: [userMessage(text, scenario)] };
}

function userMessage(text: string, scenario: FakeScenario) {
  return { role: 'user', content: `${text}\n${fakeDirective(scenario)}` };
}

/** The run once it has ended, or as it stands after DEADLINE_MS. */
async function endOf(runtime: Runtime, run: { id: string; thread_id: string }) {
  return waitFor(
    async () => json(await send(runtime, `/v1/threads/${run.thread_id}/runs/${run.id}`)),
    (current) => !['queued', 'in_progress', 'cancelling'].includes(current.status),
    DEADLINE_MS,
  );
}

async function send(runtime: Runtime, path: string, body?: unknown): Promise<Response> {
  const { url, headers } = runtime.target;
  const init = body === undefined ? { headers } : { method: 'POST', headers, body: JSON.stringify(body) };
  const response = await fetch(`${url}${path}`, init);
  if (response.status >= 500) tally.answered5xx++;
  return response;
}
