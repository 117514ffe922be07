import { and, eq, gt, inArray, isNotNull, isNull, lte, or, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client';
import { files, vectorStoreChunks, vectorStoreFiles, type FilePurpose } from '../db/schema';
import { ApiError } from '../errors';
import type { CursorListQuery } from '../schemas/common';
import { cursorPage } from './pagination';

/**
 * Uploaded files' rows, scoped to a workspace (their bytes: deps.blobs, under `blobKey`). A file
 * past its `expires_at` is gone for every read, as OpenAI deletes it then.
 */

export type FileRow = Omit<typeof files.$inferSelect, 'seq'>;

export async function insertFile(db: Db, row: FileRow): Promise<void> {
  await db.insert(files).values(row);
}

/** Not expired at `now` (without `now`, whatever its expiry). */
const current = (now: number | undefined): SQL | undefined =>
  now === undefined ? undefined : or(isNull(files.expiresAt), gt(files.expiresAt, now));

/** The workspace's file; 404 `file_not_found` when unknown, expired at `now`, or another workspace's. */
export async function getFile(db: Db, workspaceId: string, id: string, now?: number): Promise<FileRow> {
  const [row] = await db
    .select()
    .from(files)
    .where(and(eq(files.id, id), eq(files.workspaceId, workspaceId), current(now)))
    .limit(1);
  if (!row) throw notFound(id);
  return row;
}

const notFound = (id: string) => new ApiError('file_not_found', `No such File object: ${id}`);

/** A page of the workspace's files (of one `purpose` when given), OpenAI's cursor way. */
export async function listFiles(
  db: Db,
  workspaceId: string,
  query: Omit<CursorListQuery, 'before'> & { purpose?: FilePurpose },
  now: number,
): Promise<{ rows: FileRow[]; hasMore: boolean }> {
  const scope = and(eq(files.workspaceId, workspaceId), query.purpose === undefined ? undefined : eq(files.purpose, query.purpose), current(now));
  return cursorPage(query, {
    seq: files.seq,
    noun: 'file',
    seqOf: async (id) => {
      const [row] = await db.select({ seq: files.seq }).from(files).where(and(eq(files.workspaceId, workspaceId), eq(files.id, id))).limit(1);
      return row?.seq;
    },
    select: async (where, orderBy, limit) => {
      const rows = await db.select().from(files).where(and(scope, where)).orderBy(orderBy).limit(limit);
      return rows.map(({ seq: _seq, ...row }) => row);
    },
  });
}

/**
 * Deletes the workspace's file, and with it, in the same batch, its place in every vector store
 * (vector_store_files) and its chunks, so that a deleted file is never found by a search. Only
 * the row goes here; the caller deletes the bytes afterwards (a blob without a row is invisible).
 * Answers the deleted row.
 */
export async function deleteFile(db: Db, workspaceId: string, id: string): Promise<FileRow> {
  const gone = sql`NOT EXISTS (SELECT 1 FROM ${files} WHERE ${files.id} = ${id})`;
  const itsStores = db
    .select({ id: vectorStoreFiles.vectorStoreId })
    .from(vectorStoreFiles)
    .where(and(eq(vectorStoreFiles.fileId, id), eq(vectorStoreFiles.workspaceId, workspaceId)));
  const [deleted] = await db.batch([
    db.delete(files).where(and(eq(files.id, id), eq(files.workspaceId, workspaceId))).returning(),
    // Through the stores that hold it (vector_store_files_file, then the chunks' store-and-file index).
    db.delete(vectorStoreChunks).where(and(inArray(vectorStoreChunks.vectorStoreId, itsStores), eq(vectorStoreChunks.fileId, id), gone)),
    db.delete(vectorStoreFiles).where(and(eq(vectorStoreFiles.fileId, id), eq(vectorStoreFiles.workspaceId, workspaceId), gone)),
  ]);
  const [row] = deleted;
  if (!row) throw notFound(id);
  const { seq: _seq, ...file } = row;
  return file;
}

/**
 * Up to `limit` files of any workspace whose `expires_at` has passed at `now`. No index serves
 * this (files rarely expire): it reads the table, which is why the sweeps that call it are rare.
 */
export async function expiredFiles(db: Db, now: number, limit: number): Promise<Pick<FileRow, 'id' | 'workspaceId'>[]> {
  return db
    .select({ id: files.id, workspaceId: files.workspaceId })
    .from(files)
    .where(and(isNotNull(files.expiresAt), lte(files.expiresAt, now)))
    .limit(limit);
}
