import * as z from 'zod';

/** OpenAI's bound on the inputs of one embeddings request. */
const MAX_INPUTS = 2048;
const tokens = z.array(z.int().min(0)).min(1);

/**
 * POST /v1/embeddings, checked only as far as the gateway reads it: the model its virtual key is
 * resolved for, the input its token reservation is sized by (a string, strings, or token arrays,
 * at most 2048), and the two options the SDKs send (`encoding_format`, `dimensions`). Everything
 * goes to the provider as sent; the provider is the judge of the rest.
 */
export const createEmbeddingBody = z
  .looseObject({
    model: z.string().min(1).max(256),
    input: z.union([
      z.string(),
      z.array(z.string()).min(1).max(MAX_INPUTS),
      tokens.max(MAX_INPUTS),
      z.array(tokens).min(1).max(MAX_INPUTS),
    ]),
    encoding_format: z.enum(['float', 'base64']).optional(),
    dimensions: z.int().min(1).optional(),
  })
  .meta({ id: 'CreateEmbeddingRequest' });

export type CreateEmbeddingBody = z.infer<typeof createEmbeddingBody>;
