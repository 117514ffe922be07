import { and, eq, gt, inArray, isNotNull, isNull, lte, or, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { insertWhere, preparedQueries, type Db } from '../db/client';
import { files, vectorStoreChunks, vectorStoreFiles, type FilePurpose } from '../db/schema';
import { ApiError } from '../errors';
import type { CursorListQuery } from '../schemas/common';
import { cursorPage, cursorsOf, type PageQuery } from './pagination';
import { quotaExceeded } from './quotas';

/**
 * Uploaded files' rows, scoped to a workspace (their bytes: deps.blobs, under `blobKey`). A file
 * past its `expires_at` is gone for every read, as OpenAI deletes it then.
 */

export type FileRow = Omit<typeof files.$inferSelect, 'seq'>;

/**
 * Writes the file's row unless the workspace's files would then hold more than `maxBytes`
 * (GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE): 400 `quota_exceeded`, checked in the insert itself, so
 * that uploads finishing together cannot pass the cap between them.
 */
export async function insertFile(db: Db, row: FileRow, maxBytes = Number.MAX_SAFE_INTEGER): Promise<void> {
  const held = sql`(SELECT coalesce(sum(${files.bytes}), 0) FROM ${files} WHERE ${files.workspaceId} = ${row.workspaceId})`;
  const inserted = await insertWhere(db, files, row, sql`${held} + ${row.bytes} <= ${maxBytes}`).returning({ id: files.id });
  if (inserted.length === 0) throw storageExceeded(await storedBytes(db, row.workspaceId), maxBytes);
}

/** The bytes of the workspace's files together (expired ones included until they are deleted). */
export async function storedBytes(db: Db, workspaceId: string): Promise<number> {
  const [row] = await db.select({ bytes: sql<number>`coalesce(sum(${files.bytes}), 0)` }).from(files).where(eq(files.workspaceId, workspaceId));
  return Number(row?.bytes ?? 0);
}

export const storageExceeded = (held: number, maxBytes: number) =>
  quotaExceeded(
    `This workspace's files hold ${held} bytes; its cap is ${maxBytes} (GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE). Delete files before uploading more.`,
    'file',
  );

/** Not expired at `now` (without `now`, whatever its expiry). */
const current = (now: number | Placeholder | undefined): SQL | undefined =>
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
  const ofPurpose = query.purpose !== undefined;
  return cursorPage(query, {
    db,
    cursors: fileCursors,
    scope: workspaceId,
    noun: 'file',
    select: async (page) => {
      const rows = await filePage(db, page, ofPurpose).all({ ...page.values, workspaceId, purpose: query.purpose, now });
      return rows.map(({ seq: _seq, ...row }) => row);
    },
  });
}

const fileCursors = cursorsOf(files, { seq: files.seq, id: files.id, scope: files.workspaceId });

/** The files of a page: the workspace's, of a purpose if given, not expired at `now`. */
const filePage = preparedQueries(
  (db, page: PageQuery, ofPurpose: boolean) =>
    db
      .select()
      .from(files)
      .where(
        and(
          eq(files.workspaceId, sql.placeholder('workspaceId')),
          ofPurpose ? eq(files.purpose, sql.placeholder('purpose')) : undefined,
          current(sql.placeholder('now')),
          page.where,
        ),
      )
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page, ofPurpose) => `${page.shape}${ofPurpose ? ' of a purpose' : ''}`,
);

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
