import * as z from 'zod';

const tokens = z.array(z.int().min(0)).min(1);

/**
 * POST /v1/completions (legacy), checked only as far as the gateway reads it: the model, the
 * prompt its reservation is sized by, whether it streams and `stream_options` (the gateway asks for
 * usage), and `max_tokens` (16 when absent, as OpenAI's default). The rest goes on as sent.
 */
export const createCompletionBody = z
  .looseObject({
    model: z.string().min(1).max(256),
    prompt: z.union([z.string(), z.array(z.string()).min(1), tokens, z.array(tokens).min(1)]).nullable(),
    stream: z.boolean().nullable().optional(),
    stream_options: z.looseObject({ include_usage: z.boolean().nullable().optional() }).nullable().optional(),
    max_tokens: z.int().min(0).nullable().optional(),
  })
  .meta({ id: 'CreateCompletionRequest' });

export type CreateCompletionBody = z.infer<typeof createCompletionBody>;
