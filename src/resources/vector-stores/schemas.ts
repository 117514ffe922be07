import * as z from 'zod';
import { cursorListQuery, metadataSchema } from '../../http/schemas';
import { toolResourcesSchema } from '../../db/json-columns';

/**
 * Vector stores, their files and file batches: the bodies OpenAI's Vector stores API takes
 * (CreateVectorStoreRequest, UpdateVectorStoreRequest, CreateVectorStoreFileRequest,
 * CreateVectorStoreFileBatchRequest, …), with its bounds.
 */

export const VECTOR_STORE_LIMITS = {
  /** file_ids of a store's creation (OpenAI: 500) and of a batch (OpenAI: 2000). */
  storeFiles: 500,
  batchFiles: 2000,
  attributes: 16,
} as const;

const fileId = z.string().min(1).max(256);

/** `auto` (OpenAI's 800 tokens, 400 of overlap) or `static` with its two sizes; the overlap at most half the size. */
export const chunkingStrategySchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('auto') }),
  z.strictObject({
    type: z.literal('static'),
    static: z
      .strictObject({
        max_chunk_size_tokens: z.int().min(100).max(4096),
        chunk_overlap_tokens: z.int().min(0),
      })
      .refine((value) => value.chunk_overlap_tokens <= value.max_chunk_size_tokens / 2, {
        path: ['chunk_overlap_tokens'],
        error: "Invalid 'chunk_overlap_tokens': must not exceed half of max_chunk_size_tokens.",
      }),
  }),
]);
export type ChunkingStrategyInput = z.infer<typeof chunkingStrategySchema>;

export const attributesSchema = z
  .record(z.string().max(64), z.union([z.string().max(512), z.number(), z.boolean()]))
  .refine((value) => Object.keys(value).length <= VECTOR_STORE_LIMITS.attributes, {
    error: `Attributes can have at most ${VECTOR_STORE_LIMITS.attributes} key-value pairs.`,
  });

export const expiresAfterSchema = z.strictObject({
  anchor: z.literal('last_active_at'),
  days: z.int().min(1).max(365),
});

export const createVectorStoreBody = z.strictObject({
  name: z.string().max(256).optional(),
  /** Accepted for OpenAI's clients; not stored (the VectorStoreObject has no description). */
  description: z.string().max(512).optional(),
  file_ids: z.array(fileId).max(VECTOR_STORE_LIMITS.storeFiles).optional(),
  chunking_strategy: chunkingStrategySchema.optional(),
  expires_after: expiresAfterSchema.optional(),
  metadata: metadataSchema.nullable().optional(),
});
export type CreateVectorStoreBody = z.infer<typeof createVectorStoreBody>;

export const updateVectorStoreBody = z.strictObject({
  name: z.string().max(256).nullable().optional(),
  expires_after: expiresAfterSchema.nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
});
export type UpdateVectorStoreBody = z.infer<typeof updateVectorStoreBody>;

export const createVectorStoreFileBody = z.strictObject({
  file_id: fileId,
  chunking_strategy: chunkingStrategySchema.optional(),
  attributes: attributesSchema.nullable().optional(),
});
export type CreateVectorStoreFileBody = z.infer<typeof createVectorStoreFileBody>;

export const updateVectorStoreFileBody = z.strictObject({
  attributes: attributesSchema.nullable(),
});

export const createFileBatchBody = z
  .strictObject({
    file_ids: z.array(fileId).min(1).max(VECTOR_STORE_LIMITS.batchFiles).optional(),
    files: z.array(createVectorStoreFileBody).min(1).max(VECTOR_STORE_LIMITS.batchFiles).optional(),
    chunking_strategy: chunkingStrategySchema.optional(),
    attributes: attributesSchema.nullable().optional(),
  })
  .superRefine((body, ctx) => {
    if ((body.file_ids === undefined) === (body.files === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: body.file_ids === undefined ? ['file_ids'] : ['files'],
        message:
          body.file_ids === undefined
            ? "Missing required parameter: 'file_ids' (or 'files')."
            : "'file_ids' and 'files' are mutually exclusive: send one of them.",
        params: { code: body.file_ids === undefined ? 'missing_required_parameter' : 'invalid_value' },
      });
    }
  });
export type CreateFileBatchBody = z.infer<typeof createFileBatchBody>;

export const vectorStoreFileStatus = z.enum(['in_progress', 'completed', 'failed', 'cancelled']);

export const listVectorStoreFilesQuery = cursorListQuery.extend({ filter: vectorStoreFileStatus.optional() });
export type ListVectorStoreFilesQuery = z.infer<typeof listVectorStoreFilesQuery>;

/**
 * Tool resources as an assistant or a new thread is given them: file_search may also create its
 * vector store, from files (`vector_stores`, at most one, OpenAI's rule), instead of naming one
 * (`vector_store_ids`). Stored as ToolResources, the store created named by its id.
 */
export const toolResourcesInputSchema = toolResourcesSchema.extend({
  file_search: toolResourcesSchema.shape.file_search
    .unwrap()
    .extend({
      vector_stores: z
        .array(
          z.strictObject({
            file_ids: z.array(z.string().min(1).max(256)).max(VECTOR_STORE_LIMITS.storeFiles).optional(),
            chunking_strategy: chunkingStrategySchema.optional(),
            metadata: metadataSchema.nullable().optional(),
          }),
        )
        .max(1)
        .optional(),
    })
    .refine((value) => value.vector_store_ids === undefined || value.vector_stores === undefined, {
      path: ['vector_stores'],
      error: "'vector_store_ids' and 'vector_stores' are mutually exclusive: send one of them.",
    })
    .optional(),
});
export type ToolResourcesInput = z.infer<typeof toolResourcesInputSchema>;

/** A vector store that tool_resources create. */
export type InlineVectorStore = NonNullable<NonNullable<ToolResourcesInput['file_search']>['vector_stores']>[number];
