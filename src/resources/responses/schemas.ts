import * as z from 'zod';
import { cursorListQuery, metadataSchema } from '../../http/schemas';
import { functionName, jsonObject } from '../../db/json-columns';
import { RUN_LIMITS } from '../runs/schemas';
import { THREAD_LIMITS } from '../threads/schemas';
import { inputItemsSchema, ITEM_LIMITS } from '../conversations/schemas';
import { CONTAINER_LIMITS, fileId, memoryLimit } from '../containers/schemas';

/**
 * The Responses API's requests (OpenAI's CreateResponse and its neighbours): what the gateway
 * reads of them, bounded. The tools a response may use are checked by type in commands.ts, so
 * that a tool the gateway does not serve yet is named as such rather than as malformed.
 */

export const RESPONSE_LIMITS = {
  tools: 128,
  minOutputTokens: 16,
} as const;

const id = z.string().min(1).max(128);

/** A function tool as the Responses API writes it: flat, no `function` wrapper. */
export const responseFunctionTool = z.strictObject({
  type: z.literal('function'),
  name: functionName,
  description: z.string().max(16_384).nullable().optional(),
  parameters: jsonObject.nullable().optional(),
  strict: z.boolean().nullable().optional(),
});

/** The file_search tool over the workspace's vector stores (one, as runs search one). */
export const responseFileSearchTool = z.strictObject({
  type: z.literal('file_search'),
  vector_store_ids: z.array(id).min(1).max(1),
  max_num_results: z.int().min(1).max(50).optional(),
  ranking_options: z
    .strictObject({
      ranker: z.enum(['auto', 'default-2024-11-15', 'default_2024_08_21']).optional(),
      score_threshold: z.number().min(0).max(1).optional(),
    })
    .optional(),
});

/**
 * The code_interpreter tool: a container's id, or `auto` (the container of the response's context,
 * else a new one: commands.ts), with files to put in it.
 */
export const responseCodeInterpreterTool = z.strictObject({
  type: z.literal('code_interpreter'),
  container: z.union([
    id,
    z.strictObject({
      type: z.literal('auto'),
      file_ids: z.array(fileId).max(CONTAINER_LIMITS.fileIds).nullable().optional(),
      memory_limit: memoryLimit.nullable().optional(),
    }),
  ]),
});
export type ResponseCodeInterpreterTool = z.infer<typeof responseCodeInterpreterTool>;

/** Any tool: its type is checked by commands.ts (responseTools), its fields by the schema of that type. */
const anyTool = z.looseObject({ type: z.string().min(1).max(64) });

const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.strictObject({ type: z.literal('function'), name: functionName }),
  z.strictObject({ type: z.literal('file_search') }),
]);

export const textFormat = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text') }),
  z.strictObject({ type: z.literal('json_object') }),
  z.strictObject({
    type: z.literal('json_schema'),
    name: functionName,
    schema: jsonObject,
    description: z.string().max(16_384).optional(),
    strict: z.boolean().nullable().optional(),
  }),
]);
export type TextFormat = z.infer<typeof textFormat>;

const promptVariable = z.union([z.string().max(RUN_LIMITS.instructions), z.looseObject({ type: z.string() })]);

export const INCLUDABLE = [
  'file_search_call.results',
  'message.output_text.logprobs',
  'reasoning.encrypted_content',
  'message.input_image.image_url',
  'web_search_call.action.sources',
  'web_search_call.results',
  'code_interpreter_call.outputs',
  'computer_call_output.output.image_url',
] as const;

const include = z.array(z.enum(INCLUDABLE)).max(INCLUDABLE.length);

/** The input of a response, or of a token count: text, or items as a conversation takes them. */
const input = z.union([z.string().max(THREAD_LIMITS.text), inputItemsSchema(ITEM_LIMITS.input)]);

const conversation = z.union([id, z.strictObject({ id })]);

/** The fields a response and a count of its input tokens share. */
const responseInput = {
  model: z.string().min(1).max(256).nullable().optional(),
  input: input.optional(),
  instructions: z.string().max(RUN_LIMITS.instructions).nullable().optional(),
  previous_response_id: id.nullable().optional(),
  conversation: conversation.nullable().optional(),
  tools: z.array(anyTool).max(RESPONSE_LIMITS.tools).nullable().optional(),
  tool_choice: toolChoice.nullable().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  text: z
    .strictObject({
      format: textFormat.optional(),
      verbosity: z.enum(['low', 'medium', 'high']).nullable().optional(),
    })
    .nullable()
    .optional(),
  reasoning: z
    .strictObject({
      effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).nullable().optional(),
      summary: z.enum(['auto', 'concise', 'detailed']).nullable().optional(),
      generate_summary: z.enum(['auto', 'concise', 'detailed']).nullable().optional(),
    })
    .nullable()
    .optional(),
  truncation: z.enum(['auto', 'disabled']).nullable().optional(),
  prompt: z
    .strictObject({
      id,
      version: z.string().max(64).nullable().optional(),
      variables: z.record(z.string().max(64), promptVariable).nullable().optional(),
    })
    .nullable()
    .optional(),
};

/** POST /v1/responses. */
export const createResponseBody = z.strictObject({
  ...responseInput,
  store: z.boolean().nullable().optional(),
  background: z.boolean().nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.strictObject({ include_obfuscation: z.boolean().optional() }).nullable().optional(),
  include: include.nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
  max_output_tokens: z.int().min(RESPONSE_LIMITS.minOutputTokens).max(100_000_000).nullable().optional(),
  max_tool_calls: z.int().min(1).max(1000).nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  top_logprobs: z.int().min(0).max(20).nullable().optional(),
  user: z.string().max(512).nullable().optional(),
  safety_identifier: z.string().max(512).nullable().optional(),
  prompt_cache_key: z.string().max(512).nullable().optional(),
  prompt_cache_retention: z.enum(['in-memory', '24h']).nullable().optional(),
  service_tier: z.enum(['auto', 'default', 'flex', 'scale', 'priority']).nullable().optional(),
});
export type CreateResponseBody = z.infer<typeof createResponseBody>;

/** POST /v1/responses/input_tokens. */
export const inputTokensBody = z.strictObject(responseInput);
export type InputTokensBody = z.infer<typeof inputTokensBody>;

/** GET /v1/responses/{id}: `include`, and the streamed form of a background response. */
export const retrieveResponseQuery = z.strictObject({
  include: z.union([z.enum(INCLUDABLE), include]).optional(),
  'include[]': z.union([z.enum(INCLUDABLE), include]).optional(),
  stream: z.enum(['true', 'false']).optional(),
  starting_after: z.coerce.number().int().min(0).optional(),
  include_obfuscation: z.enum(['true', 'false']).optional(),
});
export type RetrieveResponseQuery = z.infer<typeof retrieveResponseQuery>;

/** GET /v1/responses/{id}/input_items. */
export const listInputItemsQuery = cursorListQuery.extend({
  include: z.union([z.enum(INCLUDABLE), include]).optional(),
  'include[]': z.union([z.enum(INCLUDABLE), include]).optional(),
});
export type ListInputItemsQuery = z.infer<typeof listInputItemsQuery>;
