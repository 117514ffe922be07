import { and, eq, gt, inArray, isNotNull, isNull, lte, or, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { insertWhere, preparedQueries, type Db } from '../../db/client';
import { fileReservations, files, vectorStoreChunks, vectorStoreFiles, type FilePurpose } from '../../db/schema';
import { ApiError } from '../../errors';
import type { CursorListQuery } from '../../http/schemas';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';
import { filesBytes, reservationLive, reservationState, reservedBytes } from './reservation-queries';
import { quotaExceeded } from '../identities/quotas';

/**
 * Uploaded files' rows, scoped to a workspace (their bytes: deps.blobs, under `blobKey`). A file
 * past its `expires_at` is gone for every read, as OpenAI deletes it then.
 */

export type FileRow = Omit<typeof files.$inferSelect, 'seq'>;

/**
 * Writes the file's row unless the workspace's files would then hold more than `maxBytes`
 * (GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE) beside its other uploads' live reservations: 400
 * `quota_exceeded`, checked in the insert itself, so that uploads finishing together cannot pass
 * the cap between them. With `upload`, the row is an upload's (resources/files/reservation.ts): its
 * reservation must still be live at `now` (one that lapsed may have had its bytes swept) and is
 * released in the same batch, the row holding its bytes from then on (a lapsed one is an Error:
 * the server's fault, a 500). Without, the row is written as it is (tests that store files directly).
 */
export async function insertFile(db: Db, row: FileRow, upload?: { maxBytes: number; now: number }): Promise<void> {
  if (!upload) {
    await db.insert(files).values(row);
    return;
  }
  const { maxBytes, now } = upload;
  const fits = sql`${filesBytes(row.workspaceId)} + ${reservedBytes(row.workspaceId, now, row.blobKey)} + ${row.bytes} <= ${maxBytes}`;
  const [inserted] = await db.batch([
    insertWhere(db, files, row, sql`${fits} AND ${reservationLive(row.blobKey, now)}`).returning({ id: files.id }),
    // Only once the row holds the bytes: a refused upload keeps its reservation until they are deleted.
    db
      .delete(fileReservations)
      .where(
        and(
          eq(fileReservations.blobKey, row.blobKey),
          sql`EXISTS (SELECT 1 FROM ${files} WHERE ${files.id} = ${row.id})`,
        ),
      ),
  ]);
  if (inserted.length > 0) return;
  const held = await reservationState(db, { workspaceId: row.workspaceId, blobKey: row.blobKey, now });
  if (held.own === null) throw new Error(`the upload of ${row.id} lost its reservation before its row was written`);
  throw storageExceeded({ files: held.files, uploading: held.others, maxBytes });
}

/** The 400 for a workspace whose files, and uploads under way, leave no room for this one. */
export function storageExceeded({
  files,
  uploading,
  maxBytes,
}: {
  files: number;
  uploading: number;
  maxBytes: number;
}): ApiError {
  const held =
    uploading > 0 ? `hold ${files} bytes, and its uploads under way ${uploading} more` : `hold ${files} bytes`;
  return quotaExceeded(
    `This workspace's files ${held}; its cap is ${maxBytes} (GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE), and this file does not fit. Delete files before uploading more.`,
    'file',
  );
}

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
      const rows = await filePage(db, page, ofPurpose).all({
        ...page.values,
        workspaceId,
        purpose: query.purpose,
        now,
      });
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
 * the row goes here; the caller deletes the bytes afterwards (a blob without a row is invisible),
 * then releases the lapsed reservation the batch leaves in the row's place: should deleting the
 * bytes fail, or the process die first, the sweep of lapsed reservations deletes them
 * (resources/files/sweep.ts). Answers the deleted row.
 */
export async function deleteFile(db: Db, workspaceId: string, id: string): Promise<FileRow> {
  const gone = sql`NOT EXISTS (SELECT 1 FROM ${files} WHERE ${files.id} = ${id})`;
  const itsStores = db
    .select({ id: vectorStoreFiles.vectorStoreId })
    .from(vectorStoreFiles)
    .where(and(eq(vectorStoreFiles.fileId, id), eq(vectorStoreFiles.workspaceId, workspaceId)));
  const [, deleted] = await db.batch([
    db.run(sql`INSERT INTO file_reservations (blob_key, workspace_id, bytes, expires_at)
      SELECT ${files.blobKey}, ${files.workspaceId}, 0, 0 FROM ${files} WHERE ${files.id} = ${id} AND ${files.workspaceId} = ${workspaceId}
      ON CONFLICT (blob_key) DO NOTHING`),
    db
      .delete(files)
      .where(and(eq(files.id, id), eq(files.workspaceId, workspaceId)))
      .returning(),
    // Through the stores that hold it (vector_store_files_file, then the chunks' store-and-file index).
    db
      .delete(vectorStoreChunks)
      .where(and(inArray(vectorStoreChunks.vectorStoreId, itsStores), eq(vectorStoreChunks.fileId, id), gone)),
    db
      .delete(vectorStoreFiles)
      .where(and(eq(vectorStoreFiles.fileId, id), eq(vectorStoreFiles.workspaceId, workspaceId), gone)),
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
