import type { BatchItem } from 'drizzle-orm/batch';
import type { LibSQLDatabase } from 'drizzle-orm/libsql';
import type * as schema from './schema';

/**
 * The database as the app sees it: Drizzle over libSQL, whichever driver the entry chose
 * (`drizzle-orm/libsql` on Node, `drizzle-orm/libsql/web` on Workers). Type-only on purpose.
 *
 * Atomic writes go through `db.batch([...])`, never `db.transaction()`: a batch runs as one
 * transaction in one call on every driver, while an interactive transaction on the embedded file
 * holds SQLite's write lock across awaits, and a second one in the same process would then wait
 * for it synchronously, blocking the very event loop that has to finish the first.
 */
export type Db = LibSQLDatabase<typeof schema>;

/** `db.batch` over a list built at run time (Drizzle types want a non-empty tuple literal). */
export function batch(db: Db, statements: BatchItem<'sqlite'>[]): Promise<unknown[]> {
  if (statements.length === 0) return Promise.resolve([]);
  return db.batch(statements as [BatchItem<'sqlite'>, ...BatchItem<'sqlite'>[]]) as Promise<unknown[]>;
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
