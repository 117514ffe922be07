import { and, eq, getTableColumns, inArray, sql, type SQL } from 'drizzle-orm';
import { insertWhere, preparedQueries, type BuiltStatement, type Db } from '../../db/client';
import {
  files,
  vectorStoreChunks,
  vectorStoreFileBatches,
  vectorStoreFiles,
  vectorStores,
  type ChunkingStrategy,
  type ExpiresAfter,
  type FileAttributes,
  type VectorStoreFileStatus,
} from '../../db/schema';
import { ApiError } from '../../errors';
import type { CursorListQuery } from '../../http/schemas';
import type { ListVectorStoreFilesQuery, UpdateVectorStoreBody } from './schemas';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';

/**
 * Vector stores, their files and their file batches: the queries (their JSON is
 * resources/vector-stores/wire.ts; the use-cases that resolve keys and wake ingestion are
 * resources/vector-stores/commands.ts). A vector_store_files row is also the ingestion job of its file
 * (retrieval/ingest.ts): `in_progress` until its chunks are written, with them, in one batch.
 */

export type VectorStoreRow = Omit<typeof vectorStores.$inferSelect, 'seq'>;
export type VectorStoreFileRow = typeof vectorStoreFiles.$inferSelect;
export type FileBatchRow = Omit<typeof vectorStoreFileBatches.$inferSelect, 'seq'>;

export type FileCounts = Record<VectorStoreFileStatus | 'total', number>;

/** One file to add: its id, attributes and chunking, and the parameter that named it (for errors). */
export interface FileToAdd {
  fileId: string;
  attributes: FileAttributes;
  chunking: ChunkingStrategy;
  param: string;
}

const DAY_MS = 86_400_000;

/** When a store with `expiresAfter` expires, counted from `lastActiveAt`. */
export function expiresAt(expiresAfter: ExpiresAfter | null, lastActiveAt: number): number | null {
  return expiresAfter ? lastActiveAt + expiresAfter.days * DAY_MS : null;
}

/** The workspace's store; 404 `vector_store_not_found` (naming `param`, when a body names the store) for no such store or another workspace's. */
export async function getVectorStore(db: Db, workspaceId: string, id: string, param?: string): Promise<VectorStoreRow> {
  const [row] = await db
    .select()
    .from(vectorStores)
    .where(and(eq(vectorStores.id, id), eq(vectorStores.workspaceId, workspaceId)))
    .limit(1);
  if (!row) throw new ApiError('vector_store_not_found', `No vector store found with id '${id}'.`, { param });
  return row;
}

export function listVectorStores(db: Db, workspaceId: string, query: CursorListQuery) {
  return cursorPage(query, {
    db,
    cursors: storeCursors,
    scope: workspaceId,
    noun: 'vector store',
    select: (page) => storePage(db, page).all({ ...page.values, workspaceId }),
  });
}

const storeCursors = cursorsOf(vectorStores, {
  seq: vectorStores.seq,
  id: vectorStores.id,
  scope: vectorStores.workspaceId,
});

/** A page of stores, each with its figures (figuresColumn). */
const storePage = preparedQueries(
  (db, page: PageQuery) =>
    db
      .select({ ...getTableColumns(vectorStores), figures: figuresColumn })
      .from(vectorStores)
      .where(and(eq(vectorStores.workspaceId, sql.placeholder('workspaceId')), page.where))
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page) => page.shape,
);

/** Changes the fields `body` sends; `expires_after` moves `expires_at` from the store's last activity. */
export async function updateVectorStore(
  db: Db,
  store: VectorStoreRow,
  body: UpdateVectorStoreBody,
): Promise<VectorStoreRow> {
  const { id, workspaceId } = store;
  const columns: Partial<VectorStoreRow> = {};
  if (body.name !== undefined) columns.name = body.name;
  if (body.metadata !== undefined) columns.metadata = body.metadata ?? {};
  if (body.expires_after !== undefined) {
    columns.expiresAfter = body.expires_after;
    columns.expiresAt = expiresAt(body.expires_after, store.lastActiveAt);
  }
  if (Object.keys(columns).length === 0) return store;
  const [row] = await db
    .update(vectorStores)
    .set(columns)
    .where(and(eq(vectorStores.id, id), eq(vectorStores.workspaceId, workspaceId)))
    .returning();
  if (!row) throw new ApiError('vector_store_not_found', `No vector store found with id '${id}'.`);
  return row;
}

/**
 * The store, its files (and so their ingestion jobs), batches and chunks, in one transaction. The
 * store's row goes first: a store's vector index (retrieval/vector-index.ts) then skips its chunks'
 * deletes, and is dropped whole by the next maintenance pass.
 */
export async function deleteVectorStore(db: Db, workspaceId: string, id: string): Promise<void> {
  const store = await getVectorStore(db, workspaceId, id);
  await db.batch([
    db.delete(vectorStores).where(eq(vectorStores.id, store.id)),
    db.delete(vectorStoreFiles).where(eq(vectorStoreFiles.vectorStoreId, store.id)),
    db.delete(vectorStoreFileBatches).where(eq(vectorStoreFileBatches.vectorStoreId, store.id)),
    db.delete(vectorStoreChunks).where(eq(vectorStoreChunks.vectorStoreId, store.id)),
  ]);
}

/** A batch's files by status, for its file_counts. */
export async function batchFileCounts(db: Db, batchId: string): Promise<FileCounts> {
  return countsOf(await batchCounts(db, batchId));
}

/** The statement of batchFileCounts, for a transaction that reads them after its writes (countsOf maps its rows). */
const batchCounts = (db: Db, batchId: string) =>
  db
    .select({ status: vectorStoreFiles.status, count: sql<number>`count(*)` })
    .from(vectorStoreFiles)
    .where(eq(vectorStoreFiles.batchId, batchId))
    .groupBy(vectorStoreFiles.status);

function countsOf(rows: readonly { status: VectorStoreFileStatus; count: number }[]): FileCounts {
  const counts = emptyCounts();
  for (const row of rows) {
    counts[row.status] += row.count;
    counts.total += row.count;
  }
  return counts;
}

export const emptyCounts = (): FileCounts => ({ in_progress: 0, completed: 0, failed: 0, cancelled: 0, total: 0 });

/** A store's figures: its files by status (file_counts), and the bytes its completed files take (usage_bytes). */
export interface StoreFigures {
  counts: FileCounts;
  bytes: number;
}

/**
 * The figures of the store whose row it is read with, as one subquery over its files: read in the
 * same statement as the store (a page of stores in one round trip), parsed by figuresOf. The store's
 * id is named with its table: in a select's fields Drizzle writes a column without it, and `id`
 * alone would be the files' own, had they one.
 */
const figuresColumn = sql<string>`(select json_array(
  total(${vectorStoreFiles.status} = 'in_progress'), total(${vectorStoreFiles.status} = 'completed'),
  total(${vectorStoreFiles.status} = 'failed'), total(${vectorStoreFiles.status} = 'cancelled'),
  total(case when ${vectorStoreFiles.status} = 'completed' then ${vectorStoreFiles.usageBytes} end))
  from ${vectorStoreFiles} where ${vectorStoreFiles.vectorStoreId} = ${vectorStores}.id)`;

/** figuresColumn's JSON as StoreFigures. */
export function figuresOf(json: string): StoreFigures {
  const [inProgress = 0, completed = 0, failed = 0, cancelled = 0, bytes = 0] = (JSON.parse(json) as number[]).map(
    Number,
  );
  return {
    counts: {
      in_progress: inProgress,
      completed,
      failed,
      cancelled,
      total: inProgress + completed + failed + cancelled,
    },
    bytes,
  };
}

/** The figures of the stores `ids` (of any workspace: the caller found them its own). */
export async function storeFigures(db: Db, ids: string[]): Promise<Map<string, StoreFigures>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .select({ id: vectorStores.id, figures: figuresColumn })
    .from(vectorStores)
    .where(inArray(vectorStores.id, ids));
  return new Map(rows.map((row) => [row.id, figuresOf(row.figures)]));
}

/**
 * 404 `file_not_found` naming the first of `wanted` that is not a file of the workspace (another
 * workspace's file is not found either), before anything is written.
 */
export async function checkFiles(
  db: Db,
  workspaceId: string,
  wanted: readonly Pick<FileToAdd, 'fileId' | 'param'>[],
): Promise<void> {
  const ids = [...new Set(wanted.map((file) => file.fileId))];
  const found = new Set<string>();
  for (let start = 0; start < ids.length; start += 500) {
    const rows = await db
      .select({ id: files.id })
      .from(files)
      .where(and(eq(files.workspaceId, workspaceId), inArray(files.id, ids.slice(start, start + 500))));
    for (const row of rows) found.add(row.id);
  }
  const missing = wanted.find((file) => !found.has(file.fileId));
  if (missing) throw new ApiError('file_not_found', `No such File object: ${missing.fileId}`, { param: missing.param });
}

/** A store's new rows for `toAdd`, in progress (queued for ingestion), skipped where the file is in the store already. */
export function insertStoreFiles(
  db: Db,
  store: { id: string; workspaceId: string },
  toAdd: FileToAdd[],
  owner: { batchId: string | null; apiKeyId: string; at: number },
  condition?: SQL,
): BuiltStatement[] {
  const exists = sql`EXISTS (SELECT 1 FROM ${vectorStores} WHERE ${vectorStores.id} = ${store.id})`;
  // and() of one condition (no `condition` given) is that condition.
  const storeExists = and(exists, condition) ?? exists;
  const seen = new Set<string>();
  const statements: BuiltStatement[] = [];
  for (const file of toAdd) {
    if (seen.has(file.fileId)) continue;
    seen.add(file.fileId);
    statements.push(
      insertWhere(
        db,
        vectorStoreFiles,
        {
          vectorStoreId: store.id,
          fileId: file.fileId,
          workspaceId: store.workspaceId,
          batchId: owner.batchId,
          status: 'in_progress',
          usageBytes: 0,
          chunkingStrategy: file.chunking,
          attributes: file.attributes,
          lastError: null,
          createdAt: owner.at,
          attempts: 0,
          leaseExpiresAt: null,
          apiKeyId: owner.apiKeyId,
        },
        storeExists,
      ).onConflictDoNothing(),
    );
  }
  return statements;
}

/** A store's activity: a file added, a search. Moves `expires_at` for stores that expire after inactivity. */
export function touchVectorStore(db: Db, store: VectorStoreRow, at: number, condition?: SQL): BuiltStatement {
  return db
    .update(vectorStores)
    .set({ lastActiveAt: at, expiresAt: expiresAt(store.expiresAfter, at) })
    .where(and(eq(vectorStores.id, store.id), condition));
}

const fileOf = (storeId: string, fileId: string) =>
  and(eq(vectorStoreFiles.vectorStoreId, storeId), eq(vectorStoreFiles.fileId, fileId));
const fileNotFound = (storeId: string, fileId: string) =>
  new ApiError('vector_store_file_not_found', `No file found with id '${fileId}' in vector store '${storeId}'.`);

/** The read of a store's file, for a batch that reads it back after writing it (getStoreFile reads it alone). */
export const storeFileRead = (db: Db, storeId: string, fileId: string) =>
  db.select().from(vectorStoreFiles).where(fileOf(storeId, fileId)).limit(1);

export async function getStoreFile(db: Db, storeId: string, fileId: string): Promise<VectorStoreFileRow> {
  const [row] = await storeFileRead(db, storeId, fileId);
  if (!row) throw fileNotFound(storeId, fileId);
  return row;
}

export function listStoreFiles(db: Db, scope: { storeId: string; batchId?: string }, query: ListVectorStoreFilesQuery) {
  const values = { storeId: scope.storeId, batchId: scope.batchId, status: query.filter };
  const filters = { ofBatch: scope.batchId !== undefined, ofStatus: query.filter !== undefined };
  return cursorPage(query, {
    db,
    cursors: storeFileCursors,
    scope: scope.storeId,
    noun: 'file in this vector store',
    select: (page) => storeFilePage(db, page, filters).all({ ...page.values, ...values }),
  });
}

const storeFileCursors = cursorsOf(vectorStoreFiles, {
  seq: vectorStoreFiles.seq,
  id: vectorStoreFiles.fileId,
  scope: vectorStoreFiles.vectorStoreId,
});

const storeFilePage = preparedQueries(
  (db, page: PageQuery, filters: { ofBatch: boolean; ofStatus: boolean }) =>
    db
      .select()
      .from(vectorStoreFiles)
      .where(
        and(
          eq(vectorStoreFiles.vectorStoreId, sql.placeholder('storeId')),
          filters.ofBatch ? eq(vectorStoreFiles.batchId, sql.placeholder('batchId')) : undefined,
          filters.ofStatus ? eq(vectorStoreFiles.status, sql.placeholder('status')) : undefined,
          page.where,
        ),
      )
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page, filters) => `${page.shape}${filters.ofBatch ? ' of a batch' : ''}${filters.ofStatus ? ' in a status' : ''}`,
);

export async function updateStoreFileAttributes(
  db: Db,
  storeId: string,
  fileId: string,
  attributes: Record<string, string | number | boolean>,
): Promise<VectorStoreFileRow> {
  const [row] = await db.update(vectorStoreFiles).set({ attributes }).where(fileOf(storeId, fileId)).returning();
  if (!row) throw fileNotFound(storeId, fileId);
  return row;
}

/**
 * The file's row and its chunks, in one transaction: an ingestion still running for it finds its
 * row gone and writes nothing (retrieval/ingest.ts writes only under its claim on the row).
 */
export async function deleteStoreFile(db: Db, storeId: string, fileId: string): Promise<void> {
  const [deleted] = await db.batch([
    db.delete(vectorStoreFiles).where(fileOf(storeId, fileId)).returning({ seq: vectorStoreFiles.seq }),
    db
      .delete(vectorStoreChunks)
      .where(and(eq(vectorStoreChunks.vectorStoreId, storeId), eq(vectorStoreChunks.fileId, fileId))),
  ]);
  if (deleted.length === 0) throw fileNotFound(storeId, fileId);
}

/** The text of a file's chunks, in order (its parsed content, as the content endpoint pages it). */
export async function storeFileChunks(db: Db, storeId: string, fileId: string, limit: number): Promise<string[]> {
  const rows = await db
    .select({ text: vectorStoreChunks.text })
    .from(vectorStoreChunks)
    .where(and(eq(vectorStoreChunks.vectorStoreId, storeId), eq(vectorStoreChunks.fileId, fileId)))
    .orderBy(vectorStoreChunks.chunkIndex)
    .limit(limit);
  return rows.map((row) => row.text);
}

export async function getFileBatch(db: Db, storeId: string, batchId: string): Promise<FileBatchRow> {
  const [row] = await db
    .select()
    .from(vectorStoreFileBatches)
    .where(and(eq(vectorStoreFileBatches.id, batchId), eq(vectorStoreFileBatches.vectorStoreId, storeId)))
    .limit(1);
  if (!row)
    throw new ApiError(
      'file_batch_not_found',
      `No file batch found with id '${batchId}' in vector store '${storeId}'.`,
    );
  return row;
}

/**
 * Cancels the batch: its files not yet ingested become `cancelled` in the same transaction, so
 * ingestions running for them write nothing (their claim is on an in-progress row).
 */
export async function cancelFileBatch(
  db: Db,
  batch: FileBatchRow,
  at: number,
): Promise<{ batch: FileBatchRow; counts: FileCounts }> {
  const [, [row], counts] = await db.batch([
    db
      .update(vectorStoreFiles)
      .set({ status: 'cancelled', leaseExpiresAt: null })
      .where(and(eq(vectorStoreFiles.batchId, batch.id), eq(vectorStoreFiles.status, 'in_progress'))),
    db
      .update(vectorStoreFileBatches)
      .set({ cancelledAt: sql`coalesce(${vectorStoreFileBatches.cancelledAt}, ${at})` })
      .where(eq(vectorStoreFileBatches.id, batch.id))
      .returning(),
    batchCounts(db, batch.id),
  ]);
  return { batch: row ?? batch, counts: countsOf(counts) };
}
