import { defined } from '../support/defined';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@libsql/client';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEvents } from '../support/events';
import { fakeDirective, startFakeUpstream, type FakeScenario, type FakeUpstreamServer } from '../support/fake-upstream';
import { memoryOf, startGatewayProcess, type GatewayProcess } from '../support/processes';
import { recordTally } from '../support/tally';
import {
  activeRunCount,
  createRunRequest,
  halfWrittenRows,
  openDataDir,
  prepare,
  waitFor,
  type Target,
} from './support';

/**
 * Upstream faults and client disconnects against a gateway process over real HTTP, clients being
 * a raw SSE reader (to see every event on the wire) and the OpenAI SDK. test/resources/runs/interruptions.test.ts
 * covers the engine's side of most faults in-process; here: what a client sees, that every
 * upstream exchange is closed (none left open, in the fake's own records), and that the
 * rate-limit counters agree with the runs afterwards.
 */

const TIMEOUT_MS = 500;
const ENV = {
  // info: one access-log line per request, scanned for 5xx answers at the end.
  LOG_LEVEL: 'info',
  GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: String(TIMEOUT_MS),
  GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS: String(TIMEOUT_MS),
  // Room for the 16 MB answers of the clients that stop reading (the default cap is 4 MiB).
  GATEWAY_MAX_ANSWER_BYTES: String(32 * 1024 * 1024),
};

let dataDir: string;
let fake: FakeUpstreamServer;
let gateway: GatewayProcess;
let target: Target;
let openai: OpenAI;
let db: Client;
let refusedKey: string;
const policyIds: { requests: string; tokens: string } = { requests: '', tokens: '' };
const tally = { faultsInjected: 0, runsCreated: 0, runsLost: 0, rowsHalfWritten: 0, answered5xx: 0 };

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'reliability-faults-'));
  fake = await startFakeUpstream();
  gateway = await startGatewayProcess({ ...ENV, DATA_DIR: dataDir });
  target = await prepare(gateway, fake.baseURL);
  db = openDataDir(dataDir);
  openai = new OpenAI({
    apiKey: 'unused',
    baseURL: `${gateway.url}/v1`,
    defaultHeaders: target.headers,
    maxRetries: 0,
  });

  // A port nobody listens on: a fake started and closed again.
  const closed = await startFakeUpstream();
  await closed.close();
  refusedKey = 'refused';
  const response = await fetch(`${gateway.url}/v1/virtual-keys`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({ slug: refusedKey, provider: 'openai', base_url: closed.baseURL, api_key: 'sk-refused' }),
  });
  expect(response.status).toBe(200);

  // Counted for every run, so that the counters can be checked against the runs at the end.
  for (const type of ['requests', 'tokens'] as const) {
    const created = await fetch(`${gateway.url}/v1/policies/rate-limits`, {
      method: 'POST',
      headers: target.headers,
      body: JSON.stringify({
        conditions: [{ key: 'model', value: 'fake-model' }],
        group_by: [{ key: 'api_key' }],
        type,
        unit: 'rpd',
        value: 1e9,
      }),
    });
    policyIds[type] = ((await created.json()) as { id: string }).id;
  }
});

afterAll(async () => {
  recordTally('faults', tally);
  db?.close();
  await gateway?.stop('SIGKILL');
  await fake?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The upstream exchanges the fake still has open: none may stay so once their runs ended. */
async function openExchanges(): Promise<number> {
  const open = () => fake.requests.filter((request) => request.outcome === 'open').length;
  await waitFor(
    async () => open(),
    (n) => n === 0,
    5_000,
  );
  return open();
}

async function runRow(id: string) {
  const row = (await db.execute({ sql: 'SELECT status, last_error FROM runs WHERE id = ?', args: [id] })).rows[0];
  return row ? { status: String(row[0]), lastError: row[1] ? JSON.parse(String(row[1])) : null } : undefined;
}

const FAULTS: [string, FakeScenario | 'refused', { code: string; message: RegExp }][] = [
  ['a refused connection', 'refused', { code: 'server_error', message: /The upstream refused the connection/ }],
  ['HTTP 500', { status: 500 }, { code: 'server_error', message: /HTTP 500: The server had an error/ }],
  ['HTTP 503', { status: 503 }, { code: 'server_error', message: /HTTP 503/ }],
  [
    'HTTP 429 with Retry-After',
    { status: 429, retry_after: 20 },
    { code: 'rate_limit_exceeded', message: /HTTP 429: Rate limit reached/ },
  ],
  [
    'a slow first byte',
    { first_byte_delay_ms: 60_000 },
    { code: 'server_error', message: new RegExp(`no first byte within ${TIMEOUT_MS} ms`) },
  ],
  [
    'a stall mid-stream',
    { reply: 'a b c d e f g h', stall_after_chunks: 3 },
    { code: 'server_error', message: /silent/ },
  ],
  [
    'a cut mid-stream',
    { reply: 'a b c d e f g h', cut_after_chunks: 3 },
    { code: 'server_error', message: /cut|failed/ },
  ],
  [
    'a malformed chunk',
    { reply: 'a b c d e f g h', malformed_after_chunks: 3 },
    { code: 'server_error', message: /malformed/ },
  ],
  [
    'an error chunk mid-stream',
    { reply: 'a b c d e f g h', error_after_chunks: 3 },
    { code: 'server_error', message: /error mid-stream/ },
  ],
];

describe('an upstream fault ends the run failed with last_error', () => {
  const thread = (scenario: FakeScenario | 'refused') => ({
    messages: [{ role: 'user' as const, content: scenario === 'refused' ? 'Hello' : `Go\n${fakeDirective(scenario)}` }],
  });
  const headersFor = (scenario: FakeScenario | 'refused'): Record<string, string> =>
    scenario === 'refused' ? { 'x-gateway-virtual-key': refusedKey } : {};

  it.each(FAULTS)('%s: a streamed client gets the failed run, then done', async (_name, scenario, lastError) => {
    const response = await fetch(`${gateway.url}/v1/threads/runs`, {
      method: 'POST',
      headers: { ...target.headers, ...headersFor(scenario) },
      body: JSON.stringify({ assistant_id: target.assistantId, stream: true, thread: thread(scenario) }),
    });
    tally.faultsInjected++;
    expect(response.status).toBe(200);
    // The stream ends by itself, bounded by the first-byte and idle timeouts: nothing hangs.
    const events = await readEvents(response);
    const created = defined(events.find(({ event }) => event === 'thread.run.created')).data;
    tally.runsCreated++;
    const [failed, done] = events.slice(-2);
    expect(failed).toMatchObject({
      event: 'thread.run.failed',
      data: {
        id: created.id,
        status: 'failed',
        last_error: { code: lastError.code, message: expect.stringMatching(lastError.message) },
      },
    });
    expect(done).toEqual({ event: 'done', data: '[DONE]' });
    expect(events.filter(({ event }) => event === 'error')).toEqual([]);
    const stored = await runRow(created.id);
    if (stored?.status !== 'failed') tally.runsLost++;
    expect(stored).toEqual({ status: 'failed', lastError: defined(failed).data.last_error });
    expect(await openExchanges()).toBe(0);
  });

  it.each(FAULTS)('%s: the SDK polls the run to failed', async (_name, scenario, lastError) => {
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: target.assistantId, thread: thread(scenario) },
      { pollIntervalMs: 50, headers: headersFor(scenario) },
    );
    tally.faultsInjected++;
    tally.runsCreated++;
    if (run.status !== 'failed') tally.runsLost++;
    expect(run.status).toBe('failed');
    expect(run.last_error).toEqual({ code: lastError.code, message: expect.stringMatching(lastError.message) });
    expect(await openExchanges()).toBe(0);
  });
});

describe('a client that leaves mid-stream', () => {
  it('over HTTP, 16 at once at random points: every run completes and is stored whole; no upstream exchange stays open', async () => {
    const words = Array.from({ length: 40 }, (_, i) => `w${i}`);
    const ids = await Promise.all(
      Array.from({ length: 16 }, async () => {
        const leave = new AbortController();
        const response = await fetch(`${gateway.url}/v1/threads/runs`, {
          method: 'POST',
          headers: target.headers,
          body: JSON.stringify({
            assistant_id: target.assistantId,
            stream: true,
            thread: {
              messages: [
                { role: 'user', content: `Go\n${fakeDirective({ reply: words.join(' '), chunk_delay_ms: 20 })}` },
              ],
            },
          }),
          signal: leave.signal,
        });
        let id = '';
        const deltas = 1 + Math.floor(Math.random() * 20);
        let seen = 0;
        await readEvents(response, ({ event, data }) => {
          if (event === 'thread.run.created') id = data.id;
          if (event === 'thread.message.delta' && ++seen === deltas) leave.abort();
        }).catch((error: unknown) => {
          if (!leave.signal.aborted) throw error;
        });
        tally.faultsInjected++;
        tally.runsCreated++;
        return id;
      }),
    );
    for (const id of ids) {
      const stored = await waitFor(
        () => runRow(id),
        (row) => row?.status === 'completed',
        10_000,
      );
      if (stored?.status !== 'completed') tally.runsLost++;
      expect(stored?.status).toBe('completed');
      const text = defined(
        (await db.execute({ sql: "SELECT content FROM messages WHERE run_id = ? AND role = 'assistant'", args: [id] }))
          .rows[0],
      )[0];
      expect(JSON.parse(String(text))[0].text.value).toBe(words.join(' '));
    }
    expect(await openExchanges()).toBe(0);
  });

  it('while the upstream stalls: the run still fails by the idle timeout and its upstream exchange is closed', async () => {
    const leave = new AbortController();
    const response = await createRunRequest(target, { reply: 'a b c d e f', stall_after_chunks: 3 }, true);
    let id = '';
    await readEvents(response, ({ event, data }) => {
      if (event === 'thread.run.created') id = data.id;
      if (event === 'thread.message.delta') leave.abort();
    }).catch(() => undefined);
    void response.body?.cancel().catch(() => undefined);
    tally.faultsInjected += 2;
    tally.runsCreated++;
    const stored = await waitFor(
      () => runRow(id),
      (row) => row?.status === 'failed',
      10_000,
    );
    if (stored?.status !== 'failed') tally.runsLost++;
    expect(stored).toMatchObject({ status: 'failed', lastError: { message: expect.stringMatching(/silent/) } });
    expect(await openExchanges()).toBe(0);
  });
});

describe('a client that stops reading', () => {
  it('no longer holds its run after the idle timeout: the run completes whole, the upstream is not blamed, and the connection is closed', async () => {
    // Well beyond what the kernel's socket buffers between client and gateway hold.
    const BYTES = 16_000_000;
    const READERS = 3;
    const stalled: IncomingMessage[] = [];
    const stallAtFirstSight = () =>
      new Promise<string>((resolve, reject) => {
        const url = new URL(`${gateway.url}/v1/threads/runs`);
        const req = httpRequest(
          { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: target.headers },
          (res) => {
            let head = '';
            res.on('data', (chunk: Buffer) => {
              head += chunk.toString();
              const id = /"id":"(run_[A-Za-z0-9]+)"/.exec(head)?.[1];
              // Stops reading at its first sight of the run, and keeps the connection open.
              if (id) {
                res.pause();
                res.removeAllListeners('data');
                stalled.push(res);
                resolve(id);
              }
            });
          },
        );
        req.on('error', reject);
        req.end(
          JSON.stringify({
            assistant_id: target.assistantId,
            stream: true,
            thread: {
              messages: [{ role: 'user', content: `Go\n${fakeDirective({ stream_bytes: BYTES, chunk_bytes: 4096 })}` }],
            },
          }),
        );
      });
    try {
      // One at a time: several 16 MB answers at once would starve the 500 ms first-byte timeout.
      for (let i = 0; i < READERS; i++) {
        const before = fake.requests.length;
        const id = await stallAtFirstSight();
        tally.faultsInjected++;
        tally.runsCreated++;
        const stored = await waitFor(
          () => runRow(id),
          (row) => row?.status !== 'in_progress',
          30_000,
        );
        if (stored?.status !== 'completed') tally.runsLost++;
        expect(stored).toEqual({ status: 'completed', lastError: null });
        const length = defined(
          (
            await db.execute({
              sql: "SELECT length(json_extract(content, '$[0].text.value')) FROM messages WHERE run_id = ? AND role = 'assistant'",
              args: [id],
            })
          ).rows[0],
        )[0];
        expect(Number(length)).toBe(BYTES);
        expect(fake.requests.slice(before).map((request) => request.outcome)).toEqual(['completed']);
      }
      expect(memoryOf(defined(gateway.child.pid)).peakMb).toBeLessThan(512);
      // Nor does it keep the connection: silent both ways for twice the upstream timeouts (1 s
      // here), the gateway closes its side. A paused client cannot see that, so the kernel's
      // table of TCP connections tells: the gateway's end of each is no longer established.
      await new Promise((resolve) => setTimeout(resolve, 4 * TIMEOUT_MS));
      const gatewayPort = Number(new URL(gateway.url).port);
      expect(stalled.map((res) => gatewaySideState(gatewayPort, defined(res.socket.localPort)))).not.toContain(
        'ESTABLISHED',
      );
    } finally {
      for (const res of stalled) res.destroy();
    }
  });
});

describe('afterwards', () => {
  it('no connection to the upstream stays open once idle keep-alive connections time out', async () => {
    // Idle pooled connections close after a few seconds (the client's and the fake's keep-alive
    // timeouts); a connection still held by a forgotten exchange would not.
    expect(
      await waitFor(
        async () => fake.openConnections,
        (n) => n === 0,
        20_000,
      ),
    ).toBe(0);
  });

  it('the rate-limit counters agree with the runs, no row is half-written, and the gateway served no 5xx', async () => {
    // Every run was admitted once and charged its usage once, faults or not.
    const runs = defined(
      (
        await db.execute(
          "SELECT count(*), coalesce(sum(json_extract(usage, '$.total_tokens')), 0) FROM runs WHERE rate_limit IS NOT NULL",
        )
      ).rows[0],
    );
    const used = async (policyId: string) =>
      Number(
        defined(
          (
            await db.execute({
              sql: 'SELECT coalesce(sum(used), 0) FROM rate_limit_counters WHERE key LIKE ?',
              args: [`${policyId}/%`],
            })
          ).rows[0],
        )[0],
      );
    expect(Number(runs[0])).toBe(tally.runsCreated);
    expect(await used(policyIds.requests)).toBe(tally.runsCreated);
    expect(await used(policyIds.tokens)).toBe(Number(runs[1]));
    expect(Number(runs[1])).toBeGreaterThan(0);

    expect(await activeRunCount(db)).toBe(0);
    const halfWritten = await halfWrittenRows(db);
    tally.rowsHalfWritten += halfWritten.length;
    expect(halfWritten).toEqual([]);
    const serverErrors = gateway
      .stdout()
      .split('\n')
      .filter((line) => /"status":5\d\d/.test(line));
    tally.answered5xx += serverErrors.length;
    expect(serverErrors).toEqual([]);
  });
});

/** The state of the gateway's end of a loopback TCP connection, from /proc/net/tcp (Linux). */
function gatewaySideState(gatewayPort: number, clientPort: number): string {
  const port = (address: string) => parseInt(defined(address.split(':').at(-1)), 16);
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(table)) continue;
    for (const line of readFileSync(table, 'utf8').trim().split('\n').slice(1)) {
      const [, local, remote, state] = line.trim().split(/\s+/);
      if (port(defined(local)) === gatewayPort && port(defined(remote)) === clientPort)
        return state === '01' ? 'ESTABLISHED' : `state ${state}`;
    }
  }
  return 'gone';
}
