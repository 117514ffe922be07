import * as z from 'zod';
import { queryInteger } from '../../http/schemas';

/**
 * Files: the fields of an upload (POST /v1/files, multipart/form-data, read by resources/files/upload.ts)
 * and the list's query. Bounds are OpenAI's.
 */

/** The purposes a client may upload with (OpenAI's; `*_output` purposes are its own products). */
export const UPLOAD_PURPOSES = ['assistants', 'batch', 'fine-tune', 'vision', 'user_data', 'evals'] as const;

/** OpenAI: an expiry 1 hour to 30 days after creation. */
export const FILE_EXPIRY_SECONDS = { min: 3600, max: 2_592_000 } as const;

/**
 * The upload's text fields, once `expires_after[anchor]` and `expires_after[seconds]` are nested
 * (a multipart body has only strings: the seconds are digits).
 */
export const uploadFields = z.strictObject({
  purpose: z.enum(UPLOAD_PURPOSES),
  expires_after: z
    .strictObject({
      anchor: z.literal('created_at'),
      seconds: queryInteger(FILE_EXPIRY_SECONDS),
    })
    .optional(),
});
export type UploadFields = z.infer<typeof uploadFields>;

/** GET /v1/files: OpenAI's limit is 1 to 10,000, 10,000 by default; `after` only (no `before`). */
export const listFilesQuery = z.strictObject({
  purpose: z
    .enum([
      'assistants',
      'assistants_output',
      'batch',
      'batch_output',
      'fine-tune',
      'fine-tune-results',
      'vision',
      'user_data',
      'evals',
    ])
    .optional(),
  limit: queryInteger({ min: 1, max: 10_000 }).default(10_000),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).max(256).optional(),
});
export type ListFilesQuery = z.infer<typeof listFilesQuery>;
