import { toUnixSeconds } from '../../lib/time';
import type { VectorStoreFileBatchObject, VectorStoreFileObject, VectorStoreObject } from './objects';
import type { FileBatchRow, FileCounts, VectorStoreFileRow, VectorStoreRow } from './queries';

/** OpenAI's VectorStoreObject, VectorStoreFileObject and VectorStoreFileBatchObject, from their rows. */

export function toVectorStoreJson(
  row: VectorStoreRow,
  counts: FileCounts,
  usageBytes: number,
  now: number,
): VectorStoreObject {
  const expired = row.expiresAt !== null && row.expiresAt <= now;
  return {
    id: row.id,
    object: 'vector_store' as const,
    created_at: toUnixSeconds(row.createdAt),
    name: row.name,
    usage_bytes: usageBytes,
    file_counts: counts,
    status: expired ? ('expired' as const) : counts.in_progress > 0 ? ('in_progress' as const) : ('completed' as const),
    ...(row.expiresAfter ? { expires_after: row.expiresAfter } : {}),
    expires_at: row.expiresAt === null ? null : toUnixSeconds(row.expiresAt),
    last_active_at: toUnixSeconds(row.lastActiveAt),
    metadata: row.metadata,
  };
}

export function toVectorStoreFileJson(row: VectorStoreFileRow): VectorStoreFileObject {
  return {
    id: row.fileId,
    object: 'vector_store.file' as const,
    usage_bytes: row.usageBytes,
    created_at: toUnixSeconds(row.createdAt),
    vector_store_id: row.vectorStoreId,
    status: row.status,
    last_error: row.lastError,
    chunking_strategy: row.chunkingStrategy,
    attributes: row.attributes,
  };
}

/** A batch is cancelled once cancelled; otherwise in progress while a file is, failed if every file failed. */
export function toFileBatchJson(row: FileBatchRow, counts: FileCounts): VectorStoreFileBatchObject {
  const status =
    row.cancelledAt !== null
      ? 'cancelled'
      : counts.in_progress > 0
        ? 'in_progress'
        : counts.total > 0 && counts.failed === counts.total
          ? 'failed'
          : 'completed';
  return {
    id: row.id,
    object: 'vector_store.files_batch' as const,
    created_at: toUnixSeconds(row.createdAt),
    vector_store_id: row.vectorStoreId,
    status,
    file_counts: counts,
  };
}
