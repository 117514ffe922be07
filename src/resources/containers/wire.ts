import type { ContainerFileRow, ContainerRow } from '../../db/schema';
import { toUnixSeconds } from '../../lib/time';
import type { ContainerFileObject, ContainerObject } from './objects';
import { containerStatus } from './queries';

/** A container's file is at /mnt/data/<path> in its session; OpenAI answers the whole path. */
export const SANDBOX_DIR = '/mnt/data';

export function toContainerJson(row: ContainerRow, now: number): ContainerObject {
  return {
    id: row.id,
    object: 'container',
    name: row.name,
    status: containerStatus(row, now),
    created_at: toUnixSeconds(row.createdAt),
    last_active_at: toUnixSeconds(row.lastActiveAt),
    expires_after: { anchor: 'last_active_at', minutes: row.expiresAfterMinutes },
    ...(row.memoryLimit === null ? {} : { memory_limit: row.memoryLimit }),
  };
}

export function toContainerFileJson(row: ContainerFileRow): ContainerFileObject {
  return {
    id: row.fileId,
    object: 'container.file',
    container_id: row.containerId,
    bytes: row.bytes,
    created_at: toUnixSeconds(row.createdAt),
    path: `${SANDBOX_DIR}/${row.path}`,
    source: row.source,
  };
}
