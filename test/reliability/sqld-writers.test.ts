import { createClient } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { BusyRetryingClient } from '../../src/db/busy-retry';

/**
 * Writes to a libSQL server (sqld, as Turso runs it, its load shedding on) from many connections
 * at once: those it refuses, with SQLITE_BUSY or HTTP 429, are sent again (db/busy-retry.ts), and
 * none is lost or applied twice.
 *
 * Here rather than in npm test, which it failed now and then: at 16 to 64 writers this sqld
 * sometimes stops answering while it spins on a core, for minutes (about one run in four at 64,
 * once under CI's load at 16; with or without its load shedding; before 429s were sent again as
 * after). Not understood yet: while it stalls, many of its threads stay runnable (47 to 156 seen
 * under bench:worker), and this test fails at its first send left unanswered for the client's
 * deadline (DatabaseTimeoutError after 30 s; before the deadline, at the test's limit).
 */

let sqld: RunningSqld;
let client: BusyRetryingClient;

beforeAll(async () => {
  sqld = await startSqld();
  client = new BusyRetryingClient(createClient({ url: sqld.url, concurrency: 1_000 }));
  await client.execute('CREATE TABLE t (id INTEGER PRIMARY KEY, writer INTEGER NOT NULL, v TEXT NOT NULL)');
});
afterAll(async () => {
  client.close();
  await sqld.stop();
});

describe('BusyRetryingClient against sqld', () => {
  it('commits every batch of 64 writers at once, each exactly once, through its refusals', async () => {
    const WRITERS = 64;
    const BATCHES = 20;
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
  }, 180_000);
});
