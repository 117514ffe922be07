import { defined } from '../support/defined';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { readEvents } from '../support/events';
import { startFakeUpstream, type FakeUpstreamServer } from '../support/fake-upstream';
import { startGatewayProcess, type GatewayProcess } from '../support/processes';
import { recordTally } from '../support/tally';
import {
  activeRunCount,
  createRunRequest,
  halfWrittenRows,
  openDataDir,
  prepare,
  runStates,
  sleep,
  waitFor,
  type Target,
} from './support';

/**
 * kill -9 of the Node server while policies are being created and runs (streamed and not) are in
 * flight, then a restart on the same data directory, a few rounds. After each restart: every
 * acknowledged policy and run is there, no row is half-written, and within a lease and a sweep no
 * run is left active; the interrupted ones failed and say why.
 */

const ROUNDS = 4;
const CONCURRENCY = 24;
// Short, so that a round takes seconds; the default (30 s) only makes the wait longer.
const LEASE_SECONDS = 3;
const ENV = { LOG_LEVEL: 'warn', GATEWAY_RUN_LEASE_SECONDS: String(LEASE_SECONDS) };
// A run answers in about a second: some finish, many are mid-answer when the process dies.
const SLOW = { reply: Array.from({ length: 30 }, (_, i) => `word${i}`).join(' '), chunk_delay_ms: 30 };

let dataDir: string;
let fake: FakeUpstreamServer;
beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'reliability-crash-'));
  fake = await startFakeUpstream();
});
afterAll(async () => {
  await fake.close();
  rmSync(dataDir, { recursive: true, force: true });
});

interface Acknowledged {
  policies: Map<string, string>;
  runs: Set<string>;
  answered5xx: number;
}

/** Creates policies and runs from CONCURRENCY clients until `stop` resolves; records what was acknowledged. */
async function traffic(target: Target, stop: Promise<void>, acknowledged: Acknowledged): Promise<void> {
  let stopped = false;
  void stop.then(() => (stopped = true));
  let n = 0;
  const client = async () => {
    while (!stopped) {
      const kind = n++ % 3;
      try {
        if (kind === 0) {
          const name = `policy ${n} ${Math.random()}`;
          const response = await fetch(`${target.url}/v1/policies/rate-limits`, {
            method: 'POST',
            headers: target.headers,
            // A model no run uses: the policies pile up without limiting the runs.
            body: JSON.stringify({
              name,
              conditions: [{ key: 'model', value: 'not-used' }],
              group_by: [{ key: 'api_key' }],
              type: 'requests',
              unit: 'rpm',
              value: 1000,
            }),
          });
          if (response.status >= 500) acknowledged.answered5xx++;
          const body = (await response.json()) as { id?: string };
          if (response.ok && body.id) acknowledged.policies.set(body.id, name);
        } else {
          const stream = kind === 1;
          const response = await createRunRequest(target, SLOW, stream);
          if (response.status >= 500) acknowledged.answered5xx++;
          if (!response.ok) continue;
          if (stream) {
            await readEvents(response, ({ event, data }) => {
              if (event === 'thread.run.created') acknowledged.runs.add(data.id);
            });
          } else {
            acknowledged.runs.add(((await response.json()) as { id: string }).id);
          }
        }
      } catch {
        // The process died under this request: it was not acknowledged (or only partly read).
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, client));
}

it(`keeps every acknowledged policy and run over ${ROUNDS} kill -9s, and settles the interrupted runs`, async () => {
  let gateway: GatewayProcess = await startGatewayProcess({ ...ENV, DATA_DIR: dataDir });
  let target = await prepare(gateway, fake.baseURL);
  const acknowledged: Acknowledged = { policies: new Map(), runs: new Set(), answered5xx: 0 };
  const db = openDataDir(dataDir);
  let interrupted = 0;
  let completed = 0;
  let lost = 0;
  let halfWritten: string[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      // Kill at a different moment each round, once the clients are well under way.
      const victim = gateway;
      const killed = sleep(1500 + Math.random() * 2000).then(async () => {
        expect(await victim.stop('SIGKILL')).toBeNull();
      });
      await traffic(target, killed, acknowledged);
      await killed;

      gateway = await startGatewayProcess({ ...ENV, DATA_DIR: dataDir });
      target = { ...target, url: gateway.url };

      // The restarted gateway's sweep settles what the dead one held, once its leases run out.
      const active = await waitFor(
        () => activeRunCount(db),
        (n) => n === 0,
        (LEASE_SECONDS * 1.5 + 10) * 1000,
      );
      expect(active).toBe(0);
    }

    const states = await runStates(db);
    for (const id of acknowledged.runs) {
      const state = states.get(id);
      if (!state) {
        lost++;
        continue;
      }
      if (state.status === 'failed') {
        interrupted++;
        expect(state.lastError).toEqual({
          code: 'server_error',
          message: expect.stringMatching(/stopped before the run finished \(a restart or a crash\)/),
        });
      } else {
        expect(state.status).toBe('completed');
        completed++;
      }
    }
    // Through the API too, for a sample: the run is served as the database holds it.
    for (const id of [...acknowledged.runs].slice(0, 20)) {
      const threadId = String(
        defined((await db.execute({ sql: 'SELECT thread_id FROM runs WHERE id = ?', args: [id] })).rows[0])[0],
      );
      const response = await fetch(`${gateway.url}/v1/threads/${threadId}/runs/${id}`, { headers: target.headers });
      expect(response.status).toBe(200);
      expect(((await response.json()) as { status: string }).status).toBe(defined(states.get(id)).status);
    }
    for (const [id, name] of acknowledged.policies) {
      const response = await fetch(`${gateway.url}/v1/policies/rate-limits/${id}`, { headers: target.headers });
      if (response.status !== 200) lost++;
      else expect(((await response.json()) as { name: string }).name).toBe(name);
    }
    halfWritten = await halfWrittenRows(db);

    expect(acknowledged.runs.size).toBeGreaterThan(ROUNDS * 10);
    expect(acknowledged.policies.size).toBeGreaterThan(ROUNDS * 5);
    // Some runs were mid-answer at each kill, so the recovery path was exercised.
    expect(interrupted).toBeGreaterThan(0);
    expect(completed).toBeGreaterThan(0);
    expect(lost).toBe(0);
    expect(halfWritten).toEqual([]);
    expect(acknowledged.answered5xx).toBe(0);
  } finally {
    recordTally('crash', {
      faultsInjected: ROUNDS,
      runsCreated: acknowledged.runs.size,
      runsLost: lost,
      rowsHalfWritten: halfWritten.length,
      answered5xx: acknowledged.answered5xx,
    });
    console.log(
      `crash: ${ROUNDS} kill -9s, ${acknowledged.policies.size} policies and ${acknowledged.runs.size} runs acknowledged, ` +
        `${completed} completed, ${interrupted} interrupted runs failed with last_error, ${lost} lost, ${halfWritten.length} half-written rows`,
    );
    db.close();
    await gateway.stop('SIGKILL');
  }
});
