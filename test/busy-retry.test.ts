import { createClient, LibsqlError, type Client } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../scripts/sqld';
import { BUSY_ATTEMPTS, BusyRetryingClient } from '../src/db/busy-retry';

/**
 * Writes to a libSQL server (sqld, as Turso runs it) from many connections at once: those it
 * refuses, with SQLITE_BUSY or its load shedding's HTTP 429, are sent again, and none is lost or
 * applied twice.
 */

let sqld: RunningSqld;
let raw: Client;
let client: BusyRetryingClient;

beforeAll(async () => {
  // With its load shedding, as Turso runs it: it answers HTTP 429 to much of what follows.
  sqld = await startSqld();
  raw = createClient({ url: sqld.url, concurrency: 1_000 });
  client = new BusyRetryingClient(raw);
  await client.execute('CREATE TABLE t (id INTEGER PRIMARY KEY, writer INTEGER NOT NULL, v TEXT NOT NULL)');
});
afterAll(async () => {
  client.close();
  await sqld.stop();
});

describe('BusyRetryingClient', () => {
  it('commits every batch of 16 writers at once, each exactly once, through its refusals', async () => {
    // At 32 or 64 writers this sqld stalls now and then (a run in four here, before the 429s were
    // sent again as after), every write waiting on SQLite's lock for tens of seconds.
    const WRITERS = 16;
    const BATCHES = 80;
    await Promise.all(
      Array.from({ length: WRITERS }, async (_, writer) => {
        for (let i = 0; i < BATCHES; i++) {
          await client.batch(
            [
              { sql: 'INSERT INTO t (writer, v) VALUES (?, ?)', args: [writer, 'a'] },
              { sql: 'INSERT INTO t (writer, v) VALUES (?, ?)', args: [writer, 'b'] },
              { sql: "UPDATE t SET v = 'c' WHERE id = 1" },
            ],
            'write',
          );
        }
      }),
    );
    const counts = await client.execute('SELECT writer, count(*) AS n FROM t GROUP BY writer');
    expect(counts.rows).toHaveLength(WRITERS);
    expect(counts.rows.every((row) => row.n === 2 * BATCHES)).toBe(true);
  });

  // sqld's refusals come from races inside it, and its load shedding from its load, not on demand:
  // which sends they hit, and whether any, differs from run to run. The policy itself, on a client
  // whose answers are given.
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
  });
});
