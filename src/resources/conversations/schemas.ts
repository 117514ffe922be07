import * as z from 'zod';
import { cursorListQuery, knownValues, metadataSchema } from '../../http/schemas';
import { THREAD_LIMITS } from '../threads/schemas';

/**
 * Conversations and their items: the input items OpenAI's Responses and Conversations APIs take
 * (`InputItem` in the reference: messages, the easy `{role, content}` form, function calls and
 * their outputs, item references, reasoning given back), one schema for both POST /v1/conversations(/{id}/items), whose
 * field is `items`, and POST /v1/responses, whose field is `input`: zod names the failing field
 * from where the schema sits (`items[2].content[0].image_url`, `input[2]...`), and the checks made
 * after validation (resources/conversations/items.ts) take the field's name (ItemsField).
 */

export const ITEM_LIMITS = {
  /** Items of one POST /v1/responses `input` (OpenAI documents no bound; a thread takes 1,000 messages at creation). */
  input: 2048,
  /** Items of one conversation create or items create: OpenAI's "up to 20 items at a time". */
  perRequest: 20,
  /** A file given inline (`file_data`, base64 or a data: URL), in characters. */
  fileData: 4 * 1024 * 1024,
} as const;

/** The name of the field that holds the items, for errors found after validation (`input[3].call_id`). */
export type ItemsField = 'input' | 'items';

const text = z.string().max(THREAD_LIMITS.text);
/** An id a client gives (an item's, a file's, a call's): printable, no spaces, bounded. */
const safeId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9_.:-]+$/, { error: 'only letters, digits and _ . : - are allowed.' });
const detail = z.enum(['auto', 'low', 'high']).nullable().optional();
const itemStatus = z.enum(['in_progress', 'completed', 'incomplete']).nullable().optional();

const inputText = z.strictObject({ type: z.literal('input_text'), text });

/** An image: `image_url` (http(s) or a data: URL, checked as a thread's image URLs are) or `file_id`, not both. */
const inputImage = z
  .strictObject({
    type: z.literal('input_image'),
    image_url: z.string().min(1).max(THREAD_LIMITS.text).nullable().optional(),
    file_id: safeId.nullable().optional(),
    detail,
  })
  .refine((part) => ((part.image_url ?? null) === null) !== ((part.file_id ?? null) === null), {
    error: 'An input_image needs exactly one of image_url and file_id.',
    path: ['image_url'],
  });

/**
 * A file whose text goes into the message: `file_id` of the workspace, or `file_data` with its
 * `filename`. `file_url` is refused: the gateway fetches nothing for a client.
 */
const inputFile = z
  .strictObject({
    type: z.literal('input_file'),
    file_id: safeId.nullable().optional(),
    file_data: z.string().min(1).max(ITEM_LIMITS.fileData).nullable().optional(),
    filename: z.string().min(1).max(256).nullable().optional(),
    file_url: z.string().nullable().optional(),
    detail: z.enum(['auto', 'low', 'high']).optional(),
  })
  .refine((part) => (part.file_url ?? null) === null, {
    error: 'file_url is not supported: upload the file (POST /v1/files) and give its file_id, or give file_data.',
    path: ['file_url'],
  })
  .refine((part) => ((part.file_id ?? null) === null) !== ((part.file_data ?? null) === null), {
    error: 'An input_file needs exactly one of file_id and file_data.',
    path: ['file_id'],
  })
  .refine((part) => (part.file_data ?? null) === null || (part.filename ?? null) !== null, {
    error: 'An input_file with file_data needs its filename.',
    path: ['filename'],
  });

/** An assistant's earlier answer, as a response's output gives it back (its annotations and logprobs are not kept). */
const outputText = z.strictObject({
  type: z.literal('output_text'),
  text,
  annotations: z.array(z.unknown()).max(256).optional(),
  logprobs: z.array(z.unknown()).max(4096).optional(),
});
const refusal = z.strictObject({ type: z.literal('refusal'), refusal: text });

const contentPart = z.discriminatedUnion('type', [inputText, inputImage, inputFile, outputText, refusal]);
export type ContentPartInput = z.infer<typeof contentPart>;

/** The parts each role may hold: an assistant's are its answers; system and developer messages are text. */
const PARTS_OF_ROLE = {
  user: ['input_text', 'input_image', 'input_file'],
  assistant: ['input_text', 'output_text', 'refusal'],
  system: ['input_text', 'input_file'],
  developer: ['input_text', 'input_file'],
} as const satisfies Record<string, readonly ContentPartInput['type'][]>;

const message = z
  .strictObject({
    type: z.literal('message'),
    /** A message given back as a response answered it: when it is already in the conversation, it is not written again. */
    id: safeId.nullable().optional(),
    role: z.enum(['user', 'assistant', 'system', 'developer']),
    content: z.union([text, z.array(contentPart).min(1).max(THREAD_LIMITS.contentParts)]),
    status: itemStatus,
    phase: z.enum(['commentary', 'final_answer']).nullable().optional(),
  })
  .superRefine((item, ctx) => {
    if (typeof item.content === 'string') return;
    const allowed: readonly string[] = PARTS_OF_ROLE[item.role];
    item.content.forEach((part, index) => {
      if (allowed.includes(part.type)) return;
      ctx.addIssue({
        code: 'custom',
        path: ['content', index, 'type'],
        message: `A ${item.role} message cannot hold '${part.type}' parts; it may hold ${allowed.join(', ')}.`,
      });
    });
  });

/** A function call the model made, given back with the response that made it (see items.ts for what it may name). */
const functionCall = z.strictObject({
  type: z.literal('function_call'),
  id: safeId.nullable().optional(),
  call_id: safeId,
  name: z.string().min(1).max(128),
  arguments: text,
  status: itemStatus,
});

/** The output of a function call of the conversation that has none yet. */
const functionCallOutput = z.strictObject({
  type: z.literal('function_call_output'),
  id: safeId.nullable().optional(),
  call_id: safeId,
  output: z.union([
    text,
    z
      .array(z.discriminatedUnion('type', [inputText, inputImage, inputFile]))
      .min(1)
      .max(THREAD_LIMITS.contentParts),
  ]),
  status: itemStatus,
});

/** An item of the conversation, by its id. */
const itemReference = z.strictObject({ type: z.literal('item_reference'), id: safeId });

/**
 * The model's reasoning, given back as a response's output gave it (items.ts: accepted, not written:
 * Chat Completions providers take no reasoning back, and the conversation has its own already).
 */
const reasoning = z.strictObject({
  type: z.literal('reasoning'),
  id: safeId,
  summary: z.array(z.strictObject({ type: z.literal('summary_text'), text })).max(THREAD_LIMITS.contentParts),
  content: z
    .array(z.strictObject({ type: z.literal('reasoning_text'), text }))
    .max(THREAD_LIMITS.contentParts)
    .nullable()
    .optional(),
  encrypted_content: text.nullable().optional(),
  status: itemStatus,
});

/** Code the gateway ran, given back as a response's output gave it (items.ts: accepted, not run again). */
const codeInterpreterCall = z.strictObject({
  type: z.literal('code_interpreter_call'),
  id: safeId,
  status: z.enum(['in_progress', 'completed', 'incomplete', 'interpreting', 'failed']),
  container_id: safeId,
  code: text.nullable(),
  outputs: z
    .array(
      z.discriminatedUnion('type', [
        z.strictObject({ type: z.literal('logs'), logs: text }),
        z.strictObject({ type: z.literal('image'), url: text }),
      ]),
    )
    .max(THREAD_LIMITS.contentParts)
    .nullable()
    .optional(),
});

const typedItem = z.discriminatedUnion('type', [
  message,
  functionCall,
  functionCallOutput,
  itemReference,
  reasoning,
  codeInterpreterCall,
]);

/**
 * One input item. Without a `type`, an object with a `role` is a message (OpenAI's
 * EasyInputMessage) and one with only an `id` an item reference (its `type` may be null), as
 * OpenAI reads them; any other type is refused naming `<field>[i].type`.
 */
export const inputItemSchema = z.preprocess((value) => {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  const type: unknown = (value as { type?: unknown }).type;
  if (type !== undefined && type !== null) return value;
  if ('role' in value) return { ...value, type: 'message' };
  if ('id' in value) return { ...value, type: 'item_reference' };
  return value;
}, typedItem);
export type InputItem = z.infer<typeof typedItem>;
export type MessageItemInput = Extract<InputItem, { type: 'message' }>;

/** Input items, at most `max`. */
export const inputItemsSchema = (max: number) => z.array(inputItemSchema).max(max);

/** What `include` may ask for, OpenAI's IncludeEnum: only file_search_call.results changes what this gateway answers. */
export const ITEM_INCLUDES = [
  'file_search_call.results',
  'web_search_call.results',
  'web_search_call.action.sources',
  'message.input_image.image_url',
  'computer_call_output.output.image_url',
  'code_interpreter_call.outputs',
  'reasoning.encrypted_content',
  'message.output_text.logprobs',
] as const;
export type ItemInclude = (typeof ITEM_INCLUDES)[number];

/** `include` as a query: `include[]=…` (the SDKs' form) or `include=…`, once or repeated. */
export const includeQuery = z.strictObject({
  include: knownValues('include', ITEM_INCLUDES).optional(),
  'include[]': knownValues('include[]', ITEM_INCLUDES).optional(),
});
export type IncludeQuery = z.infer<typeof includeQuery>;

/** The includes of a query, whichever form it used. */
export const includesOf = (query: IncludeQuery): ItemInclude[] => [
  ...(query.include ?? []),
  ...(query['include[]'] ?? []),
];

/** POST /v1/conversations: OpenAI's CreateConversationBody. */
export const createConversationBody = z.strictObject({
  items: inputItemsSchema(ITEM_LIMITS.perRequest).nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
});
export type CreateConversationBody = z.infer<typeof createConversationBody>;

/** POST /v1/conversations/{conversation_id}: OpenAI's UpdateConversationBody (metadata replaces the stored one). */
export const updateConversationBody = z.strictObject({ metadata: metadataSchema.nullable() });
export type UpdateConversationBody = z.infer<typeof updateConversationBody>;

/** POST /v1/conversations/{conversation_id}/items. */
export const createItemsBody = z.strictObject({ items: inputItemsSchema(ITEM_LIMITS.perRequest) });

/** GET /v1/conversations/{conversation_id}/items: `after` an item id, no `before` (OpenAI has none). */
export const listItemsQuery = cursorListQuery.omit({ before: true }).extend(includeQuery.shape);
export type ListItemsQuery = z.infer<typeof listItemsQuery>;
