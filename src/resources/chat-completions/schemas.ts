import * as z from 'zod';
import { metadataSchema, queryInteger } from '../../http/schemas';

const tokenCount = z.int().min(0).nullable().optional();

/**
 * POST /v1/chat/completions, checked only as far as the gateway reads it: the model its virtual
 * key is resolved for, the messages its token reservation is sized by, whether it streams, the
 * completion caps and `stream_options` (the gateway asks for usage), `metadata` (what rate-limit
 * policies match on, as for runs, and a stored completion keeps) and `store` (stored.ts). Every
 * other field, and every field of a message, goes to the provider as sent: tools, response_format,
 * logprobs, n, seed, image and audio parts, fields this gateway has never heard of. The provider is
 * the judge of those.
 */
export const createChatCompletionBody = z
  .looseObject({
    model: z.string().min(1).max(256),
    messages: z.array(z.looseObject({ role: z.string().min(1) })).min(1),
    stream: z.boolean().nullable().optional(),
    stream_options: z.looseObject({ include_usage: z.boolean().nullable().optional() }).nullable().optional(),
    max_tokens: tokenCount,
    max_completion_tokens: tokenCount,
    /** Choices to complete, each up to the cap: the reservation is the cap once per choice. */
    n: z.int().min(1).max(128).nullable().optional(),
    metadata: metadataSchema.nullable().optional(),
    store: z.boolean().nullable().optional(),
  })
  .meta({ id: 'CreateChatCompletionRequest' });

export type CreateChatCompletionBody = z.infer<typeof createChatCompletionBody>;

const listLimit = queryInteger({ min: 1, max: 100 }).default(20);
/** Stored completions and their messages are listed oldest first unless asked otherwise, as OpenAI's are. */
const listOrder = z.enum(['asc', 'desc']).default('asc');
const cursor = z.string().min(1).max(256).optional();

/** `metadata[key]=value` in a query string: one metadata pair a list is filtered by. */
const METADATA_PARAM = /^metadata\[(.+)\]$/;

/**
 * GET /v1/chat/completions: OpenAI's `limit`, `order`, `after`, `model`, and the metadata pairs a
 * completion must have, each as `metadata[key]=value` (how the SDKs write an object in a query);
 * any other parameter is refused by its name. The pairs are held to metadata's own bounds.
 */
export const listStoredCompletionsQuery = z
  .object({ limit: listLimit, order: listOrder, after: cursor, model: z.string().min(1).max(256).optional() })
  .catchall(z.string())
  .transform(({ limit, order, after, model, ...rest }, ctx) => {
    const metadata: Record<string, string> = {};
    for (const [name, value] of Object.entries(rest)) {
      const key = METADATA_PARAM.exec(name)?.[1];
      if (key === undefined) {
        ctx.addIssue({
          code: 'custom',
          message: `Unrecognized query parameter supplied: '${name}'.`,
          params: { code: 'unknown_parameter' },
          path: [name],
        });
        return z.NEVER;
      }
      metadata[key] = value;
    }
    return { limit, order, after, model, metadata };
  })
  .pipe(
    z.object({
      limit: z.int(),
      order: z.enum(['asc', 'desc']),
      after: z.union([z.string(), z.undefined()]),
      model: z.union([z.string(), z.undefined()]),
      metadata: metadataSchema,
    }),
  );
export type ListStoredCompletionsQuery = z.infer<typeof listStoredCompletionsQuery>;

/** GET /v1/chat/completions/{completion_id}/messages: `limit`, `order`, `after` (a message's id). */
export const listStoredMessagesQuery = z.strictObject({ limit: listLimit, order: listOrder, after: cursor });
export type ListStoredMessagesQuery = z.infer<typeof listStoredMessagesQuery>;

/** POST /v1/chat/completions/{completion_id}: the metadata only, as OpenAI allows (null clears it). */
export const updateStoredCompletionBody = z.strictObject({ metadata: metadataSchema.nullable() });
export type UpdateStoredCompletionBody = z.infer<typeof updateStoredCompletionBody>;
