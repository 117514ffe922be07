import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type Client, type ResultSet } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openEmbeddedClient } from '../src/db/embedded-client';

/**
 * The embedded database client against @libsql/client on the same file: same answers, and the
 * group commit keeps each caller's batch atomic and isolated from the others' failures.
 */

let dir: string;
let ours: Client;
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

const plain = (rows: ArrayLike<unknown>[]) => rows.map((row) => ({ byIndex: Array.prototype.slice.call(row), byName: { ...row } }));

describe('answers like @libsql/client', () => {
  it('returns the same rows, by index and by name, for the same queries', async () => {
    await ours.execute({ sql: 'INSERT INTO items (name, price, data, flag) VALUES (?, ?, ?, ?)', args: ['a', 1.5, '{"x":1}', true] });
    await ours.execute({ sql: 'INSERT INTO items (name, price, data, flag) VALUES (:name, :price, NULL, 0)', args: { name: 'b', price: 2 } });
    await ours.execute({ sql: 'INSERT INTO other (id, name) VALUES (1, ?)', args: ['b'] });
    for (const [sql, args] of [
      ['SELECT * FROM items ORDER BY id', []],
      ['SELECT id, name FROM items WHERE price > ?', [1]],
      ['SELECT items.id, other.id, items.name FROM items JOIN other ON other.name = items.name', []],
      ['SELECT count(*) AS n, sum(price) AS total FROM items', []],
      ['SELECT * FROM items WHERE id = ?', [999]],
    ] as const) {
      const [a, b] = await Promise.all([ours.execute({ sql, args: [...args] }), reference.execute({ sql, args: [...args] })]);
      expect(a.columns).toEqual(b.columns);
      expect(plain(a.rows)).toEqual(plain(b.rows));
      expect(a.rows.map((row) => row.length)).toEqual(b.rows.map((row) => row.length));
    }
  });

  it('answers a duplicated column name by its first occurrence, and every value by index', async () => {
    const { rows } = await ours.execute('SELECT items.id, other.id FROM items JOIN other ON other.name = items.name');
    expect(Object.keys(rows[0]!)).toEqual(['id']);
    expect(rows[0]!.id).toBe(rows[0]![0]);
    expect(rows[0]![1]).toBe(1);
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
    expect(rows[0]!.name).toBe('d');
    const seen = await reference.execute({ sql: 'SELECT name FROM items WHERE name = ?', args: ['d'] });
    expect(seen.rows).toHaveLength(1);
  });

  it('reuses a prepared statement with new arguments', async () => {
    for (const name of ['a', 'b', 'c']) {
      const { rows } = await ours.execute({ sql: 'SELECT name FROM items WHERE name = ?', args: [name] });
      expect(rows[0]!.name).toBe(name);
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
    expect(rows[0]!.n).toBe(0);
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
    expect(fourth.value[0]!.rows[0]!.name).toBe('g4');
    const { rows } = await reference.execute("SELECT name FROM other WHERE name LIKE 'g%' ORDER BY name");
    expect(rows.map((row) => row.name)).toEqual(['g1', 'g3', 'g4']);
  });

  it('answers writes only once they are committed, visible to another connection', async () => {
    await ours.execute({ sql: 'INSERT INTO other (name) VALUES (?)', args: ['visible'] });
    const { rows } = await reference.execute("SELECT count(*) AS n FROM other WHERE name = 'visible'");
    expect(rows[0]!.n).toBe(1);
  });

  it('reads within a batch of reads see one snapshot and write nothing', async () => {
    const [count, names] = await ours.batch(['SELECT count(*) AS n FROM items', 'SELECT name FROM items ORDER BY name']);
    expect(count!.rows[0]!.n).toBe(names!.rows.length);
  });

  it('refuses interactive transactions, pointing to batches', async () => {
    await expect(ours.transaction('write')).rejects.toThrow(/batch/);
  });
});
