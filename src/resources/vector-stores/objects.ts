import * as z from 'zod';
import { nullableSeconds, onDemand, seconds, textPart } from '../../http/objects';
import { metadataSchema } from '../../http/schemas';
import { attributesSchema, expiresAfterSchema } from './schemas';

/** Vector stores, their files and batches, their files' content and their search results, as the API answers them (see http/objects.ts). */

const fileCounts = onDemand(() =>
  z.strictObject({
    in_progress: z.int(),
    completed: z.int(),
    cancelled: z.int(),
    failed: z.int(),
    total: z.int(),
  }),
);

export const vectorStoreObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('vector_store'),
      created_at: seconds,
      name: z.string().nullable(),
      usage_bytes: z.int(),
      file_counts: fileCounts(),
      status: z.enum(['expired', 'in_progress', 'completed']),
      expires_after: expiresAfterSchema.optional(),
      expires_at: nullableSeconds,
      last_active_at: seconds,
      metadata: metadataSchema,
    })
    .meta({ id: 'VectorStoreObject' }),
);

export const vectorStoreFileObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('vector_store.file'),
      usage_bytes: z.int(),
      created_at: seconds,
      vector_store_id: z.string(),
      status: z.enum(['in_progress', 'completed', 'cancelled', 'failed']),
      last_error: z
        .strictObject({ code: z.enum(['server_error', 'unsupported_file', 'invalid_file']), message: z.string() })
        .nullable(),
      chunking_strategy: z.discriminatedUnion('type', [
        z.strictObject({
          type: z.literal('static'),
          static: z.strictObject({ max_chunk_size_tokens: z.int(), chunk_overlap_tokens: z.int() }),
        }),
        z.strictObject({ type: z.literal('other') }),
      ]),
      attributes: attributesSchema.nullable(),
    })
    .meta({ id: 'VectorStoreFileObject' }),
);

export const vectorStoreFileBatchObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('vector_store.files_batch'),
      created_at: seconds,
      vector_store_id: z.string(),
      status: z.enum(['cancelled', 'in_progress', 'failed', 'completed']),
      file_counts: fileCounts(),
    })
    .meta({ id: 'VectorStoreFileBatchObject' }),
);

/** GET /v1/vector_stores/{id}/files/{file_id}/content: the file's text as stored, its chunks in order. */
export const vectorStoreFileContentPage = onDemand(() =>
  z
    .strictObject({
      object: z.literal('vector_store.file_content.page'),
      data: z.array(textPart()),
      has_more: z.boolean(),
      next_page: z.null(),
    })
    .meta({ id: 'VectorStoreFileContentPage' }),
);

export const vectorStoreSearchResultsPage = onDemand(() =>
  z
    .strictObject({
      object: z.literal('vector_store.search_results.page'),
      search_query: z.array(z.string()),
      data: z.array(
        z.strictObject({
          file_id: z.string(),
          filename: z.string(),
          score: z.number(),
          attributes: attributesSchema.nullable(),
          content: z.array(textPart()),
        }),
      ),
      has_more: z.boolean(),
      next_page: z.null(),
    })
    .meta({ id: 'VectorStoreSearchResultsPage' }),
);

export type VectorStoreObject = z.infer<ReturnType<typeof vectorStoreObject>>;
export type VectorStoreFileObject = z.infer<ReturnType<typeof vectorStoreFileObject>>;
export type VectorStoreFileBatchObject = z.infer<ReturnType<typeof vectorStoreFileBatchObject>>;
export type VectorStoreSearchResultsPage = z.infer<ReturnType<typeof vectorStoreSearchResultsPage>>;
