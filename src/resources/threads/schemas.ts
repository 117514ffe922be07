import * as z from 'zod';
import { cursorListQuery, metadataSchema } from '../../http/schemas';
import { toolResourcesInputSchema } from '../vector-stores/schemas';
import { toolResourcesSchema } from '../../db/json-columns';

/**
 * Threads and their messages: the bodies that create and modify them (alone, or a thread created
 * with its run), listing a thread's messages, and the shapes a message is stored and answered in.
 */

export const THREAD_LIMITS = {
  messages: 1000,
  contentParts: 100,
  text: 256_000,
} as const;

const textPart = z.strictObject({ type: z.literal('text'), text: z.string().max(THREAD_LIMITS.text) });
const imageUrlPart = z.strictObject({
  type: z.literal('image_url'),
  image_url: z.strictObject({
    url: z.string().min(1).max(THREAD_LIMITS.text),
    detail: z.enum(['auto', 'low', 'high']).optional(),
  }),
});
const imageFilePart = z.strictObject({
  type: z.literal('image_file'),
  image_file: z.strictObject({
    file_id: z.string().min(1).max(256),
    detail: z.enum(['auto', 'low', 'high']).optional(),
  }),
});

/** A message given at creation: role user or assistant, content a string or content parts. */
export const threadMessageSchema = z.strictObject({
  role: z.enum(['user', 'assistant']),
  content: z.union([
    z.string().max(THREAD_LIMITS.text),
    z
      .array(z.discriminatedUnion('type', [textPart, imageUrlPart, imageFilePart]))
      .min(1)
      .max(THREAD_LIMITS.contentParts),
  ]),
  attachments: z
    .array(
      z.strictObject({
        file_id: z.string().min(1).max(256),
        tools: z
          .array(
            z.discriminatedUnion('type', [
              z.strictObject({ type: z.literal('file_search') }),
              z.strictObject({ type: z.literal('code_interpreter') }),
            ]),
          )
          .max(8)
          .optional(),
      }),
    )
    .max(20)
    .nullable()
    .optional(),
  metadata: metadataSchema.nullable().optional(),
});
export type ThreadMessageInput = z.infer<typeof threadMessageSchema>;

export const threadSchema = z.strictObject({
  messages: z.array(threadMessageSchema).max(THREAD_LIMITS.messages).optional(),
  tool_resources: toolResourcesInputSchema.nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
});
export type ThreadInput = z.infer<typeof threadSchema>;

/** POST /v1/threads: OpenAI's CreateThreadRequest (an empty body is an empty thread). */
export const createThreadBody = threadSchema;

/** POST /v1/threads/{thread_id}: OpenAI's ModifyThreadRequest; the fields sent replace the stored ones. */
export const modifyThreadBody = threadSchema
  .omit({ messages: true })
  .extend({ tool_resources: toolResourcesSchema.nullable().optional() });
export type ModifyThreadBody = z.infer<typeof modifyThreadBody>;

/** POST /v1/threads/{thread_id}/messages: OpenAI's CreateMessageRequest. */
export const createMessageBody = threadMessageSchema;

/** POST /v1/threads/{thread_id}/messages/{message_id}: OpenAI's ModifyMessageRequest. */
export const modifyMessageBody = z.strictObject({ metadata: metadataSchema.nullable().optional() });
export type ModifyMessageBody = z.infer<typeof modifyMessageBody>;

export const listMessagesQuery = cursorListQuery.extend({ run_id: z.string().min(1).max(128).optional() });

/**
 * GET /v1/threads (a gateway extension, for the console): the workspace's threads, newest first;
 * `assistant_id`: those with a run of that assistant.
 */
export const listThreadsQuery = cursorListQuery.extend({ assistant_id: z.string().min(1).max(128).optional() });
export type ListThreadsQuery = z.infer<typeof listThreadsQuery>;
