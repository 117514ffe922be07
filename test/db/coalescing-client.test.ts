import { createClient, type Client, type InArgs, type InStatement, type TransactionMode } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { CoalescingClient } from '../../src/db/coalescing-client';

/**
 * Reads issued together reach a libSQL server as one batch (one round trip, one snapshot); what
 * each caller gets is what it would have got alone. Against a real sqld; the requests it receives
 * are counted by the client's own calls to the one underneath.
 */

let sqld: RunningSqld;
let raw: Client;

beforeAll(async () => {
  sqld = await startSqld();
  raw = createClient({ url: sqld.url });
  await raw.batch([
    'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)',
    "INSERT INTO items VALUES (1, 'a'), (2, 'b')",
  ]);
});
afterAll(async () => {
  raw.close();
  await sqld.stop();
});

/** The server's client, each request to it written down: `execute` as one statement, `batch` as its statements. */
function recorded() {
  const requests: string[][] = [];
  const inner: Client = Object.assign(Object.create(raw), {
    execute: (stmt: InStatement) => {
      requests.push([typeof stmt === 'string' ? stmt : stmt.sql]);
      return raw.execute(stmt);
    },
    batch: (stmts: Array<InStatement | [string, InArgs?]>, mode?: TransactionMode) => {
      requests.push(stmts.map((stmt) => (typeof stmt === 'string' ? stmt : Array.isArray(stmt) ? stmt[0] : stmt.sql)));
      return raw.batch(stmts, mode);
    },
  });
  return { client: new CoalescingClient(inner), requests };
}

describe('CoalescingClient', () => {
  it('sends reads issued side by side as one batch, each caller getting its own rows', async () => {
    const { client, requests } = recorded();
    const [one, two, both] = await Promise.all([
      client.execute({ sql: 'SELECT name FROM items WHERE id = ?', args: [1] }),
      // An async caller's own awaits before its read still fall in the window.
      (async () => {
        await Promise.resolve();
        await Promise.resolve();
        return client.execute('SELECT name FROM items WHERE id = ?', [2]);
      })(),
      client.execute('WITH x AS (SELECT count(*) AS n FROM items) SELECT n FROM x'),
    ]);
    expect(one.rows.map((row) => row.name)).toEqual(['a']);
    expect(two.rows.map((row) => row.name)).toEqual(['b']);
    expect(both.rows.map((row) => row.n)).toEqual([2]);
    expect(requests).toHaveLength(1);
    expect(requests[0]).toHaveLength(3);
  });

  it('sends a batch of reads with the reads beside it, its results kept together; a batch that writes as it is', async () => {
    const { client, requests } = recorded();
    const [page, one] = await Promise.all([
      client.batch(
        ['SELECT name FROM items ORDER BY id', ['SELECT count(*) AS n FROM items WHERE id > ?', [0]]],
        'read',
      ),
      client.execute('SELECT name FROM items WHERE id = 2'),
    ]);
    expect(page.map((result) => result.rows.map((row) => ({ ...row })))).toEqual([
      [{ name: 'a' }, { name: 'b' }],
      [{ n: 2 }],
    ]);
    expect(one.rows.map((row) => row.name)).toEqual(['b']);
    expect(requests).toHaveLength(1);
    expect(requests[0]).toHaveLength(3);

    const [written] = await client.batch(
      [{ sql: 'INSERT INTO items (name) VALUES (?) RETURNING id', args: ['c'] }, 'SELECT count(*) FROM items'],
      'write',
    );
    expect(written?.rows).toHaveLength(1);
    await client.execute("DELETE FROM items WHERE name = 'c'");
    expect(requests.map((request) => request.length)).toEqual([3, 2, 1]);
  });

  it('gives a batch of reads its own error when it fails beside others, and the others their rows', async () => {
    const { client, requests } = recorded();
    const answers = await Promise.allSettled([
      client.batch(['SELECT name FROM items WHERE id = 1', 'SELECT missing FROM items']),
      client.execute('SELECT name FROM items WHERE id = 2'),
    ]);
    expect(answers[0]).toMatchObject({
      status: 'rejected',
      reason: { message: expect.stringMatching(/no such column/) },
    });
    expect(answers[1]).toMatchObject({ status: 'fulfilled', value: { rows: [{ name: 'b' }] } });
    // The window's batch, then the batch of reads again as one, and the read alone.
    expect(requests.map((request) => request.length).sort()).toEqual([1, 2, 3]);
  });

  it('sends a lone read, and every write, as it is', async () => {
    const { client, requests } = recorded();
    expect((await client.execute('SELECT count(*) AS n FROM items')).rows[0]?.n).toBe(2);
    const [inserted, read] = await Promise.all([
      client.execute({ sql: 'INSERT INTO items (name) VALUES (?) RETURNING id', args: ['c'] }),
      client.execute('SELECT count(*) AS n FROM items'),
    ]);
    expect(inserted.rows).toHaveLength(1);
    expect(read.rows).toHaveLength(1);
    await client.execute({ sql: 'DELETE FROM items WHERE name = ?', args: ['c'] });
    // The lone read, the insert, the read that had no companion, the delete: one request each.
    expect(requests.map((request) => request.length)).toEqual([1, 1, 1, 1]);
  });

  it("gives each read its own answer when one of a batch fails: the bad one's error, the others' rows", async () => {
    const { client, requests } = recorded();
    const answers = await Promise.allSettled([
      client.execute('SELECT name FROM items WHERE id = 1'),
      client.execute('SELECT missing FROM items'),
      client.execute('SELECT name FROM items WHERE id = 2'),
    ]);
    expect(answers[0]).toMatchObject({ status: 'fulfilled', value: { rows: [{ name: 'a' }] } });
    expect(answers[1]).toMatchObject({
      status: 'rejected',
      reason: { message: expect.stringMatching(/no such column/) },
    });
    expect(answers[2]).toMatchObject({ status: 'fulfilled', value: { rows: [{ name: 'b' }] } });
    // The batch, then each read on its own.
    expect(requests.map((request) => request.length)).toEqual([3, 1, 1, 1]);
  });

  it('reads one snapshot in a batch: a write committed meanwhile is in all of its reads or none', async () => {
    const { client } = recorded();
    const writer = createClient({ url: sqld.url });
    try {
      for (let round = 0; round < 20; round++) {
        const write = writer.batch(
          [
            { sql: 'INSERT INTO items (id, name) VALUES (?, ?)', args: [100 + round, 'x'] },
            { sql: 'INSERT INTO items (id, name) VALUES (?, ?)', args: [200 + round, 'y'] },
          ],
          'write',
        );
        const [xs, ys] = await Promise.all([
          client.execute("SELECT count(*) AS n FROM items WHERE name = 'x'"),
          client.execute("SELECT count(*) AS n FROM items WHERE name = 'y'"),
        ]);
        await write;
        expect(xs.rows[0]?.n).toBe(ys.rows[0]?.n);
      }
    } finally {
      await writer.execute("DELETE FROM items WHERE name IN ('x', 'y')");
      writer.close();
    }
  });
});
