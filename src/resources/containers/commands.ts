import type { Deps } from '../../deps';
import type { ContainerFileRow, ContainerRow } from '../../db/schema';
import { ApiError } from '../../errors';
import { newId } from '../../lib/ids';
import { isSandboxFileName } from '../../sandbox/sandbox';
import { getFile, type FileRow } from '../files/queries';
import {
  containerStatus,
  deleteContainerFile,
  deleteContainerRows,
  getContainer,
  getContainerFile,
  insertContainer,
  threadContainer,
  upsertContainerFile,
} from './queries';
import type { CreateContainerBody } from './schemas';

/**
 * The containers' use-cases. A container is a named sandbox session of the workspace: its session
 * is the sandbox's session under the container's id (sandbox.open({ workspaceId, threadId: <the
 * container's id> }): the port's key is any id a session is kept by), and its files are the
 * workspace's files (resources/files/), listed in container_files by their path under /mnt/data,
 * so that they outlive the session: a new session of the container is given them all again
 * (resources/runs/execution/code-interpreter-round.ts).
 */

export type ContainerDeps = Pick<Deps, 'db' | 'now' | 'config'>;

/** OpenAI's default: a container expires 20 minutes after its last use. */
export const DEFAULT_EXPIRY_MINUTES = 20;

/** POST /v1/containers. */
export async function createContainer(
  deps: ContainerDeps,
  workspaceId: string,
  body: CreateContainerBody,
): Promise<ContainerRow> {
  const at = deps.now();
  const row: ContainerRow = {
    id: newId('cntr'),
    workspaceId,
    name: body.name,
    threadId: null,
    expiresAfterMinutes: body.expires_after?.minutes ?? DEFAULT_EXPIRY_MINUTES,
    memoryLimit: body.memory_limit ?? null,
    createdAt: at,
    lastActiveAt: at,
  };
  const files = await userFiles(deps, workspaceId, row.id, body.file_ids ?? [], 'file_ids');
  await insertContainer(deps.db, row, files);
  return row;
}

/**
 * A thread's own container, the one its code runs in unless a response names another: its latest
 * that has not expired, else a new one (named after the thread), idle for as long as a session is kept.
 */
export async function ownContainer(deps: ContainerDeps, workspaceId: string, threadId: string): Promise<ContainerRow> {
  const at = deps.now();
  const kept = await threadContainer(deps.db, threadId, at);
  if (kept) return kept;
  const row: ContainerRow = {
    id: newId('cntr'),
    workspaceId,
    name: `thread ${threadId}`,
    threadId,
    expiresAfterMinutes: Math.max(1, Math.ceil(deps.config.GATEWAY_SANDBOX_IDLE_MS / 60_000)),
    memoryLimit: null,
    createdAt: at,
    lastActiveAt: at,
  };
  await insertContainer(deps.db, row, []);
  return row;
}

/** The files `ids` of the workspace as a container's files, each at its name under /mnt/data. */
export async function userFiles(
  deps: ContainerDeps,
  workspaceId: string,
  containerId: string,
  ids: readonly string[],
  param: string,
): Promise<ContainerFileRow[]> {
  const at = deps.now();
  const rows: ContainerFileRow[] = [];
  for (const [index, id] of [...new Set(ids)].entries()) {
    const file = await getFile(deps.db, workspaceId, id, at).catch((error: unknown) => {
      throw error instanceof ApiError && error.code === 'file_not_found'
        ? new ApiError('file_not_found', `No file found with id '${id}'.`, { param: `${param}[${index}]` })
        : error;
    });
    rows.push(containerFileOf(containerId, file, 'user', at));
  }
  return rows;
}

/** A file at its name under /mnt/data (its id when its name is no file name: a path, a control character). */
export const sessionPath = (file: Pick<FileRow, 'id' | 'filename'>): string =>
  isSandboxFileName(file.filename) ? file.filename : file.id;

function containerFileOf(
  containerId: string,
  file: FileRow,
  source: ContainerFileRow['source'],
  at: number,
): ContainerFileRow {
  return { containerId, fileId: file.id, path: sessionPath(file), source, bytes: file.bytes, createdAt: at };
}

/** A container still running, for code to run in: an expired one is refused, naming `param`. */
export async function runningContainer(
  deps: ContainerDeps,
  workspaceId: string,
  id: string,
  param: string,
): Promise<ContainerRow> {
  const row = await getContainer(deps.db, workspaceId, id, param);
  if (containerStatus(row, deps.now()) === 'expired') {
    throw new ApiError('invalid_value', `Container '${id}' has expired: create another, or use 'auto'.`, { param });
  }
  return row;
}

/**
 * DELETE /v1/containers/{id}: its rows go; its files stay the workspace's. Its session is never
 * opened again (no container has its id) and ends once idle (GATEWAY_SANDBOX_IDLE_MS): the port
 * has no way to end a session it is not holding.
 */
export async function deleteContainer(deps: ContainerDeps, workspaceId: string, id: string): Promise<void> {
  await getContainer(deps.db, workspaceId, id);
  await deleteContainerRows(deps.db, id);
}

/** POST /v1/containers/{id}/files with a file's id: the file put at its name, for the container's next session. */
export async function addContainerFile(
  deps: ContainerDeps,
  workspaceId: string,
  containerId: string,
  fileId: string,
): Promise<ContainerFileRow> {
  await getContainer(deps.db, workspaceId, containerId);
  const file = await getFile(deps.db, workspaceId, fileId, deps.now()).catch((error: unknown) => {
    throw error instanceof ApiError && error.code === 'file_not_found'
      ? new ApiError('file_not_found', error.message, { param: 'file_id' })
      : error;
  });
  const row = containerFileOf(containerId, file, 'user', deps.now());
  await upsertContainerFile(deps.db, row);
  return row;
}

/** A file the container's code wrote, stored as `fileId`: listed at its path, replacing what was there. */
export async function recordWrittenFile(
  deps: ContainerDeps,
  containerId: string,
  file: { path: string; fileId: string; bytes: number },
): Promise<void> {
  await upsertContainerFile(deps.db, {
    containerId,
    fileId: file.fileId,
    path: file.path,
    source: 'assistant',
    bytes: file.bytes,
    createdAt: deps.now(),
  });
}

/** A container's file and the workspace's file behind it (for its content): 404 when either is gone. */
export async function containerFile(
  deps: ContainerDeps,
  workspaceId: string,
  containerId: string,
  fileId: string,
): Promise<{ entry: ContainerFileRow; file: FileRow }> {
  await getContainer(deps.db, workspaceId, containerId);
  const entry = await getContainerFile(deps.db, containerId, fileId);
  const file = await getFile(deps.db, workspaceId, fileId, deps.now());
  return { entry, file };
}

export async function removeContainerFile(
  deps: ContainerDeps,
  workspaceId: string,
  containerId: string,
  fileId: string,
): Promise<void> {
  await getContainer(deps.db, workspaceId, containerId);
  await getContainerFile(deps.db, containerId, fileId);
  await deleteContainerFile(deps.db, containerId, fileId);
}
