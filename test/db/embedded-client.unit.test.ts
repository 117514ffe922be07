import { defined } from '../support/defined';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type Client, type ResultSet } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PartsClient } from '../../src/db/client';
import { TextParts } from '../../src/lib/text';
import { openEmbeddedClient, openEmbeddedClients } from '../../src/db/embedded-client';

/**
 * The embedded database client against @libsql/client on the same file: same answers, and the
 * group commit keeps each caller's batch atomic and isolated from the others' failures. The
 * group commits on a thread of its own: while it waits (here, for a lock another connection
 * holds), this thread goes on reading, and the immediate client's writes take their turn after it.
 */

let dir: string;
let ours: Client & PartsClient;
let reference: Client;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'embedded-client-'));
  const path = join(dir, 'test.db');
  ours = openEmbeddedClient(path, { timeoutMs: 5000 });
  await ours.execute('PRAGMA journal_mode = WAL');
  await ours.batch([
    'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, price REAL, data TEXT, flag INTEGER)',
    'CREATE TABLE other (id INTEGER PRIMARY KEY, name TEXT)',
  ]);
  reference = createClient({ url: `file:${path}` });
});
afterAll(() => {
  ours.close();
  reference.close();
  rmSync(dir, { recursive: true, force: true });
});

const plain = (rows: ArrayLike<unknown>[]) =>
  rows.map((row) => ({ byIndex: Array.prototype.slice.call(row), byName: { ...row } }));

describe('answers like @libsql/client', () => {
  it('returns the same rows, by index and by name, for the same queries', async () => {
    await ours.execute({
      sql: 'INSERT INTO items (name, price, data, flag) VALUES (?, ?, ?, ?)',
      args: ['a', 1.5, '{"x":1}', true],
    });
    await ours.execute({
      sql: 'INSERT INTO items (name, price, data, flag) VALUES (:name, :price, NULL, 0)',
      args: { name: 'b', price: 2 },
    });
    await ours.execute({ sql: 'INSERT INTO other (id, name) VALUES (1, ?)', args: ['b'] });
    for (const [sql, args] of [
      ['SELECT * FROM items ORDER BY id', []],
      ['SELECT id, name FROM items WHERE price > ?', [1]],
      ['SELECT items.id, other.id, items.name FROM items JOIN other ON other.name = items.name', []],
      ['SELECT count(*) AS n, sum(price) AS total FROM items', []],
      ['SELECT * FROM items WHERE id = ?', [999]],
      // One row at most is read with the binding's get(): by `LIMIT 1`, or `LIMIT ?` bound to 1.
      ['SELECT id, name FROM items ORDER BY id LIMIT 1', []],
      ['SELECT id, name FROM items ORDER BY id LIMIT ?', [1]],
      ['SELECT id, name FROM items ORDER BY id LIMIT ?', [2]],
      ['SELECT id, name FROM items WHERE id = ? LIMIT ?', [999, 1]],
      ['SELECT id, name FROM items WHERE price >= ? ORDER BY id limit ? ', [1, 1]],
      ['SELECT id FROM items WHERE id IN (SELECT id FROM items LIMIT 1) OR price = ?', [1]],
    ] as const) {
      const [a, b] = await Promise.all([
        ours.execute({ sql, args: [...args] }),
        reference.execute({ sql, args: [...args] }),
      ]);
      expect(a.columns).toEqual(b.columns);
      expect(plain(a.rows)).toEqual(plain(b.rows));
      expect(a.rows.map((row) => row.length)).toEqual(b.rows.map((row) => row.length));
    }
  });

  it('answers a duplicated column name by its first occurrence, and every value by index', async () => {
    const { rows } = await ours.execute('SELECT items.id, other.id FROM items JOIN other ON other.name = items.name');
    expect(Object.keys(defined(rows[0]))).toEqual(['id']);
    expect(defined(rows[0]).id).toBe(defined(rows[0])[0]);
    expect(defined(rows[0])[1]).toBe(1);
  });

  it('reports rowsAffected and lastInsertRowid of writes', async () => {
    const insert = await ours.execute({ sql: 'INSERT INTO items (name) VALUES (?)', args: ['c'] });
    expect(insert.rowsAffected).toBe(1);
    expect(typeof insert.lastInsertRowid).toBe('bigint');
    const update = await ours.execute({ sql: 'UPDATE items SET price = 9 WHERE price IS NULL', args: [] });
    expect(update.rowsAffected).toBe(1);
  });

  it('returns rows from INSERT … RETURNING, which is a write', async () => {
    const { rows } = await ours.execute({ sql: 'INSERT INTO items (name) VALUES (?) RETURNING id, name', args: ['d'] });
    expect(defined(rows[0]).name).toBe('d');
    const seen = await reference.execute({ sql: 'SELECT name FROM items WHERE name = ?', args: ['d'] });
    expect(seen.rows).toHaveLength(1);
  });

  it('reuses a prepared statement with new arguments', async () => {
    for (const name of ['a', 'b', 'c']) {
      const { rows } = await ours.execute({ sql: 'SELECT name FROM items WHERE name = ?', args: [name] });
      expect(defined(rows[0]).name).toBe(name);
    }
  });
});

describe('batches and the group commit', () => {
  it('keeps a batch atomic: a failing statement undoes the statements before it', async () => {
    await expect(
      ours.batch([
        { sql: 'INSERT INTO other (name) VALUES (?)', args: ['kept?'] },
        { sql: 'INSERT INTO items (name) VALUES (?)', args: ['a'] }, // duplicate name
      ]),
    ).rejects.toThrow(/UNIQUE/);
    const { rows } = await reference.execute("SELECT count(*) AS n FROM other WHERE name = 'kept?'");
    expect(defined(rows[0]).n).toBe(0);
  });

  it('commits concurrent batches together, failing only the one that fails', async () => {
    const outcomes = await Promise.allSettled([
      ours.batch([{ sql: 'INSERT INTO other (name) VALUES (?)', args: ['g1'] }]),
      ours.batch([
        { sql: 'INSERT INTO other (name) VALUES (?)', args: ['g2'] },
        { sql: 'INSERT INTO items (name) VALUES (?)', args: ['b'] }, // duplicate: this batch fails
      ]),
      ours.execute({ sql: 'INSERT INTO other (name) VALUES (?)', args: ['g3'] }),
      ours.batch([{ sql: 'INSERT INTO other (name) VALUES (?) RETURNING name', args: ['g4'] }]),
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    const fourth = outcomes[3] as PromiseFulfilledResult<ResultSet[]>;
    expect(defined(defined(fourth.value[0]).rows[0]).name).toBe('g4');
    const { rows } = await reference.execute("SELECT name FROM other WHERE name LIKE 'g%' ORDER BY name");
    expect(rows.map((row) => row.name)).toEqual(['g1', 'g3', 'g4']);
  });

  it('answers writes only once they are committed, visible to another connection', async () => {
    await ours.execute({ sql: 'INSERT INTO other (name) VALUES (?)', args: ['visible'] });
    const { rows } = await reference.execute("SELECT count(*) AS n FROM other WHERE name = 'visible'");
    expect(defined(rows[0]).n).toBe(1);
  });

  it('reads within a batch of reads see one snapshot and write nothing', async () => {
    const [count, names] = await ours.batch([
      'SELECT count(*) AS n FROM items',
      'SELECT name FROM items ORDER BY name',
    ]);
    expect(defined(defined(count).rows[0]).n).toBe(defined(names).rows.length);
  });

  it("answers a failed write with SQLite's error: its message and code", async () => {
    await expect(ours.execute({ sql: 'INSERT INTO items (name) VALUES (?)', args: ['a'] })).rejects.toMatchObject({
      message: expect.stringMatching(/UNIQUE constraint failed: items\.name/),
      code: 'SQLITE_CONSTRAINT_UNIQUE',
    });
  });

  it('stores blobs', async () => {
    await ours.execute({ sql: 'INSERT INTO other (name) VALUES (?)', args: [new Uint8Array([1, 2, 3]).buffer] });
    const { rows } = await reference.execute("SELECT hex(name) AS hex FROM other WHERE typeof(name) = 'blob'");
    expect(rows.map((row) => row.hex)).toEqual(['010203']);
  });

  it('refuses interactive transactions, pointing to batches', async () => {
    await expect(ours.transaction('write')).rejects.toThrow(/batch/);
  });
});

describe('text in parts (TextParts)', () => {
  // Long enough to go to the writer thread as parts; a surrogate pair cut between two parts.
  const parts = ['caf\u00e9 \ud83d', '\ude00 ', 'y'.repeat(70_000), '\u4e2d\u6587', '\ud83d', '\ude00'];
  const stored = async (name: string) =>
    (await reference.execute({ sql: 'SELECT data FROM items WHERE name = ?', args: [name] })).rows.map(
      (row) => row.data,
    );

  it('stores the joined text, through the writer thread and at once on this one, long or short', async () => {
    const { immediateClient, client } = openEmbeddedClients(join(dir, 'test.db'), { timeoutMs: 5000 });
    try {
      const insert = (name: string, value: string[]) => ({
        sql: 'INSERT INTO items (name, data) VALUES (?, ?)',
        args: [name, new TextParts(value)],
      });
      await client.batchWithParts([insert('parts-group', parts), insert('parts-short', ['a', '\ud83d', '\ude00'])]);
      await immediateClient.batchWithParts([insert('parts-immediate', parts)]);
      for (const name of ['parts-group', 'parts-immediate']) expect(await stored(name)).toEqual([parts.join('')]);
      expect(await stored('parts-short')).toEqual(['a\ud83d\ude00']);
    } finally {
      client.close();
      immediateClient.close();
    }
  });

  it('rolls back a failing write alone, its parts with it', async () => {
    const insert = (name: string) => ({
      sql: 'INSERT INTO items (name, data) VALUES (?, ?)',
      args: [name, new TextParts(parts)],
    });
    const outcomes = await Promise.allSettled([
      ours.batchWithParts([insert('parts-kept')]),
      ours.batchWithParts([insert('parts-lost'), insert('parts-kept')]), // duplicate name: this batch fails
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected']);
    expect(await stored('parts-kept')).toEqual([parts.join('')]);
    expect(await stored('parts-lost')).toEqual([]);
  });
});

describe('the writer thread', () => {
  let files = 0;

  /** The two clients on a fresh file, and a holder of its write lock, as another process would hold it. */
  async function open() {
    const path = join(dir, `writer-${files++}.db`);
    const clients = openEmbeddedClients(path, { timeoutMs: 5000 });
    await clients.client.execute('PRAGMA journal_mode = WAL');
    await clients.client.execute('CREATE TABLE log (id INTEGER PRIMARY KEY, what TEXT NOT NULL)');
    const holder = createClient({ url: `file:${path}` });
    const lock = await holder.transaction('write');
    await lock.execute("INSERT INTO log (what) VALUES ('holder')");
    const release = async () => {
      if (lock.closed) return;
      await lock.commit();
    };
    const close = async () => {
      await release();
      holder.close();
      clients.client.close();
      clients.immediateClient.close();
    };
    /** What the file holds besides the holder's row, read by another connection. */
    const logged = async () => {
      const { rows } = await holder.execute("SELECT what FROM log WHERE what != 'holder' ORDER BY id");
      return rows.map((row) => row.what);
    };
    return { ...clients, release, close, logged };
  }

  /** A few turns of the event loop, enough for a group to reach the writer thread. */
  const turns = () => new Promise((resolve) => setTimeout(resolve, 20));

  it('commits off this thread: while a group waits for the lock, this thread reads', async () => {
    const { client, release, close, logged } = await open();
    try {
      const order: string[] = [];
      const write = client.execute("INSERT INTO log (what) VALUES ('group')").then(() => order.push('group committed'));
      await turns();
      const { rows } = await client.execute("SELECT count(*) AS n FROM log WHERE what = 'group'");
      order.push('read');
      expect(defined(rows[0]).n).toBe(0);
      await release();
      await write;
      expect(order).toEqual(['read', 'group committed']);
      expect(await logged()).toEqual(['group']);
    } finally {
      await close();
    }
  });

  it('takes turns with the immediate client: its writes wait for the group being committed and go before the next', async () => {
    const { client, immediateClient, release, close, logged } = await open();
    try {
      const first = client.execute("INSERT INTO log (what) VALUES ('first group')");
      await turns();
      // A group is on the writer thread, waiting for the lock: the immediate write waits for it
      // (instead of waiting for the lock on this thread), and the next group waits for both.
      const immediate = immediateClient.execute("INSERT INTO log (what) VALUES ('immediate')");
      const second = client.execute("INSERT INTO log (what) VALUES ('second group')");
      await turns();
      const { rows } = await client.execute("SELECT count(*) AS n FROM log WHERE what != 'holder'");
      expect(defined(rows[0]).n).toBe(0);
      await release();
      await Promise.all([first, immediate, second]);
      expect(await logged()).toEqual(['first group', 'immediate', 'second group']);
      // With no group on the writer thread, an immediate write commits at once.
      const now = immediateClient.execute("INSERT INTO log (what) VALUES ('at once')");
      const { rows: seen } = await client.execute("SELECT count(*) AS n FROM log WHERE what = 'at once'");
      expect(defined(seen[0]).n).toBe(1);
      await now;
    } finally {
      await close();
    }
  });

  it('answers the group being committed when it closes, and refuses the writes still waiting', async () => {
    const { client, immediateClient, release, close, logged } = await open();
    try {
      // Its second statement returns rows, shaped on this thread once the group is answered.
      const committing = client.batch([
        "INSERT INTO log (what) VALUES ('committing')",
        "INSERT INTO log (what) VALUES ('committing too') RETURNING what",
      ]);
      await turns();
      const waiting = client.execute("INSERT INTO log (what) VALUES ('waiting')");
      const waitingHere = immediateClient.execute("INSERT INTO log (what) VALUES ('immediate')");
      client.close();
      immediateClient.close();
      await expect(waiting).rejects.toThrow(/closed/);
      await release();
      const [first, second] = await committing;
      expect(defined(first).rowsAffected).toBe(1);
      expect(defined(second).rows.map((row) => row.what)).toEqual(['committing too']);
      await expect(waitingHere).rejects.toThrow(/closed/);
      expect(await logged()).toEqual(['committing', 'committing too']);
    } finally {
      await close();
    }
  });
});
