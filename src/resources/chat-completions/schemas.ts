import * as z from 'zod';

const tokenCount = z.int().min(0).nullable().optional();

/**
 * POST /v1/chat/completions, checked only as far as the gateway reads it: the model its virtual
 * key is resolved for, the messages its token reservation is sized by, whether it streams, the
 * completion caps and `stream_options` (the gateway asks for usage), and `metadata` (what rate-limit
 * policies match on, as for runs). Every other field, and every field of a message, goes to the
 * provider as sent: tools, response_format, logprobs, n, seed, image and audio parts, fields this
 * gateway has never heard of. The provider is the judge of those.
 */
export const createChatCompletionBody = z
  .looseObject({
    model: z.string().min(1).max(256),
    messages: z.array(z.looseObject({ role: z.string().min(1) })).min(1),
    stream: z.boolean().nullable().optional(),
    stream_options: z.looseObject({ include_usage: z.boolean().nullable().optional() }).nullable().optional(),
    max_tokens: tokenCount,
    max_completion_tokens: tokenCount,
    metadata: z.record(z.string().max(64), z.string().max(512)).nullable().optional(),
  })
  .meta({ id: 'CreateChatCompletionRequest' });

export type CreateChatCompletionBody = z.infer<typeof createChatCompletionBody>;
