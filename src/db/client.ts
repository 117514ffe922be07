import type { BatchItem } from 'drizzle-orm/batch';
import type { LibSQLDatabase } from 'drizzle-orm/libsql';
import type * as schema from './schema';

type Driver = LibSQLDatabase<typeof schema>;
type Transaction = Parameters<Driver['transaction']>[0] extends (tx: infer Tx) => unknown ? Tx : never;

/**
 * The database as the app sees it: Drizzle over libSQL, whichever driver the entry chose
 * (`drizzle-orm/libsql` on Node, `drizzle-orm/libsql/web` on Workers). Type-only on purpose.
 *
 * Atomic writes go through `db.batch([...])`, never `db.transaction()`: a batch runs as one
 * transaction in one call on every driver, while an interactive transaction on the embedded file
 * holds SQLite's write lock across awaits, and a second one in the same process would then wait
 * for it synchronously, blocking the very event loop that has to finish the first. So
 * `transaction` is typed here so that no call compiles (its `this` would have to be `never`),
 * while the type stays interchangeable with what the drivers return and Drizzle's migrator takes.
 */
export interface Db extends Driver {
  /** Not for this app: use `db.batch`. */
  transaction<T>(this: never, transaction: (tx: Transaction) => Promise<T>): Promise<T>;
}

/** One statement of a batch. */
export type Statement = BatchItem<'sqlite'>;

/**
 * `db.batch` over a list built at run time, for writes whose results nobody reads. (A batch of a
 * tuple written out, `db.batch([a, b])`, types each result: read results from one of those.)
 */
export async function batchWrites(db: Db, statements: Statement[]): Promise<void> {
  const [first, ...rest] = statements;
  if (first) await db.batch([first, ...rest]);
}

/**
 * A query prepared once per database (Drizzle builds its SQL once, not on every call), for the
 * queries on every request's path. `build` receives the database and returns `.prepare()`d query.
 */
export function preparedQuery<T>(build: (db: Db) => T): (db: Db) => T {
  const prepared = new WeakMap<Db, T>();
  return (db) => {
    let query = prepared.get(db);
    if (query === undefined) {
      query = build(db);
      prepared.set(db, query);
    }
    return query;
  };
}

/**
 * Whether `error` is SQLite refusing a write for a duplicate in a unique index on `columns`
 * (`runs.thread_id`), as each driver reports it: the embedded client's SqliteError (code
 * SQLITE_CONSTRAINT_UNIQUE), @libsql/client's LibsqlError or LibsqlBatchError over HTTP (code
 * SQLITE_CONSTRAINT), either of them wrapped by Drizzle as the `cause` of a DrizzleQueryError. All
 * carry SQLite's own message, which names the index's columns.
 */
export function isUniqueViolation(error: unknown, columns: string): boolean {
  const needle = `UNIQUE constraint failed: ${columns}`;
  for (let cause = error, depth = 0; cause instanceof Error && depth < 8; cause = cause.cause, depth++) {
    const code = 'code' in cause ? cause.code : undefined;
    if (typeof code === 'string' && code.startsWith('SQLITE_CONSTRAINT') && cause.message.includes(needle)) return true;
  }
  return false;
}
