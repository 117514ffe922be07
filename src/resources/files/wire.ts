import { toUnixSeconds } from '../../lib/time';
import type { FileObject } from './objects';
import type { FileRow } from './queries';

/**
 * OpenAI's File object, from its row. `status` is always `processed` (a file is stored whole before
 * it is answered) and `status_details` null, as OpenAI sends them for every file.
 */
export function toFileJson(row: FileRow): FileObject {
  return {
    id: row.id,
    object: 'file' as const,
    bytes: row.bytes,
    created_at: toUnixSeconds(row.createdAt),
    expires_at: row.expiresAt === null ? null : toUnixSeconds(row.expiresAt),
    filename: row.filename,
    purpose: row.purpose,
    status: 'processed' as const,
    status_details: null,
  };
}
