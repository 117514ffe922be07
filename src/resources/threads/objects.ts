import * as z from 'zod';
import { nullableSeconds, onDemand, seconds } from '../../http/objects';
import { metadataSchema } from '../../http/schemas';
import { toolResourcesSchema } from '../../db/json-columns';

/** Threads and their messages as the API answers them (see http/objects.ts). */

export const threadObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('thread'),
      created_at: seconds,
      metadata: metadataSchema,
      tool_resources: toolResourcesSchema,
    })
    .meta({ id: 'ThreadObject' }),
);

const messageContent = onDemand(() =>
  z.discriminatedUnion('type', [
    z.strictObject({
      type: z.literal('text'),
      text: z.strictObject({ value: z.string(), annotations: z.array(z.unknown()) }),
    }),
    z.strictObject({
      type: z.literal('image_url'),
      image_url: z.strictObject({ url: z.string(), detail: z.string().optional() }),
    }),
    z.strictObject({
      type: z.literal('image_file'),
      image_file: z.strictObject({ file_id: z.string(), detail: z.string().optional() }),
    }),
  ]),
);

export const messageObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('thread.message'),
      created_at: seconds,
      assistant_id: z.string().nullable(),
      thread_id: z.string(),
      run_id: z.string().nullable(),
      status: z.enum(['in_progress', 'incomplete', 'completed']),
      incomplete_details: z.strictObject({ reason: z.string() }).nullable(),
      incomplete_at: nullableSeconds,
      completed_at: nullableSeconds,
      // system and developer: written as a conversation's items (docs/conversations.md), beyond OpenAI's two.
      role: z.enum(['user', 'assistant', 'system', 'developer']),
      content: z.array(messageContent()),
      attachments: z
        .array(z.strictObject({ file_id: z.string(), tools: z.array(z.strictObject({ type: z.string() })) }))
        .nullable(),
      metadata: metadataSchema,
    })
    .meta({ id: 'MessageObject' }),
);

export type ThreadObject = z.infer<ReturnType<typeof threadObject>>;
export type MessageObject = z.infer<ReturnType<typeof messageObject>>;
