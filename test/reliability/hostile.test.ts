import { defined } from '../support/defined';
import type { Client } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeDirective, type FakeScenario } from '../support/fake-upstream';
import { memoryOf, type GatewayProcess } from '../support/processes';
import {
  activeRunCount,
  atRest,
  closeArena,
  expectRunEnded,
  halfWrittenRows,
  openArena,
  postJson,
  runToEnd,
  waitFor,
  whileMeasured as measured,
  type Arena,
  type EndedRun,
  type Target,
  type Watch,
} from './support';

/**
 * Upstreams that behave as an attacker's would (a tenant points a virtual key at a server it runs),
 * against a gateway process with its default caps: a tool-call index of 4294967294 and other bad
 * indices, answers of 500 MB and endless ones (eight at once), 50 MB of tool-call arguments, a gzip
 * bomb as an error body, the provider key echoed at every position around the 500-character cut,
 * keep-alive comments and nothing else, nonsense usage numbers, pathological event-stream framing,
 * and a database that refuses to record a run's end.
 *
 * While each one happens: a poller asks the gateway's /health every millisecond or so (p99 under
 * STALL_MS (support.ts), and no answer slower: a stall), the gateway's peak resident memory stays within a
 * stated bound of what it was before (MAX_RSS_GROWTH_MB; CAPPED_RUN_BOUND_MB a run for answers cut
 * at the cap, CUT_CALLS_RUN_BOUND_MB for tool calls cut there), another tenant's healthy runs complete whole, and every hostile run ends in its
 * documented state saying why. The hostile fake upstream runs in a process of its own, at the
 * lowest priority, so that producing the hostile answers does not take the CPU from the gateway;
 * the other tenant's provider is another process, at the usual priority: a provider starved of the
 * CPU by the attacker's would fail that tenant's runs whatever the gateway did.
 */

/** Peak resident memory over what it was before a behaviour, with eight such runs at once. */
const MAX_RSS_GROWTH_MB = 64;
const IDLE_MS = 1000;
const MIB = 1024 * 1024;
const DEFAULT_CAP = 4 * MIB;
/**
 * What a run whose answer reached the cap may hold at its end, until garbage collection: the kept
 * answer, its copy as written to the database, and the chunks it was read from; about 3 times the
 * cap, bounded at 4 here.
 */
const CAPPED_RUN_BOUND_MB = (4 * DEFAULT_CAP) / MIB;
/**
 * What a run whose tool calls the cap cut may hold: the arguments kept, up to the cap (a cut call
 * is never written, so nothing copies them at the end), and what was read and not yet taken, a
 * few hundred KiB: up to 64 KiB waiting in the body and a read or two in the socket's buffer
 * (runtime/node/upstream-request.ts), the event being put together and the events of one read.
 * Rounded up to the cap and 1 MiB.
 */
const CUT_CALLS_RUN_BOUND_MB = DEFAULT_CAP / MIB + 1;
/** The hostile virtual key's provider key: 32 hex characters, like Azure's, not shaped like `sk-…`. */
const KEY = '7d0c4b9e2a1f48e6b3c5d7e9f1a2b4c6';
const ENV = {
  LOG_LEVEL: 'warn',
  // Explicit: the fake listens on loopback, and this database has two workspaces.
  GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
  GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: '20000',
  GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS: String(IDLE_MS),
};

/** The gateway, the attacker's workspace (its virtual keys `reliability` and `hostile`, keyed with KEY), the other tenant's. */
let arena: Arena;
let gateway: GatewayProcess;
let attacker: Target;
let db: Client;
let idleRssMb: number;
/** What whileMeasured watches: this gateway, the other tenant, and where the counts go. */
let watch: Watch;
let tokenPolicyId: string;
const tally = {
  hostileUpstreams: 0,
  gatewayStalls: 0,
  outOfMemoryDeaths: 0,
  runsCreated: 0,
  runsLost: 0,
  rowsHalfWritten: 0,
  answered5xx: 0,
};
const figures: Record<string, number> = {};

beforeAll(async () => {
  arena = await openArena('hostile', ENV, tally);
  ({ gateway, attacker, db } = arena);
  await post(attacker, '/v1/virtual-keys', {
    slug: 'hostile',
    provider: 'openai',
    base_url: arena.fake.baseURL,
    api_key: KEY,
  });

  // A token policy on the attacker's workspace, to see what its runs are charged.
  tokenPolicyId = (
    await post(attacker, '/v1/policies/rate-limits', {
      conditions: [{ key: 'workspace_id', value: '*' }],
      group_by: [{ key: 'workspace_id' }],
      type: 'tokens',
      unit: 'rpd',
      value: 1e12,
    })
  ).id;
  // The gzip bomb is made once per size by the fake: made now, not while measuring.
  const warm = await fetch(`${arena.fake.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: fakeDirective(GZIP_BOMB) }] }),
  });
  await warm.body?.cancel();

  ({ watch } = await atRest(arena, tally, figures));
  idleRssMb = watch.idleRssMb;
});

afterAll(() => closeArena(arena, 'hostile', tally, figures));

const post = <T = { id: string }>(target: Pick<Target, 'url' | 'headers'>, path: string, body: unknown) =>
  postJson<T>(target, path, body, tally);

const GZIP_BOMB: FakeScenario = { status: 500, gzip_error_bytes: 300 * 1000 * 1000 };

/** A hostile run of the attacker's (not streamed), followed to its end through the API. */
function hostileRun(scenario: FakeScenario, virtualKey = 'hostile'): Promise<EndedRun> {
  tally.hostileUpstreams++;
  return runToEnd(
    { url: attacker.url, headers: { ...attacker.headers, 'x-gateway-virtual-key': virtualKey } },
    {
      assistant_id: attacker.assistantId,
      thread: { messages: [{ role: 'user', content: `Go\n${fakeDirective(scenario)}` }] },
    },
    tally,
  );
}

/** The run ended as `expected` says; a run that did not is counted lost. */
const expectEnded = (run: EndedRun, expected: Partial<EndedRun> | Record<string, unknown>) =>
  expectRunEnded(run, expected, tally);

/** `work` measured (support.ts, whileMeasured), its peak RSS within `rssBoundMb` of what it was before. */
const whileMeasured = <T>(name: string, work: () => Promise<T>, rssBoundMb = MAX_RSS_GROWTH_MB) =>
  measured(watch, name, work, rssBoundMb);

/** Bytes of a run's rows: the run, its messages, its steps. */
async function storedBytes(runId: string): Promise<number> {
  const sizes = await db.execute({
    sql: `SELECT (SELECT coalesce(length(required_action), 0) + coalesce(length(last_error), 0) FROM runs WHERE id = ?1)
            + (SELECT coalesce(sum(length(content)), 0) FROM messages WHERE run_id = ?1)
            + (SELECT coalesce(sum(length(step_details) + coalesce(length(last_error), 0)), 0) FROM run_steps WHERE run_id = ?1)`,
    args: [runId],
  });
  return Number(defined(sizes.rows[0])[0]);
}

describe('hostile upstreams, one behaviour at a time', () => {
  it('H1 and bad indices: a tool call numbered 4294967294, -1, 1.5, "abc", __proto__ or length fails its run at once', async () => {
    const indices: [unknown, string][] = [
      [4294967294, '4294967294'],
      [-1, '-1'],
      [1.5, '1.5'],
      ['abc', '"abc"'],
      ['__proto__', '"__proto__"'],
      ['length', '"length"'],
    ];
    await whileMeasured('h1_bad_index', async () => {
      const runs = await Promise.all(
        indices.map(([index]) => hostileRun({ tool_calls: [{ name: 'lookup' }], tool_call_index: index })),
      );
      for (const [i, run] of runs.entries()) {
        expectEnded(run, {
          status: 'failed',
          required_action: null,
          last_error: {
            code: 'server_error',
            message: `The upstream sent a tool call with index ${defined(indices[i])[1]}; tool-call indices must be integers from 0 to 127.`,
          },
        });
      }
    });
  });

  it('H2: eight answers at once, of 500 MB and endless, are kept up to GATEWAY_MAX_ANSWER_BYTES and end incomplete', async () => {
    const { result: runs } = await whileMeasured(
      'h2_huge_answers',
      () =>
        Promise.all([
          ...Array.from({ length: 7 }, () => hostileRun({ stream_bytes: 500 * 1000 * 1000, chunk_bytes: 16_384 })),
          hostileRun({ stream_bytes: Number.MAX_SAFE_INTEGER, chunk_bytes: 16_384 }),
        ]),
      CAPPED_RUN_BOUND_MB * 8 + MAX_RSS_GROWTH_MB / 2,
    );
    for (const run of runs) {
      expectEnded(run, {
        status: 'incomplete',
        incomplete_details: { reason: 'max_completion_tokens' },
        last_error: null,
      });
      // The messages of such a run are served bounded too.
      const messages = await fetch(`${attacker.url}/v1/threads/${run.thread_id}/messages?run_id=${run.id}`, {
        headers: attacker.headers,
      });
      const body = await messages.text();
      expect(body.length).toBeLessThan(DEFAULT_CAP + 4096);
      expect(JSON.parse(body).data[0]).toMatchObject({
        status: 'incomplete',
        incomplete_details: { reason: 'max_tokens' },
      });
      expect(JSON.parse(body).data[0].content[0].text.value.length).toBe(DEFAULT_CAP);
    }
    const warnings = gateway
      .stderr()
      .split('\n')
      .filter((line) => line.includes('the upstream answer reached the answer cap'));
    for (const run of runs)
      expect(warnings.some((line) => line.includes(run.id) && line.includes(`"cap_bytes":${DEFAULT_CAP}`))).toBe(true);
  });

  it('H2: 50 MB of tool-call arguments, eight at once: the step fails saying so, nothing waits for outputs', async () => {
    const { result: runs } = await whileMeasured(
      'h2_huge_arguments',
      () =>
        Promise.all(
          Array.from({ length: 8 }, () =>
            hostileRun({
              tool_calls: [{ name: 'lookup' }],
              tool_argument_bytes: 50 * 1000 * 1000,
              argument_chunk_chars: 16_384,
            }),
          ),
        ),
      CUT_CALLS_RUN_BOUND_MB * 8 + MAX_RSS_GROWTH_MB / 2,
    );
    for (const run of runs) {
      expectEnded(run, {
        status: 'incomplete',
        incomplete_details: { reason: 'max_completion_tokens' },
        required_action: null,
      });
      const step = await db.execute({
        sql: "SELECT status, last_error FROM run_steps WHERE run_id = ? AND type = 'tool_calls'",
        args: [run.id],
      });
      expect(defined(step.rows[0])[0]).toBe('failed');
      expect(JSON.parse(String(defined(step.rows[0])[1])).message).toMatch(
        /GATEWAY_MAX_ANSWER_BYTES\), which cut the tool calls short/,
      );
      expect(await storedBytes(run.id)).toBeLessThan(8192);
    }
  });

  it('M1: a 300 KB gzip error body inflating to 300 MB, eight at once, is read up to 8 KiB', async () => {
    const { result: runs } = await whileMeasured('m1_gzip_bomb', () =>
      Promise.all(Array.from({ length: 8 }, () => hostileRun(GZIP_BOMB))),
    );
    for (const run of runs) {
      expectEnded(run, {
        status: 'failed',
        last_error: {
          code: 'server_error',
          message: `The upstream answered HTTP 500: {"error":{"message":"${'a'.repeat(479)}`,
        },
      });
    }
  });

  it('M4: the provider key echoed at every position around the 500-character cut, in error bodies and mid-stream', async () => {
    const offsets = Array.from({ length: KEY.length + 8 }, (_, i) => 500 - KEY.length - 4 + i);
    const { result: runs } = await whileMeasured('m4_key_echo', async () => {
      const ended: EndedRun[] = [];
      for (const offset of offsets) {
        const text = `${'.'.repeat(offset)}${KEY} and more`;
        ended.push(
          ...(await Promise.all([
            hostileRun({ status: 401, error: { error: { message: text } } }),
            hostileRun({ reply: 'a b c', error_after_chunks: 2, stream_error: { error: { message: text } } }),
          ])),
        );
      }
      // A part of the key (as an upstream that cuts it itself would echo it) ending at the cut.
      for (let length = 4; length < KEY.length; length++) {
        ended.push(
          await hostileRun({
            status: 401,
            error: { error: { message: `${'.'.repeat(500 - length)}${KEY.slice(0, length)}-more` } },
          }),
        );
      }
      return ended;
    });
    for (const run of runs) {
      expectEnded(run, { status: 'failed' });
      const message = defined(run.last_error).message;
      for (let length = 4; length <= KEY.length; length++) expect(message).not.toContain(KEY.slice(0, length));
      expect(message.length).toBeLessThan(600);
    }
    expect(gateway.stdout() + gateway.stderr()).not.toContain(KEY.slice(0, 8));
  });

  it('L4: an upstream sending only `: ping` comments fails its run as silent after the idle timeout', async () => {
    const { result: runs } = await whileMeasured('l4_comments_only', async () => {
      const started = Date.now();
      const ended = await Promise.all(
        Array.from({ length: 8 }, () => hostileRun({ flood: ': ping\n\n', chunk_delay_ms: 50 })),
      );
      // Ended by the idle timeout, not by the run's expiry ten minutes later.
      expect(Date.now() - started).toBeLessThan(IDLE_MS + 10_000);
      return ended;
    });
    for (const run of runs) {
      expectEnded(run, {
        status: 'failed',
        last_error: {
          code: 'server_error',
          message: `The upstream went silent for longer than allowed within ${IDLE_MS} ms.`,
        },
      });
    }
  });

  it('L3: usage of -1e9, strings and objects is replaced by the estimate; nothing negative is stored or charged', async () => {
    const usages = [
      { total_tokens: -1e9 },
      { total_tokens: '01e400' },
      { prompt_tokens: '0' },
      { completion_tokens: {} },
      { prompt_tokens: -5, completion_tokens: -5 },
    ];
    const { result: runs } = await whileMeasured('l3_bad_usage', () =>
      Promise.all(usages.map((usage) => hostileRun({ reply: 'a short answer', usage }))),
    );
    for (const run of runs) {
      expectEnded(run, { status: 'completed' });
      for (const value of Object.values(defined(run.usage)))
        expect(Number.isSafeInteger(value) && value >= 0).toBe(true);
      expect(defined(run.usage).total_tokens).toBe(
        defined(run.usage).prompt_tokens + defined(run.usage).completion_tokens,
      );
      expect(gateway.stderr()).toMatch(
        new RegExp(`"message":"the upstream reported invalid usage[^\\n]*"run_id":"${run.id}"`),
      );
    }
    // The token policy's counter holds the sum of the attacker's runs' usage: numbers, nothing negative.
    const charged = await db.execute({
      sql: 'SELECT typeof(used), used FROM rate_limit_counters WHERE key LIKE ?',
      args: [`${tokenPolicyId}/%`],
    });
    const charges = await db.execute({
      sql: "SELECT coalesce(sum(json_extract(usage, '$.total_tokens')), 0), min(coalesce(json_extract(usage, '$.total_tokens'), 0)) FROM runs WHERE workspace_id = (SELECT workspace_id FROM runs WHERE id = ?)",
      args: [defined(runs[0]).id],
    });
    expect(charged.rows.map((row) => row[0])).toEqual([expect.stringMatching(/^(integer|real)$/)]);
    expect(Number(defined(charged.rows[0])[1])).toBe(Number(defined(charges.rows[0])[0]));
    expect(Number(defined(charges.rows[0])[1])).toBeGreaterThanOrEqual(0);
  });

  it('framing: a line of 2 MiB, an event of 2 MiB, 1 MiB of blank lines and a flood of tiny events, eight of each at once', async () => {
    const tiny = 'data: {"choices":[]}\n\n';
    const cases: [FakeScenario, Record<string, unknown>][] = [
      [
        { flood: 'x', flood_bytes: 2 * MIB, chunk_bytes: 65_536 },
        {
          status: 'failed',
          last_error: { message: 'The upstream sent a server-sent event line longer than 1048576 bytes.' },
        },
      ],
      [
        { flood: `data: ${'y'.repeat(1000)}\n`, flood_bytes: 2 * MIB, chunk_bytes: 65_536 },
        {
          status: 'failed',
          last_error: { message: 'The upstream sent a server-sent event larger than 1048576 characters.' },
        },
      ],
      [{ flood: '\n', flood_bytes: MIB, chunk_bytes: 65_536, reply: 'ok' }, { status: 'completed' }],
      [
        { flood: tiny, flood_bytes: tiny.length * Math.floor(MIB / tiny.length), chunk_bytes: 65_472, reply: 'ok' },
        { status: 'completed' },
      ],
    ];
    const { result: runs } = await whileMeasured('framing', () =>
      Promise.all(cases.flatMap(([scenario]) => Array.from({ length: 8 }, () => hostileRun(scenario)))),
    );
    for (const [i, run] of runs.entries()) expectEnded(run, defined(cases[Math.floor(i / 8)])[1]);
  });

  it('L5: a database that refuses to record how a run ended: the run is failed at once, saying so', async () => {
    // The outcome's write completes the message: an update of it, or, for an answer that ended
    // before the message was written, its insert as it ends (resources/runs/execution/outbox.ts).
    await db.execute(`CREATE TRIGGER refuse_hostile_outcome BEFORE UPDATE OF status ON messages
      WHEN NEW.status = 'completed' AND NEW.content LIKE '%REFUSED-BY-TRIGGER%'
      BEGIN SELECT RAISE(ABORT, 'refused by the reliability test'); END`);
    await db.execute(`CREATE TRIGGER refuse_hostile_ended_message BEFORE INSERT ON messages
      WHEN NEW.role = 'assistant' AND NEW.status = 'completed' AND NEW.content LIKE '%REFUSED-BY-TRIGGER%'
      BEGIN SELECT RAISE(ABORT, 'refused by the reliability test'); END`);
    try {
      const { result: runs } = await whileMeasured('l5_settle_fails', () =>
        Promise.all(Array.from({ length: 4 }, () => hostileRun({ reply: 'REFUSED-BY-TRIGGER', chunk_delay_ms: 5 }))),
      );
      for (const run of runs) {
        expectEnded(run, {
          status: 'failed',
          last_error: {
            code: 'server_error',
            message: "The gateway could not record the run's outcome: the write to its database failed.",
          },
        });
      }
    } finally {
      await db.execute('DROP TRIGGER refuse_hostile_outcome');
      await db.execute('DROP TRIGGER refuse_hostile_ended_message');
    }
  });
});

describe('afterwards', () => {
  it('no run is left active, no row half-written, no 5xx answered, and the gateway is alive', async () => {
    expect(
      await waitFor(
        () => activeRunCount(db),
        (n) => n === 0,
        10_000,
      ),
    ).toBe(0);
    const halfWritten = await halfWrittenRows(db);
    tally.rowsHalfWritten += halfWritten.length;
    expect(halfWritten).toEqual([]);
    expect(tally.answered5xx).toBe(0);
    expect(gateway.child.exitCode).toBeNull();
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    // Nothing accumulates from one behaviour to the next beyond what the largest one may hold.
    const finalRssMb = memoryOf(defined(gateway.child.pid)).rssMb;
    figures.final_rss_mb = Math.round(finalRssMb);
    expect(finalRssMb - idleRssMb).toBeLessThan(CAPPED_RUN_BOUND_MB * 8 + MAX_RSS_GROWTH_MB / 2);
  });
});
