import * as z from 'zod';
import { onDemand } from '../../http/objects';

/**
 * The provider's embeddings, returned as it sent them: each vector a list of floats, or a base64
 * string of little-endian float32s with `encoding_format: "base64"`.
 */
export const embeddingList = onDemand(() =>
  z
    .looseObject({
      object: z.literal('list'),
      data: z.array(
        z.looseObject({
          object: z.literal('embedding'),
          index: z.int(),
          embedding: z.union([z.array(z.number()), z.string()]),
        }),
      ),
      model: z.string(),
      usage: z.looseObject({ prompt_tokens: z.int(), total_tokens: z.int() }),
    })
    .meta({ id: 'CreateEmbeddingResponse' }),
);
