import { createClient, LibsqlError, type Client } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../scripts/sqld';
import { DrizzleQueryError } from 'drizzle-orm/errors';
import { BUSY_ATTEMPTS, BusyRetryingClient, isDatabaseBusy } from '../src/db/busy-retry';

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
    expect((await twice.client.execute('SELECT 1')).rows[0]!.one).toBe(1);
    expect(twice.sends()).toBe(3);

    const always = refusing(Infinity);
    await expect(always.client.execute('SELECT 1')).rejects.toMatchObject({ code: 'SQLITE_BUSY' });
    expect(always.sends()).toBe(BUSY_ATTEMPTS);

    // The server's load shedding, as @libsql/client reports it: an HTTP 429 under a LibsqlError.
    const shedding = new LibsqlError('Server returned HTTP status 429', 'SERVER_ERROR', undefined, undefined, Object.assign(new Error('Server returned HTTP status 429'), { status: 429 }));
    const shed = refusing(3, shedding);
    expect((await shed.client.execute('SELECT 1')).rows[0]!.one).toBe(1);
    expect(shed.sends()).toBe(4);
    const failing = refusing(Infinity, new LibsqlError('Server returned HTTP status 500', 'SERVER_ERROR', undefined, undefined, Object.assign(new Error('Server returned HTTP status 500'), { status: 500 })));
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
    expect(isDatabaseBusy(new DrizzleQueryError('INSERT INTO runs ...', [], shed429))).toBe(true);
    const busy = await refusalOf(always.client.execute('SELECT 1'));
    expect(isDatabaseBusy(new DrizzleQueryError('INSERT INTO runs ...', [], busy))).toBe(true);
    // Other failures stay server errors, and a 429 that is not the database's (a provider's) is not it.
    const failure = await refusalOf(failing.client.execute('SELECT 1'));
    expect(isDatabaseBusy(new DrizzleQueryError('SELECT 1', [], failure))).toBe(false);
    expect(isDatabaseBusy(Object.assign(new Error('upstream answered 429'), { cause: Object.assign(new Error('429'), { status: 429 }) }))).toBe(false);
  });
});

async function refusalOf(sending: Promise<unknown>): Promise<Error> {
  const outcome = await sending.then(
    () => null,
    (error: unknown) => error,
  );
  if (!(outcome instanceof Error)) throw new Error('expected the send to be refused');
  return outcome;
}
