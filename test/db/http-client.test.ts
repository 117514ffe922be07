import { createClient, type Client, type ResultSet } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { databaseRefusal } from '../../src/db/busy-retry';
import { isUniqueViolation } from '../../src/db/client';
import { openHttpClient } from '../../src/db/http-client';

/**
 * The Worker's client of a libSQL server (src/db/http-client.ts) answers as @libsql/client's does:
 * the same rows, columns, counts and errors, for the same statements on the same sqld, side by side.
 */

let sqld: RunningSqld;
let theirs: Client;
let ours: Client;

beforeAll(async () => {
  sqld = await startSqld();
  theirs = createClient({ url: sqld.url });
  ours = openHttpClient({ url: sqld.url });
  await theirs.batch([
    'CREATE TABLE kinds (id INTEGER PRIMARY KEY, n INTEGER, f REAL, t TEXT, b BLOB, z, flag INTEGER, at INTEGER)',
    'CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT UNIQUE)',
    "INSERT INTO items (name) VALUES ('a'), ('b')",
  ]);
});
afterAll(async () => {
  theirs.close();
  ours.close();
  await sqld.stop();
});

/** What a caller can read of a result: by index, by name (the enumerable keys), the counts. */
function seen(result: ResultSet) {
  return {
    columns: result.columns,
    columnTypes: result.columnTypes,
    byIndex: result.rows.map((row) => Array.from({ length: row.length }, (_, i) => bytes(row[i]))),
    byName: result.rows.map((row) =>
      Object.fromEntries(Object.entries(row).map(([key, value]) => [key, bytes(value)])),
    ),
    rowsAffected: result.rowsAffected,
    lastInsertRowid: result.lastInsertRowid,
    json: JSON.stringify({ ...result.toJSON(), rows: [] }),
  };
}
const bytes = (value: unknown) => (value instanceof ArrayBuffer ? ['blob', ...new Uint8Array(value)] : value);

/** The error a call throws, as a caller reads it. */
async function failure(call: Promise<unknown>) {
  const error: unknown = await call.then(
    () => null,
    (thrown: unknown) => thrown,
  );
  if (!(error instanceof Error)) throw new Error(`expected an error, got ${String(error)}`);
  const fields = error as Error & { code?: unknown; statementIndex?: unknown; cause?: { status?: unknown } };
  return {
    name: error.name,
    message: error.message,
    code: fields.code,
    statementIndex: fields.statementIndex,
    status: fields.cause?.status,
  };
}

describe("the Worker's libSQL client over HTTP", () => {
  it('writes and reads every kind of value as @libsql/client does', async () => {
    const args = [7, 1.5, 'text ✓', new Uint8Array([0, 1, 254, 255]), null, 1, new Date(1_700_000_000_000)];
    const insert = 'INSERT INTO kinds (n, f, t, b, z, flag, at) VALUES (?, ?, ?, ?, ?, ?, ?)';
    const [mine, their] = [await ours.execute({ sql: insert, args }), await theirs.execute({ sql: insert, args })];
    expect(mine.rowsAffected).toBe(1);
    expect(mine.lastInsertRowid).toBe((their.lastInsertRowid ?? 0n) - 1n);
    await ours.execute({ sql: insert, args: [9007199254740991n, -0.25, '', new ArrayBuffer(0), null, true, 0] });
    const select = 'SELECT id, n, f, t, b, z, flag, at, n AS id, typeof(b) AS blob_type FROM kinds ORDER BY id';
    expect(seen(await ours.execute(select))).toEqual(seen(await theirs.execute(select)));
    expect((await ours.execute(select)).rows).toHaveLength(3);
  });

  it('binds named arguments, and arguments given as a tuple in a batch, as @libsql/client does', async () => {
    const named = { sql: 'SELECT :a AS a, @b AS b, $c AS c', args: { a: 1, '@b': 'two', $c: null } };
    expect(seen(await ours.execute(named))).toEqual(seen(await theirs.execute(named)));
    const batch: [string, [number]][] = [['SELECT ? + 1 AS n', [1]]];
    expect((await ours.batch(batch)).map(seen)).toEqual((await theirs.batch(batch)).map(seen));
  });

  it('answers a batch statement by statement, in each transaction mode', async () => {
    for (const mode of ['read', 'write', 'deferred'] as const) {
      const statements = ["SELECT name FROM items WHERE name = 'a'", 'SELECT count(*) AS n FROM items'];
      expect((await ours.batch(statements, mode)).map(seen)).toEqual((await theirs.batch(statements, mode)).map(seen));
    }
  });

  it('writes nothing of a batch one of whose statements fails, and names the statement', async () => {
    const batch = (name: string) => [
      { sql: 'INSERT INTO items (name) VALUES (?)', args: [`${name}-first`] },
      { sql: 'INSERT INTO items (name) VALUES (?)', args: ['a'] },
      { sql: 'INSERT INTO items (name) VALUES (?)', args: [`${name}-third`] },
    ];
    const mine = await failure(ours.batch(batch('ours'), 'write'));
    expect(mine).toEqual(await failure(theirs.batch(batch('ours'), 'write')));
    expect(mine).toMatchObject({ name: 'LibsqlBatchError', statementIndex: 1 });
    expect(isUniqueViolation(await ours.batch(batch('again'), 'write').catch((e: unknown) => e), 'items.name')).toBe(
      true,
    );
    const left = await theirs.execute(
      "SELECT count(*) AS n FROM items WHERE name LIKE 'ours-%' OR name LIKE 'again-%'",
    );
    expect(left.rows[0]?.n).toBe(0);
  });

  it("throws the server's errors as @libsql/client does", async () => {
    for (const call of [
      (client: Client) => client.execute('SELEC 1'),
      (client: Client) => client.execute('SELECT * FROM nowhere'),
      (client: Client) => client.execute({ sql: 'INSERT INTO items (name) VALUES (?)', args: ['a'] }),
      (client: Client) => client.batch(['SELECT 1', 'SELECT * FROM nowhere', 'SELECT 2'], 'read'),
      (client: Client) => client.execute({ sql: 'SELECT ?', args: [Number.NaN] }),
    ]) {
      expect(await failure(call(ours))).toEqual(await failure(call(theirs)));
    }
    // An integer past 2^53 cannot be a number: a RangeError, not a rounded value.
    const huge = 'SELECT 9007199254740993 AS n';
    expect(await failure(ours.execute(huge))).toEqual(await failure(theirs.execute(huge)));
    expect(await failure(ours.execute(huge))).toMatchObject({ name: 'RangeError' });
  });

  it('reports a server that turns a request away by its status, which the busy retry reads', async () => {
    const busy: typeof fetch = async () =>
      new Response('try later', { status: 429, headers: { 'content-type': 'text/plain' } });
    const mine = openHttpClient({ url: sqld.url, fetch: busy });
    const error = await mine.execute('SELECT 1').catch((thrown: unknown) => thrown);
    expect(databaseRefusal(error)).toBe('busy');
    expect(await failure(mine.execute('SELECT 1'))).toEqual({
      name: 'LibsqlError',
      message: 'SERVER_ERROR: Server returned HTTP status 429: try later',
      code: 'SERVER_ERROR',
      statementIndex: undefined,
      status: 429,
    });
  });

  it("reads at most 1 KiB of a server's error page, and never the rest of one that does not end", async () => {
    let pulled = 0;
    let cancelled = false;
    const endless: typeof fetch = async () =>
      new Response(
        new ReadableStream<Uint8Array>({
          pull(controller) {
            pulled++;
            controller.enqueue(new TextEncoder().encode('x'.repeat(600)));
          },
          cancel() {
            cancelled = true;
          },
        }),
        { status: 503, headers: { 'content-type': 'text/plain' } },
      );
    const mine = openHttpClient({ url: sqld.url, fetch: endless });
    const error = await failure(mine.execute('SELECT 1'));
    expect(error).toMatchObject({ code: 'SERVER_ERROR', status: 503 });
    expect(error.message).toBe(`SERVER_ERROR: Server returned HTTP status 503: ${'x'.repeat(1024)}`);
    expect(cancelled).toBe(true);
    expect(pulled).toBeLessThan(5);
  });

  it('sends one request a call, to the pipeline of its URL, with the token', async () => {
    const sent: { url: string; authorization: string | null; requests: string[] }[] = [];
    const recording: typeof fetch = async (input, init) => {
      const body = JSON.parse(String(init?.body)) as { requests: { type: string }[] };
      sent.push({
        url: String(input),
        authorization: new Headers(init?.headers).get('authorization'),
        requests: body.requests.map((request) => request.type),
      });
      return fetch(`${sqld.url}/v3/pipeline`, init);
    };
    const mine = openHttpClient({ url: 'libsql://db.example/?tls=0', authToken: 'secret', fetch: recording });
    await mine.execute('SELECT 1');
    await mine.batch(['SELECT 1', 'SELECT 2'], 'read');
    expect(sent).toEqual([
      { url: 'http://db.example/v3/pipeline', authorization: 'Bearer secret', requests: ['execute', 'close'] },
      { url: 'http://db.example/v3/pipeline', authorization: 'Bearer secret', requests: ['batch', 'close'] },
    ]);
    expect(() => openHttpClient({ url: 'ws://db.example' })).toThrow(/supports only/);
  });

  it("reads the URL's query as @libsql/client does: its token, its tls, and nothing else", async () => {
    const tokens: (string | null)[] = [];
    const recording: typeof fetch = async (input, init) => {
      tokens.push(new Headers(init?.headers).get('authorization'));
      return fetch(`${sqld.url}/v3/pipeline`, init);
    };
    const address = new URL(sqld.url);
    const url = `libsql://${address.host}/?tls=0&authToken=in-the-url`;
    await openHttpClient({ url, authToken: 'given-apart', fetch: recording }).execute('SELECT 1');
    await openHttpClient({
      url: `libsql://${address.host}/?tls=0`,
      authToken: 'given-apart',
      fetch: recording,
    }).execute('SELECT 1');
    expect(tokens).toEqual(['Bearer in-the-url', 'Bearer given-apart']);
    for (const bad of [`${sqld.url}/?mode=ro`, `${sqld.url}/?tls=yes`]) {
      const refusal = (open: () => unknown) => failure(Promise.resolve().then(open));
      expect(await refusal(() => openHttpClient({ url: bad }))).toEqual(
        await refusal(() => createClient({ url: bad })),
      );
    }
  });
});
