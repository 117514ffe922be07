import { defined } from '../support/defined';
import { randomBytes } from 'node:crypto';
import { createClient, LibsqlError, type Client, type InStatement, type TransactionMode } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { DrizzleQueryError } from 'drizzle-orm/errors';
import { BUSY_ATTEMPTS, BusyRetryingClient, DatabaseTimeoutError, databaseRefusal } from '../../src/db/busy-retry';
import { createTestGateway, errorOf } from '../support/gateway';
import { waitFor } from '../support/wait';

/**
 * What a libSQL server (sqld, Turso) refuses, with SQLITE_BUSY or its load shedding's HTTP 429,
 * is sent again, and nothing else. Many writers at once against a real sqld, none lost or applied
 * twice: test/reliability/sqld-writers.test.ts.
 */

let sqld: RunningSqld;
let raw: Client;

beforeAll(async () => {
  sqld = await startSqld();
  raw = createClient({ url: sqld.url });
});
afterAll(async () => {
  raw.close();
  await sqld.stop();
});

describe('BusyRetryingClient', () => {
  it("times each send against the real server: a read as a statement, a write's round trip as a commit on the server path", async () => {
    const timed: string[] = [];
    const client = new BusyRetryingClient(raw, {
      timings: {
        statement: (seconds) => timed.push(`statement ${seconds > 0}`),
        commit: (path, seconds) => timed.push(`commit ${path} ${seconds > 0}`),
      },
    });
    const table = `timed_${randomBytes(4).toString('hex')}`;
    await client.execute(`CREATE TABLE ${table} (n INTEGER)`);
    await client.execute(`SELECT count(*) FROM ${table}`);
    await client.batch([`INSERT INTO ${table} VALUES (1)`, `INSERT INTO ${table} VALUES (2)`], 'write');
    await client.batch([`SELECT n FROM ${table}`], 'read');
    expect(timed).toEqual(['commit server true', 'statement true', 'commit server true', 'statement true']);
  });

  // sqld's refusals come from races inside it, and its load shedding from its load, not on demand:
  // which sends they hit, and whether any, differs from run to run. The policy, on a client whose
  // answers are given.
  it('sends again what was refused as busy or shed (HTTP 429), up to BUSY_ATTEMPTS sends in all, and nothing else', async () => {
    const refusing = (busyTimes: number, error = new LibsqlError('database is locked', 'SQLITE_BUSY')) => {
      let sends = 0;
      const inner: Client = Object.assign(Object.create(raw), {
        execute: async () => {
          sends++;
          if (sends <= busyTimes) throw error;
          return raw.execute('SELECT 1 AS one');
        },
      });
      return { client: new BusyRetryingClient(inner), sends: () => sends };
    };
    const twice = refusing(2);
    expect(defined((await twice.client.execute('SELECT 1')).rows[0]).one).toBe(1);
    expect(twice.sends()).toBe(3);

    const always = refusing(Infinity);
    await expect(always.client.execute('SELECT 1')).rejects.toMatchObject({ code: 'SQLITE_BUSY' });
    expect(always.sends()).toBe(BUSY_ATTEMPTS);

    // The server's load shedding, as @libsql/client reports it: an HTTP 429 under a LibsqlError.
    const shedding = new LibsqlError(
      'Server returned HTTP status 429',
      'SERVER_ERROR',
      undefined,
      undefined,
      Object.assign(new Error('Server returned HTTP status 429'), { status: 429 }),
    );
    const shed = refusing(3, shedding);
    expect(defined((await shed.client.execute('SELECT 1')).rows[0]).one).toBe(1);
    expect(shed.sends()).toBe(4);
    const failing = refusing(
      Infinity,
      new LibsqlError(
        'Server returned HTTP status 500',
        'SERVER_ERROR',
        undefined,
        undefined,
        Object.assign(new Error('Server returned HTTP status 500'), { status: 500 }),
      ),
    );
    await expect(failing.client.execute('SELECT 1')).rejects.toMatchObject({ code: 'SERVER_ERROR' });
    expect(failing.sends()).toBe(1);

    const constraint = refusing(Infinity, new LibsqlError('UNIQUE constraint failed', 'SQLITE_CONSTRAINT'));
    await expect(constraint.client.execute('SELECT 1')).rejects.toMatchObject({ code: 'SQLITE_CONSTRAINT' });
    expect(constraint.sends()).toBe(1);

    // Past the retries, what reaches the app is the refusal (under Drizzle's wrapping, as a query
    // sees it): the client is told to come back (503 database_busy), not that the gateway broke.
    const shedAlways = refusing(Infinity, shedding);
    const shed429 = await refusalOf(shedAlways.client.execute('SELECT 1'));
    expect(shedAlways.sends()).toBe(BUSY_ATTEMPTS);
    expect(databaseRefusal(new DrizzleQueryError('INSERT INTO runs ...', [], shed429))).toBe('busy');
    const busy = await refusalOf(always.client.execute('SELECT 1'));
    expect(databaseRefusal(new DrizzleQueryError('INSERT INTO runs ...', [], busy))).toBe('busy');
    // Other failures stay server errors, and a 429 that is not the database's (a provider's) is not it.
    const failure = await refusalOf(failing.client.execute('SELECT 1'));
    expect(databaseRefusal(new DrizzleQueryError('SELECT 1', [], failure))).toBeNull();
    expect(
      databaseRefusal(
        Object.assign(new Error('upstream answered 429'), { cause: Object.assign(new Error('429'), { status: 429 }) }),
      ),
    ).toBeNull();
  });
});

describe('BusyRetryingClient, writes taking turns', () => {
  /**
   * `raw`, its sends counted (in flight, at most, in all, their first arguments in the order sent,
   * and those of sends made once `settled` said their caller had its answer), each answered
   * `delayMs` late or held while `hold` is set.
   */
  const counted = (delayMs = 0, settled: (firstArg: unknown) => boolean = () => false) => {
    const seen = { inFlight: 0, most: 0, sent: 0, firstArgs: [] as unknown[], sentAfterAnswer: [] as unknown[] };
    let hold: Promise<void> | null = null;
    const around = async <T>(stmt: InStatement, send: () => Promise<T>): Promise<T> => {
      seen.sent++;
      const firstArg = typeof stmt === 'object' && Array.isArray(stmt.args) ? stmt.args[0] : undefined;
      seen.firstArgs.push(firstArg);
      if (settled(firstArg)) seen.sentAfterAnswer.push(firstArg);
      seen.most = Math.max(seen.most, ++seen.inFlight);
      try {
        if (hold) await hold;
        if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
        return await send();
      } finally {
        seen.inFlight--;
      }
    };
    const inner: Client = Object.assign(Object.create(raw), {
      execute: (stmt: InStatement) => around(stmt, () => raw.execute(stmt)),
      batch: (stmts: InStatement[], mode?: TransactionMode) => around(defined(stmts[0]), () => raw.batch(stmts, mode)),
    });
    return {
      inner,
      seen,
      hold: (until: Promise<void> | null) => {
        hold = until;
      },
    };
  };

  beforeAll(() => raw.execute('CREATE TABLE IF NOT EXISTS turns (id INTEGER PRIMARY KEY, writer INTEGER NOT NULL)'));

  it('sends at most `writers` writes at once, the rest in order as turns end, and every one of them', async () => {
    const { inner, seen } = counted(5);
    const client = new BusyRetryingClient(inner, { writers: 3 });
    const writers = Array.from({ length: 24 }, (_, writer) => writer + 1000);
    await Promise.all(
      writers.map((writer) =>
        writer % 2
          ? client.batch([{ sql: 'INSERT INTO turns (writer) VALUES (?)', args: [writer] }], 'write')
          : client.execute({ sql: 'INSERT INTO turns (writer) VALUES (?)', args: [writer] }),
      ),
    );
    expect(seen.most).toBe(3);
    expect(seen.firstArgs).toEqual(writers);
    const rows = await raw.execute('SELECT writer FROM turns WHERE writer >= 1000 ORDER BY writer');
    expect(rows.rows.map((row) => row.writer)).toEqual(writers);
  });

  it('lets reads by while every turn is held', async () => {
    const { inner, seen, hold } = counted();
    const client = new BusyRetryingClient(inner, { writers: 2 });
    let unblock!: () => void;
    hold(new Promise<void>((resolve) => (unblock = resolve)));
    const writes = [
      client.batch([{ sql: 'SELECT 1' }], 'write'),
      client.execute('UPDATE turns SET writer = writer WHERE 0'),
      client.execute('DELETE FROM turns WHERE 0'),
    ];
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(seen.sent).toBe(2);
    // Reads take no turn: sent at once, beside the two writes held.
    const reads = [client.execute('SELECT 1 AS one'), client.batch([{ sql: 'SELECT 2 AS two' }], 'read')];
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(seen.sent).toBe(4);
    expect(seen.most).toBe(4);
    hold(null);
    unblock();
    await Promise.all([...writes, ...reads]);
    expect(seen.sent).toBe(5);
  });

  it('never sends a write whose deadline passed while it waited for its turn', async () => {
    // One turn, its first send held past the deadline (300 ms) of all four. Each deadline counts
    // from its own ask, and on a loaded machine the asks made one after the other can be
    // milliseconds apart: one behind may then still have time when the turn is given up, and be
    // sent (and time out in flight). What never happens is a send once its caller had its timeout.
    const answered = new Set<unknown>();
    const { inner, seen, hold } = counted(0, (writer) => answered.has(writer));
    const client = new BusyRetryingClient(inner, { writers: 1, answerMs: 300 });
    let answer!: () => void;
    hold(new Promise<void>((resolve) => (answer = resolve)));
    const insert = (writer: number) => client.execute({ sql: 'INSERT INTO turns (writer) VALUES (?)', args: [writer] });
    const writers = [-1, -2, -3, -4];
    const outcomes = writers.map((writer) =>
      insert(writer).then(
        () => 'answered',
        (error: unknown) => {
          answered.add(writer);
          return error;
        },
      ),
    );
    for (const outcome of await Promise.all(outcomes)) expect(outcome).toBeInstanceOf(DatabaseTimeoutError);
    expect(seen.firstArgs[0]).toBe(-1);
    expect(seen.sentAfterAnswer).toEqual([]);
    const sent = [...seen.firstArgs];

    // What was sent is applied once answered; what timed out in line never is.
    hold(null);
    answer();
    const rowsOf = async (writer: number) =>
      Number(
        defined(
          (await raw.execute({ sql: 'SELECT count(*) AS n FROM turns WHERE writer = ?', args: [writer] })).rows[0],
        ).n,
      );
    for (const writer of sent) {
      expect(
        await waitFor(
          () => rowsOf(Number(writer)),
          (n) => n === 1,
        ),
      ).toBe(1);
    }
    // The turn given up goes on: a write asked for now is sent and answered...
    await insert(-5);
    expect(seen.firstArgs).toEqual([...sent, -5]);
    // ...and none of those left in line was sent meanwhile.
    for (const writer of writers.filter((writer) => !sent.includes(writer))) expect(await rowsOf(writer)).toBe(0);
    expect(seen.sentAfterAnswer).toEqual([]);
  });

  it('gives up the turns of sends left unanswered past their deadline, so that later writes go out', async () => {
    const { inner, seen, hold } = counted();
    // The write after the hung ones must be answered within the same deadline, by a server that a
    // loaded CI machine's other tests share: 200 ms failed once in a whole suite's run.
    const client = new BusyRetryingClient(inner, { writers: 2, answerMs: 2_000 });
    hold(new Promise<void>(() => undefined)); // never answered
    const hung = [
      client.execute('UPDATE turns SET writer = writer WHERE 0'),
      client.execute('UPDATE turns SET writer = writer WHERE 0'),
    ];
    await Promise.all(hung.map((sending) => expect(sending).rejects.toBeInstanceOf(DatabaseTimeoutError)));
    hold(null);
    // Both sends are still in flight at the server, but no longer hold a turn.
    expect(seen.inFlight).toBe(2);
    expect(
      defined((await client.execute('INSERT INTO turns (writer) VALUES (-5) RETURNING writer')).rows[0]).writer,
    ).toBe(-5);
    expect(seen.sent).toBe(3);
  });
});

describe('a gateway whose libSQL server stops answering', () => {
  it('answers 503 database_timeout with Retry-After once GATEWAY_DATABASE_TIMEOUT_MS has passed, instead of waiting with it', async () => {
    // A real sqld, frozen (SIGSTOP): its connections stay open, nothing is answered, as with a
    // server that hangs. sqld under heavy load left requests so for five minutes.
    // A deadline that a loaded CI machine's sqld meets while it answers (the tenant's set-up below),
    // and that the frozen one cannot.
    const deadlineMs = 2_000;
    const server = await startSqld();
    const gateway = await createTestGateway({
      env: {
        LIBSQL_URL: server.url,
        GATEWAY_ENCRYPTION_KEY: randomBytes(32).toString('base64'),
        GATEWAY_DATABASE_TIMEOUT_MS: String(deadlineMs),
      },
    });
    try {
      const tenant = await gateway.tenant();
      const path = '/v1/policies/rate-limits';
      expect((await gateway.request(path, { key: tenant.workspaceKey })).status).toBe(200);
      const policy = {
        name: 'frozen',
        conditions: [{ key: 'model', value: '*' }],
        group_by: [{ key: 'model' }],
        type: 'requests',
        unit: 'rpm',
        value: 1,
      };

      process.kill(server.pid, 'SIGSTOP');
      let response: Response;
      const started = performance.now();
      try {
        response = await gateway.request(path, { key: tenant.workspaceKey, body: policy });
      } finally {
        process.kill(server.pid, 'SIGCONT');
      }
      const waited = performance.now() - started;
      // The body first: were this not the timeout's answer, the failure shows what it was.
      expect(await errorOf(response)).toMatchObject({
        status: 503,
        type: 'server_error',
        code: 'database_timeout',
        param: null,
      });
      expect(response.headers.get('retry-after')).toBe('1');
      // At least the deadline, and not many of them: the request failed at its first unanswered send.
      expect(waited).toBeGreaterThanOrEqual(deadlineMs);
      expect(waited).toBeLessThan(5 * deadlineMs);
      const logged = gateway.logs
        .map((line) => JSON.parse(line))
        .find((entry) => entry.level === 'error' && entry.message === 'request failed');
      expect(JSON.stringify(logged.error)).toContain('DatabaseTimeoutError');

      // Answering again, the server serves the gateway again.
      expect((await gateway.request(path, { key: tenant.workspaceKey })).status).toBe(200);
    } finally {
      await gateway.close();
      await server.stop();
    }
  }, 60_000);
});

async function refusalOf(sending: Promise<unknown>): Promise<Error> {
  const outcome = await sending.then(
    () => null,
    (error: unknown) => error,
  );
  if (!(outcome instanceof Error)) throw new Error('expected the send to be refused');
  return outcome;
}
