import * as z from 'zod';
import { cursorListQuery } from '../../http/schemas';

/** The Containers API's requests (OpenAI's ContainerCreateParams and its files'), bounded. */

export const CONTAINER_LIMITS = {
  name: 256,
  /** Files a container is made with (OpenAI's `file_ids`); a session is given at most MAX_SESSION_FILES. */
  fileIds: 20,
  /** OpenAI's bounds on expires_after.minutes. */
  minutes: { min: 1, max: 1440 },
} as const;

/** A file id as given (the workspace's `file-…`). */
export const fileId = z.string().min(1).max(256);

export const memoryLimit = z.enum(['1g', '4g', '16g', '64g']);

export const expiresAfter = z.strictObject({
  anchor: z.literal('last_active_at'),
  minutes: z.int().min(CONTAINER_LIMITS.minutes.min).max(CONTAINER_LIMITS.minutes.max),
});

/** POST /v1/containers. */
export const createContainerBody = z.strictObject({
  name: z.string().min(1).max(CONTAINER_LIMITS.name),
  file_ids: z.array(fileId).max(CONTAINER_LIMITS.fileIds).optional(),
  expires_after: expiresAfter.optional(),
  memory_limit: memoryLimit.optional(),
});
export type CreateContainerBody = z.infer<typeof createContainerBody>;

/** GET /v1/containers. */
export const listContainersQuery = cursorListQuery.extend({
  name: z.string().min(1).max(CONTAINER_LIMITS.name).optional(),
});

/** POST /v1/containers/{id}/files with a JSON body: a file of the workspace, by id. */
export const createContainerFileBody = z.strictObject({ file_id: fileId });
