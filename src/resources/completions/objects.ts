import * as z from 'zod';
import { onDemand } from '../../http/objects';

/** A legacy completion as the provider answers it, returned unchanged: the fields every provider sends, the others let through. */
export const completionObject = onDemand(() =>
  z
    .looseObject({
      id: z.string(),
      object: z.literal('text_completion'),
      created: z.int(),
      model: z.string(),
      choices: z.array(z.looseObject({ index: z.int(), text: z.string(), finish_reason: z.string().nullable() })),
      usage: z.looseObject({ prompt_tokens: z.int(), completion_tokens: z.int(), total_tokens: z.int() }).optional(),
    })
    .meta({ id: 'CreateCompletionResponse' }),
);
