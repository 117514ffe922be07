import { and, eq, isNotNull, isNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { vectorStoreIndexes, vectorStores } from '../db/schema';
import type { Config } from '../config';
import type { Slices } from '../lib/slices';

/**
 * Approximate-nearest-neighbour indexes of large vector stores, so that a store's vector search
 * reads a few hundred index nodes instead of every chunk (search.ts).
 *
 * One index over every store's chunks cannot serve a store: libSQL's vector_top_k returns its ~200
 * nearest rows whatever k, and a store's own are rarely among them once other stores are large.
 * A partial index per store needs a typed F32_BLOB(d) column, and every vector index on a table
 * slows every insert into it. So a store past GATEWAY_VECTOR_INDEX_MIN_CHUNKS gets a table of its
 * own, `vector_store_ann_<random part of its id>` (chunk id, embedding as F32_BLOB(d), a
 * libsql_vector_idx), and two triggers on vector_store_chunks that copy its new chunks there and
 * delete its deleted ones. The chunks older than the index are copied by the back-fill, in short
 * batches (the database has one writer, and each batch holds it), ids up to the largest one when
 * the index was created; the index is searched once that is done (`ready_at`), the store is
 * scanned exactly until then. A deleted store's index (table, triggers, row) is dropped by the
 * next pass; until then its deleted chunks are not copied out of it one by one (the delete trigger
 * skips a store whose row is gone or marked deleted, and deleteVectorStore deletes the row before
 * the chunks: dropping the table is one cheap step, deleting its rows through the index is not).
 *
 * At most GATEWAY_VECTOR_INDEX_MAX_STORES stores are indexed: each index's triggers are evaluated
 * on every chunk insert, of any store. `maintainVectorIndexes` does one pass of this work; Node
 * runs it on a timer (runtime/node/start.ts), Workers on the cron trigger (worker.ts).
 */

/** Chunks copied into an index per statement: about 0.1 to 0.3 s of the writer's time at 512 dimensions. */
export const BACKFILL_BATCH = 32;
/**
 * The candidate list of the index's graph search (libSQL's `search_l`, 200 by default): a search
 * reads no more than this many neighbours, and its time is about proportional to it. 100 is the
 * most a search asks for (MAX_CANDIDATES in search.ts); at 100,000 chunks it took a search's p99
 * from 33 to 22 ms (`npm run bench:search`).
 */
export const SEARCH_L = 100;
/** Stores looked at per query when looking for one past the threshold. */
const STORE_PAGE = 100;

/**
 * The random part of a store id, checked: it is written into SQL text (DDL takes no parameters,
 * FTS5 queries name the store in their text). Throws on anything but a well-formed id.
 */
export function storeIdPart(storeId: string): string {
  if (!/^vs_[A-Za-z0-9]+$/.test(storeId)) throw new Error(`not a vector store id: ${storeId}`);
  return storeId.slice('vs_'.length);
}

/** The names of a store's index objects. */
export function indexNames(storeId: string) {
  const table = `vector_store_ann_${storeIdPart(storeId)}`;
  return { table, index: `${table}_idx`, onInsert: `${table}_insert`, onDelete: `${table}_delete` };
}

export interface MaintenanceOptions {
  /** Stop starting back-fill batches after this many milliseconds. */
  budgetMs: number;
  /** Chunks per back-fill batch (BACKFILL_BATCH). */
  batchSize?: number;
  /** At most this many back-fill batches in the pass (all the budget allows unless said). */
  maxBatches?: number;
}

type MaintenanceDeps = { db: Db; config: Config; now: () => number; slices: Slices };

/**
 * One pass: drops the indexes of deleted stores, creates the index of stores past the threshold
 * (within the limit) unless one is being back-filled, and back-fills unfinished indexes until
 * `budgetMs` is spent. Answers whether an index is still being back-filled (the caller comes back
 * soon rather than later).
 */
export async function maintainVectorIndexes(deps: MaintenanceDeps, options: MaintenanceOptions): Promise<boolean> {
  const { db } = deps;
  const started = Date.now();
  for (const storeId of await orphanedIndexes(db)) await dropVectorIndex(db, storeId);
  const unfinishedIndexes = () =>
    db
      .select()
      .from(vectorStoreIndexes)
      .where(isNull(vectorStoreIndexes.readyAt))
      .orderBy(vectorStoreIndexes.createdAt);
  let building = await unfinishedIndexes();
  if (building.length === 0) {
    await createDueIndexes(deps);
    building = await unfinishedIndexes();
  }
  const batchSize = options.batchSize ?? BACKFILL_BATCH;
  let unfinished = building.length;
  let batches = 0;
  for (const index of building) {
    let cursor = index.backfilledTo;
    while (Date.now() - started < options.budgetMs && batches++ < (options.maxBatches ?? Infinity)) {
      cursor = await backfillBatch(db, index.vectorStoreId, cursor, index.backfillUntil, batchSize, deps.now());
      if (cursor >= index.backfillUntil) {
        unfinished--;
        break;
      }
    }
  }
  return unfinished > 0;
}

/** Indexes whose store is deleted (or gone). */
async function orphanedIndexes(db: Db): Promise<string[]> {
  const rows = await db
    .select({ id: vectorStoreIndexes.vectorStoreId })
    .from(vectorStoreIndexes)
    .leftJoin(vectorStores, eq(vectorStores.id, vectorStoreIndexes.vectorStoreId))
    .where(sql`${vectorStores.id} IS NULL OR ${vectorStores.deletedAt} IS NOT NULL`);
  return rows.map((row) => row.id);
}

/** Removes a store's index: its triggers, its table (and with it the vector index), its row. */
export async function dropVectorIndex(db: Db, storeId: string): Promise<void> {
  const names = indexNames(storeId);
  await db.batch([
    db.run(sql.raw(`DROP TRIGGER IF EXISTS ${names.onInsert}`)),
    db.run(sql.raw(`DROP TRIGGER IF EXISTS ${names.onDelete}`)),
    db.run(sql.raw(`DROP TABLE IF EXISTS ${names.table}`)),
    db.delete(vectorStoreIndexes).where(eq(vectorStoreIndexes.vectorStoreId, storeId)),
  ]);
}

/**
 * Creates the index of each live store of at least GATEWAY_VECTOR_INDEX_MIN_CHUNKS chunks that has
 * none, while fewer than GATEWAY_VECTOR_INDEX_MAX_STORES exist. Each store's chunks are counted
 * only up to the threshold, one statement per store, so no statement reads more than that; and
 * the event loop gets a turn between them once its slice is spent (there may be many stores).
 */
async function createDueIndexes(deps: MaintenanceDeps): Promise<void> {
  const { db, config } = deps;
  const threshold = config.GATEWAY_VECTOR_INDEX_MIN_CHUNKS;
  const [{ indexes } = { indexes: 0 }] = await db.select({ indexes: sql<number>`count(*)` }).from(vectorStoreIndexes);
  let room = config.GATEWAY_VECTOR_INDEX_MAX_STORES - indexes;
  let after = 0;
  while (room > 0) {
    const page = await db
      .select({ seq: vectorStores.seq, id: vectorStores.id, dimensions: vectorStores.embeddingDimensions })
      .from(vectorStores)
      .where(
        and(
          sql`${vectorStores.seq} > ${after}`,
          isNull(vectorStores.deletedAt),
          isNotNull(vectorStores.embeddingDimensions),
          sql`NOT EXISTS (SELECT 1 FROM vector_store_indexes i WHERE i.vector_store_id = ${vectorStores.id})`,
        ),
      )
      .orderBy(vectorStores.seq)
      .limit(STORE_PAGE);
    for (const store of page) {
      if (room === 0 || store.dimensions === null) continue;
      while (deps.slices.spent()) await deps.slices.next();
      const [counted] = await db.all<{ chunks: number }>(
        sql`SELECT count(*) AS chunks FROM (SELECT 1 FROM vector_store_chunks WHERE vector_store_id = ${store.id} LIMIT ${threshold})`,
      );
      if (Number(counted?.chunks ?? 0) < threshold) continue;
      await createVectorIndex(db, store.id, store.dimensions, deps.now());
      room--;
    }
    const last = page.at(-1);
    if (!last || page.length < STORE_PAGE) break;
    after = last.seq;
  }
}

/**
 * A store's index, empty, with the triggers that keep it in step from now on, and its row, in one
 * batch: every chunk is either older than the index (id up to backfill_until: the back-fill copies
 * it) or copied by the insert trigger. The delete trigger skips a deleted store (see above).
 */
export async function createVectorIndex(db: Db, storeId: string, dimensions: number, now: number): Promise<void> {
  const names = indexNames(storeId);
  if (!Number.isInteger(dimensions) || dimensions < 1 || dimensions > 65_536)
    throw new Error(`bad dimensions: ${dimensions}`);
  const store = `'${storeId}'`;
  await db.batch([
    db.run(
      sql.raw(
        `CREATE TABLE IF NOT EXISTS ${names.table} (id INTEGER PRIMARY KEY, embedding F32_BLOB(${dimensions}) NOT NULL)`,
      ),
    ),
    db.run(
      sql.raw(
        `CREATE INDEX IF NOT EXISTS ${names.index} ON ${names.table} ` +
          `(libsql_vector_idx(embedding, 'metric=cosine', 'compress_neighbors=float8', 'max_neighbors=32', 'search_l=${SEARCH_L}'))`,
      ),
    ),
    db.run(
      sql.raw(
        `CREATE TRIGGER IF NOT EXISTS ${names.onInsert} AFTER INSERT ON vector_store_chunks WHEN new.vector_store_id = ${store} ` +
          `BEGIN INSERT OR REPLACE INTO ${names.table} (id, embedding) VALUES (new.id, new.embedding); END`,
      ),
    ),
    db.run(
      sql.raw(
        `CREATE TRIGGER IF NOT EXISTS ${names.onDelete} AFTER DELETE ON vector_store_chunks WHEN old.vector_store_id = ${store} ` +
          `AND EXISTS (SELECT 1 FROM vector_stores WHERE id = ${store} AND deleted_at IS NULL) ` +
          `BEGIN DELETE FROM ${names.table} WHERE id = old.id; END`,
      ),
    ),
    db.run(sql`INSERT INTO vector_store_indexes (vector_store_id, dimensions, backfill_until, backfilled_to, created_at)
      VALUES (${storeId}, ${dimensions}, (SELECT coalesce(max(id), 0) FROM vector_store_chunks), 0, ${now})
      ON CONFLICT (vector_store_id) DO NOTHING`),
  ]);
}

/**
 * Copies the store's next `size` chunks after `cursor` (up to `until`) into its index, moves the
 * cursor past them and, at the end, marks the index ready; answers the new cursor. The chunks are
 * read in rowid order (NOT INDEXED: the store's index does not order by id), from the cursor on.
 */
async function backfillBatch(
  db: Db,
  storeId: string,
  cursor: number,
  until: number,
  size: number,
  now: number,
): Promise<number> {
  const names = indexNames(storeId);
  const next = (columns: string) => sql`SELECT ${sql.raw(columns)} FROM vector_store_chunks NOT INDEXED
    WHERE id > ${cursor} AND id <= ${until} AND vector_store_id = ${storeId} ORDER BY id LIMIT ${size}`;
  const [, , moved] = await db.batch([
    db.run(sql`INSERT OR IGNORE INTO ${sql.raw(names.table)} (id, embedding) ${next('id, embedding')}`),
    db.run(sql`UPDATE vector_store_indexes
      SET backfilled_to = coalesce((SELECT max(id) FROM (${next('id')})), backfill_until)
      WHERE vector_store_id = ${storeId} AND backfilled_to = ${cursor}`),
    db
      .update(vectorStoreIndexes)
      .set({ readyAt: now })
      .where(
        and(
          eq(vectorStoreIndexes.vectorStoreId, storeId),
          sql`backfilled_to >= backfill_until`,
          isNull(vectorStoreIndexes.readyAt),
        ),
      )
      .returning({ to: vectorStoreIndexes.backfilledTo }),
  ]);
  if (moved.length > 0) return until;
  const [row] = await db
    .select({ to: vectorStoreIndexes.backfilledTo })
    .from(vectorStoreIndexes)
    .where(eq(vectorStoreIndexes.vectorStoreId, storeId));
  // Gone (the store was deleted meanwhile): nothing more to do for it.
  return row?.to ?? until;
}
