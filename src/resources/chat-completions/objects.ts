import * as z from 'zod';

/**
 * A chat completion as the provider answers it: the gateway returns the provider's JSON unchanged,
 * so this names the fields every OpenAI-compatible provider sends and lets the others through.
 */
export const chatCompletionObject = z
  .looseObject({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.int(),
    model: z.string(),
    choices: z.array(
      z.looseObject({
        index: z.int(),
        message: z.looseObject({ role: z.string(), content: z.string().nullable() }),
        finish_reason: z.string().nullable(),
      }),
    ),
    usage: z.looseObject({ prompt_tokens: z.int(), completion_tokens: z.int(), total_tokens: z.int() }).optional(),
  })
  .meta({ id: 'ChatCompletion' });
