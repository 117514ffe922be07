import * as z from 'zod';
import { onDemand, seconds } from '../../http/objects';
import { metadataSchema } from '../../http/schemas';

/**
 * Conversations and their items as the API answers them (OpenAI's ConversationResource,
 * ConversationItem, ConversationItemList in the reference): a conversation is a thread, its items
 * the thread's messages and its runs' tool calls and outputs (docs/conversations.md). A response's
 * output items have the same shapes (resources/responses/).
 */

export const conversationObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('conversation'),
      created_at: seconds,
      metadata: metadataSchema,
    })
    .meta({ id: 'ConversationObject' }),
);

const detail = onDemand(() => z.enum(['auto', 'low', 'high']));

const inputTextPart = onDemand(() => z.strictObject({ type: z.literal('input_text'), text: z.string() }));
const inputImagePart = onDemand(() =>
  z.strictObject({
    type: z.literal('input_image'),
    image_url: z.string().nullable(),
    file_id: z.string().nullable(),
    detail: detail(),
  }),
);
const fileCitation = onDemand(() =>
  z.strictObject({
    type: z.literal('file_citation'),
    file_id: z.string(),
    filename: z.string(),
    index: z.int(),
  }),
);
/** A link in the answer to a file the code wrote (`sandbox:/mnt/data/…`), downloadable from its container. */
const containerFileCitation = onDemand(() =>
  z.strictObject({
    type: z.literal('container_file_citation'),
    container_id: z.string(),
    file_id: z.string(),
    start_index: z.int(),
    end_index: z.int(),
    filename: z.string(),
  }),
);
const outputAnnotation = onDemand(() => z.discriminatedUnion('type', [fileCitation(), containerFileCitation()]));
export type OutputAnnotation = z.infer<ReturnType<typeof outputAnnotation>>;
const outputTextPart = onDemand(() =>
  z.strictObject({
    type: z.literal('output_text'),
    text: z.string(),
    annotations: z.array(outputAnnotation()),
    logprobs: z.array(z.never()),
  }),
);

export const messageItem = onDemand(() =>
  z
    .strictObject({
      type: z.literal('message'),
      id: z.string(),
      status: z.enum(['in_progress', 'completed', 'incomplete']),
      role: z.enum(['user', 'assistant', 'system', 'developer']),
      content: z.array(z.discriminatedUnion('type', [inputTextPart(), inputImagePart(), outputTextPart()])),
    })
    .meta({ id: 'ConversationMessageItem' }),
);

const callStatus = onDemand(() => z.enum(['in_progress', 'completed', 'incomplete']));

export const functionCallItem = onDemand(() =>
  z
    .strictObject({
      type: z.literal('function_call'),
      id: z.string(),
      call_id: z.string(),
      name: z.string(),
      arguments: z.string(),
      status: callStatus(),
    })
    .meta({ id: 'FunctionCallItem' }),
);

export const functionCallOutputItem = onDemand(() =>
  z
    .strictObject({
      type: z.literal('function_call_output'),
      id: z.string(),
      call_id: z.string(),
      output: z.string(),
      status: callStatus(),
    })
    .meta({ id: 'FunctionCallOutputItem' }),
);

export const fileSearchCallItem = onDemand(() =>
  z
    .strictObject({
      type: z.literal('file_search_call'),
      id: z.string(),
      status: z.enum(['in_progress', 'searching', 'completed', 'incomplete', 'failed']),
      queries: z.array(z.string()),
      /** Only when `include` asks for `file_search_call.results`. */
      results: z
        .array(z.strictObject({ file_id: z.string(), filename: z.string(), score: z.number(), text: z.string() }))
        .nullable(),
    })
    .meta({ id: 'FileSearchCallItem' }),
);

/**
 * Code the gateway ran for the model in a container. `outputs` only when `include` asks for
 * `code_interpreter_call.outputs`; an image's `url` is the path of its file's content under the
 * gateway's base URL (`/v1/files/{id}/content`).
 */
export const codeInterpreterCallItem = onDemand(() =>
  z
    .strictObject({
      type: z.literal('code_interpreter_call'),
      id: z.string(),
      status: z.enum(['in_progress', 'completed', 'incomplete', 'interpreting', 'failed']),
      container_id: z.string(),
      code: z.string().nullable(),
      outputs: z
        .array(
          z.discriminatedUnion('type', [
            z.strictObject({ type: z.literal('logs'), logs: z.string() }),
            z.strictObject({ type: z.literal('image'), url: z.string() }),
          ]),
        )
        .nullable(),
    })
    .meta({ id: 'CodeInterpreterCallItem' }),
);

/** What the model reasoned before a step's message or calls, as its provider streamed it (run_steps.reasoning). */
export const reasoningItem = onDemand(() =>
  z
    .strictObject({
      type: z.literal('reasoning'),
      id: z.string(),
      summary: z.array(z.never()),
      content: z.array(z.strictObject({ type: z.literal('reasoning_text'), text: z.string() })),
      status: callStatus(),
    })
    .meta({ id: 'ReasoningItem' }),
);

export const conversationItem = onDemand(() =>
  z
    .discriminatedUnion('type', [
      messageItem(),
      functionCallItem(),
      functionCallOutputItem(),
      fileSearchCallItem(),
      codeInterpreterCallItem(),
      reasoningItem(),
    ])
    .meta({ id: 'ConversationItem' }),
);

/** OpenAI's ConversationItemList: first_id and last_id are always strings (empty for an empty page). */
export const conversationItemList = onDemand(() =>
  z
    .strictObject({
      object: z.literal('list'),
      data: z.array(conversationItem()),
      first_id: z.string(),
      last_id: z.string(),
      has_more: z.boolean(),
    })
    .meta({ id: 'ConversationItemList' }),
);

export type ConversationObject = z.infer<ReturnType<typeof conversationObject>>;
export type MessageItem = z.infer<ReturnType<typeof messageItem>>;
export type CodeInterpreterCallItem = z.infer<ReturnType<typeof codeInterpreterCallItem>>;
export type ConversationItem = z.infer<ReturnType<typeof conversationItem>>;
export type ConversationItemList = z.infer<ReturnType<typeof conversationItemList>>;
