import * as z from 'zod';
import { onDemand } from '../../http/objects';

/**
 * A chat completion as the provider answers it: the gateway returns the provider's JSON unchanged,
 * so this names the fields every OpenAI-compatible provider sends and lets the others through.
 */
export const chatCompletionObject = onDemand(() =>
  z
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
    .meta({ id: 'ChatCompletion' }),
);

/**
 * A stored completion (`store: true`), as GET /v1/chat/completions and its siblings answer it: the
 * provider's answer as it was kept (a stream's assembled), under the id it was stored by, with the
 * metadata it has now.
 */
export const storedCompletionObject = onDemand(() =>
  chatCompletionObject()
    .extend({ metadata: z.record(z.string(), z.string()) })
    .meta({ id: 'StoredChatCompletion' }),
);

/**
 * A message of a stored completion's request, as the client sent it, with OpenAI's fields added:
 * its `id` (the completion's, a hyphen, its position), `content` as text (the text parts joined when
 * it was a list of parts, which `content_parts` then holds), and `name`.
 */
export const storedMessageObject = onDemand(() =>
  z
    .looseObject({
      id: z.string(),
      role: z.string(),
      content: z.string().nullable(),
      name: z.string().nullable(),
      content_parts: z.array(z.unknown()).nullable(),
    })
    .meta({ id: 'StoredChatCompletionMessage' }),
);
export type StoredMessageObject = z.infer<ReturnType<typeof storedMessageObject>>;
