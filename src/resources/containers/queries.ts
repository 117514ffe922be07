import { and, desc, eq, sql } from 'drizzle-orm';
import { preparedQueries, type Db } from '../../db/client';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';
import { containerFiles, containers, responses, type ContainerFileRow, type ContainerRow } from '../../db/schema';
import { ApiError } from '../../errors';
import type { CursorListQuery } from '../../http/schemas';

/**
 * Containers' and their files' rows, scoped to a workspace. A container is expired once idle past
 * its minutes (containerStatus): it is still read, listed and deleted, but runs no more code.
 */

export function containerStatus(row: ContainerRow, now: number): 'running' | 'expired' {
  return now > row.lastActiveAt + row.expiresAfterMinutes * 60_000 ? 'expired' : 'running';
}

export const containerNotFound = (id: string, param?: string) =>
  new ApiError('container_not_found', `No container found with id '${id}'.`, param === undefined ? {} : { param });

export async function getContainer(db: Db, workspaceId: string, id: string, param?: string): Promise<ContainerRow> {
  const [row] = await db
    .select()
    .from(containers)
    .where(and(eq(containers.id, id), eq(containers.workspaceId, workspaceId)))
    .limit(1);
  if (!row) throw containerNotFound(id, param);
  const { seq: _seq, ...container } = row;
  return container;
}

export async function insertContainer(db: Db, row: ContainerRow, files: readonly ContainerFileRow[]): Promise<void> {
  await db.batch([db.insert(containers).values(row), ...files.map((file) => upsertFileStatement(db, file))]);
}

/** The latest container of the thread's own that has not expired at `now`, if any. */
export async function threadContainer(db: Db, threadId: string, now: number): Promise<ContainerRow | null> {
  const [row] = await db
    .select()
    .from(containers)
    .where(eq(containers.threadId, threadId))
    .orderBy(desc(containers.seq))
    .limit(1);
  if (!row || containerStatus(row, now) === 'expired') return null;
  const { seq: _seq, ...container } = row;
  return container;
}

/** The container a response's code runs in (responses.container_id), if it has one. */
export async function responseContainerId(db: Db, responseId: string): Promise<string | null> {
  const [row] = await db
    .select({ containerId: responses.containerId })
    .from(responses)
    .where(eq(responses.id, responseId))
    .limit(1);
  return row?.containerId ?? null;
}

export async function touchContainer(db: Db, id: string, now: number): Promise<void> {
  await db.update(containers).set({ lastActiveAt: now }).where(eq(containers.id, id));
}

/** A page of the workspace's containers (of one name, when given), OpenAI's cursor way. */
export async function listContainers(
  db: Db,
  workspaceId: string,
  query: CursorListQuery & { name?: string | undefined },
): Promise<{ rows: ContainerRow[]; hasMore: boolean }> {
  const named = query.name !== undefined;
  return cursorPage(query, {
    db,
    cursors: containerCursors,
    scope: workspaceId,
    noun: 'container',
    select: async (page) => {
      const rows = await containerPage(db, page, named).all({ ...page.values, workspaceId, name: query.name });
      return rows.map(({ seq: _seq, ...row }) => row);
    },
  });
}

const containerCursors = cursorsOf(containers, {
  seq: containers.seq,
  id: containers.id,
  scope: containers.workspaceId,
});

const containerPage = preparedQueries(
  (db, page: PageQuery, named: boolean) =>
    db
      .select()
      .from(containers)
      .where(
        and(
          eq(containers.workspaceId, sql.placeholder('workspaceId')),
          named ? eq(containers.name, sql.placeholder('name')) : undefined,
          page.where,
        ),
      )
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page, named) => `${page.shape}${named ? ' named' : ''}`,
);

/** The container's row and its files' rows go (the files themselves stay the workspace's). */
export async function deleteContainerRows(db: Db, id: string): Promise<void> {
  await db.batch([
    db.delete(containerFiles).where(eq(containerFiles.containerId, id)),
    db.delete(containers).where(eq(containers.id, id)),
  ]);
}

// ── Its files ────────────────────────────────────────────────────────────────────────────────

const upsertFileStatement = (db: Db, row: ContainerFileRow) =>
  db
    .insert(containerFiles)
    .values(row)
    .onConflictDoUpdate({
      target: [containerFiles.containerId, containerFiles.path],
      set: { fileId: row.fileId, source: row.source, bytes: row.bytes, createdAt: row.createdAt },
    });

/** Puts a file at its path in the container, replacing the one there. */
export async function upsertContainerFile(db: Db, row: ContainerFileRow): Promise<void> {
  await upsertFileStatement(db, row);
}

export const containerFileNotFound = (containerId: string, id: string) =>
  new ApiError('container_file_not_found', `No file found with id '${id}' in container '${containerId}'.`);

export async function getContainerFile(db: Db, containerId: string, fileId: string): Promise<ContainerFileRow> {
  const [row] = await db
    .select()
    .from(containerFiles)
    .where(and(eq(containerFiles.containerId, containerId), eq(containerFiles.fileId, fileId)))
    .orderBy(desc(containerFiles.seq))
    .limit(1);
  if (!row) throw containerFileNotFound(containerId, fileId);
  const { seq: _seq, ...file } = row;
  return file;
}

/** Every file of the container, oldest first, at most `limit`: what a new session of it is given. */
export async function allContainerFiles(db: Db, containerId: string, limit: number): Promise<ContainerFileRow[]> {
  const rows = await db
    .select()
    .from(containerFiles)
    .where(eq(containerFiles.containerId, containerId))
    .orderBy(containerFiles.seq)
    .limit(limit);
  return rows.map(({ seq: _seq, ...row }) => row);
}

export async function listContainerFiles(
  db: Db,
  containerId: string,
  query: CursorListQuery,
): Promise<{ rows: ContainerFileRow[]; hasMore: boolean }> {
  return cursorPage(query, {
    db,
    cursors: containerFileCursors,
    scope: containerId,
    noun: 'container file',
    select: async (page) => {
      const rows = await containerFilePage(db, page).all({ ...page.values, containerId });
      return rows.map(({ seq: _seq, ...row }) => row);
    },
  });
}

const containerFileCursors = cursorsOf(containerFiles, {
  seq: containerFiles.seq,
  id: containerFiles.fileId,
  scope: containerFiles.containerId,
});

const containerFilePage = preparedQueries(
  (db, page: PageQuery) =>
    db
      .select()
      .from(containerFiles)
      .where(and(eq(containerFiles.containerId, sql.placeholder('containerId')), page.where))
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page) => page.shape,
);

export async function deleteContainerFile(db: Db, containerId: string, fileId: string): Promise<void> {
  await db
    .delete(containerFiles)
    .where(and(eq(containerFiles.containerId, containerId), eq(containerFiles.fileId, fileId)));
}
