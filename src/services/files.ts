import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client';
import { files } from '../db/schema';
import { ApiError } from '../errors';

/** Uploaded files' rows, scoped to a workspace (their bytes: deps.blobs, under `blobKey`). */

export type FileRow = Omit<typeof files.$inferSelect, 'seq'>;

export async function insertFile(db: Db, row: FileRow): Promise<void> {
  await db.insert(files).values(row);
}

export async function getFile(db: Db, workspaceId: string, id: string): Promise<FileRow> {
  const [row] = await db
    .select()
    .from(files)
    .where(and(eq(files.id, id), eq(files.workspaceId, workspaceId)))
    .limit(1);
  if (!row) throw new ApiError('file_not_found', `No such File object: ${id}`);
  return row;
}
