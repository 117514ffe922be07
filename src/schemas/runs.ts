import * as z from 'zod';
import { cursorListQuery, metadataSchema } from './common';
import { functionName, responseFormatSchema, toolResourcesSchema, toolsSchema } from './tools';

/**
 * Runs and threads: the seed's "Create a run" (POST /threads/runs, OpenAI's
 * CreateThreadAndRunRequest), submitting tool outputs, and listing a thread's messages.
 */

export const RUN_LIMITS = {
  tools: 20,
  messages: 1000,
  contentParts: 100,
  text: 256_000,
  minTokens: 256,
} as const;

const textPart = z.strictObject({ type: z.literal('text'), text: z.string().max(RUN_LIMITS.text) });
const imageUrlPart = z.strictObject({
  type: z.literal('image_url'),
  image_url: z.strictObject({
    url: z.string().min(1).max(RUN_LIMITS.text),
    detail: z.enum(['auto', 'low', 'high']).optional(),
  }),
});
const imageFilePart = z.strictObject({
  type: z.literal('image_file'),
  image_file: z.strictObject({ file_id: z.string().min(1).max(256), detail: z.enum(['auto', 'low', 'high']).optional() }),
});

/** A message given at creation: role user or assistant, content a string or content parts. */
export const threadMessageSchema = z.strictObject({
  role: z.enum(['user', 'assistant']),
  content: z.union([
    z.string().max(RUN_LIMITS.text),
    z.array(z.discriminatedUnion('type', [textPart, imageUrlPart, imageFilePart])).min(1).max(RUN_LIMITS.contentParts),
  ]),
  attachments: z
    .array(z.strictObject({ file_id: z.string().min(1).max(256), tools: z.array(z.unknown()).max(8).optional() }))
    .max(20)
    .nullable()
    .optional(),
  metadata: metadataSchema.nullable().optional(),
});
export type ThreadMessageInput = z.infer<typeof threadMessageSchema>;

export const threadSchema = z.strictObject({
  messages: z.array(threadMessageSchema).max(RUN_LIMITS.messages).optional(),
  tool_resources: toolResourcesSchema.nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
});

/** `none`, `auto` (default), `required`, or a named tool to force. */
export const toolChoiceSchema = z.union([
  z.enum(['none', 'auto', 'required']),
  z
    .strictObject({
      type: z.enum(['function', 'code_interpreter', 'file_search']),
      function: z.strictObject({ name: functionName }).optional(),
    })
    .refine((choice) => choice.type !== 'function' || choice.function !== undefined, {
      error: "A tool_choice of type 'function' must name the function: {\"type\":\"function\",\"function\":{\"name\":\"…\"}}.",
      path: ['function'],
    }),
]);
export type ToolChoice = z.infer<typeof toolChoiceSchema>;

export const truncationStrategySchema = z
  .strictObject({
    type: z.enum(['auto', 'last_messages']),
    last_messages: z.int().min(1).max(RUN_LIMITS.messages * 10).nullable().optional(),
  })
  .refine((strategy) => strategy.type !== 'last_messages' || typeof strategy.last_messages === 'number', {
    error: "A truncation_strategy of type 'last_messages' needs last_messages (an integer >= 1).",
    path: ['last_messages'],
  });

const tokenCap = z.int().min(RUN_LIMITS.minTokens).max(100_000_000).nullable().optional();

/** Fields a run takes over from its assistant unless the request overrides them. */
const runOverrides = {
  model: z.string().min(1).max(256).nullable().optional(),
  instructions: z.string().max(256_000).nullable().optional(),
  tools: toolsSchema(RUN_LIMITS.tools).nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  max_prompt_tokens: tokenCap,
  max_completion_tokens: tokenCap,
  truncation_strategy: truncationStrategySchema.nullable().optional(),
  tool_choice: toolChoiceSchema.nullable().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  response_format: responseFormatSchema.nullable().optional(),
};

export const createThreadAndRunBody = z.strictObject({
  assistant_id: z.string().min(1).max(128),
  thread: threadSchema.optional(),
  tool_resources: toolResourcesSchema.nullable().optional(),
  ...runOverrides,
});
export type CreateThreadAndRunBody = z.infer<typeof createThreadAndRunBody>;

export const submitToolOutputsBody = z.strictObject({
  tool_outputs: z
    .array(z.strictObject({ tool_call_id: z.string().min(1).max(128), output: z.string().max(RUN_LIMITS.text) }))
    .min(1)
    .max(128),
  stream: z.boolean().nullable().optional(),
});
export type SubmitToolOutputsBody = z.infer<typeof submitToolOutputsBody>;

export const listMessagesQuery = cursorListQuery.extend({ run_id: z.string().min(1).max(128).optional() });
