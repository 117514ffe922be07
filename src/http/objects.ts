import * as z from 'zod';
import { metadataSchema } from './schemas';
import { RUN_STATUSES, STEP_STATUSES } from '../db/run-statuses';
import { POLICY_STATUSES, POLICY_TYPES, POLICY_UNITS } from '../resources/policies/schemas';
import { toolChoiceSchema } from '../resources/runs/schemas';
import { responseFormatSchema, toolResourcesSchema, toolSchema } from '../resources/runs/tools';
import { PROVIDERS } from '../resources/virtual-keys/schemas';
import { attributesSchema, expiresAfterSchema } from '../resources/vector-stores/schemas';

/**
 * The objects the API answers, as zod schemas: the wire mappers (src/wire/*) return the types
 * inferred from them, and the routes declare them as their answers (http/middleware/responds.ts), from
 * which the OpenAPI document describes each operation's success. One description, so the document
 * cannot drift from what is sent: a mapper that builds a field the schema does not have fails to
 * typecheck. Timestamps are Unix seconds, as OpenAI's, except policies' (ISO 8601, the README's).
 */

const seconds = z.int();
const nullableSeconds = seconds.nullable();

const usage = z.strictObject({ prompt_tokens: z.int(), completion_tokens: z.int(), total_tokens: z.int() });
const textPart = z.strictObject({ type: z.literal('text'), text: z.string() });
const lastError = z.strictObject({ code: z.string(), message: z.string() });

export const assistantObject = z.strictObject({
  id: z.string(),
  object: z.literal('assistant'),
  created_at: seconds,
  name: z.string().nullable(),
  description: z.string().nullable(),
  model: z.string(),
  instructions: z.string().nullable(),
  tools: z.array(toolSchema),
  metadata: metadataSchema,
  tool_resources: toolResourcesSchema,
  temperature: z.number(),
  top_p: z.number(),
  response_format: responseFormatSchema,
}).meta({ id: 'AssistantObject' });

export const threadObject = z.strictObject({
  id: z.string(),
  object: z.literal('thread'),
  created_at: seconds,
  metadata: metadataSchema,
  tool_resources: toolResourcesSchema,
}).meta({ id: 'ThreadObject' });

const messageContent = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('text'),
    text: z.strictObject({ value: z.string(), annotations: z.array(z.unknown()) }),
  }),
  z.strictObject({ type: z.literal('image_url'), image_url: z.strictObject({ url: z.string(), detail: z.string().optional() }) }),
  z.strictObject({ type: z.literal('image_file'), image_file: z.strictObject({ file_id: z.string(), detail: z.string().optional() }) }),
]);

export const messageObject = z.strictObject({
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
  role: z.enum(['user', 'assistant']),
  content: z.array(messageContent),
  attachments: z.array(z.strictObject({ file_id: z.string(), tools: z.array(z.strictObject({ type: z.string() })) })).nullable(),
  metadata: metadataSchema,
}).meta({ id: 'MessageObject' });

const functionCall = z.strictObject({ name: z.string(), arguments: z.string() });

export const runObject = z.strictObject({
  id: z.string(),
  object: z.literal('thread.run'),
  created_at: seconds,
  assistant_id: z.string(),
  thread_id: z.string(),
  status: z.enum(RUN_STATUSES),
  started_at: nullableSeconds,
  expires_at: nullableSeconds,
  cancelled_at: nullableSeconds,
  failed_at: nullableSeconds,
  completed_at: nullableSeconds,
  required_action: z
    .strictObject({
      type: z.literal('submit_tool_outputs'),
      submit_tool_outputs: z.strictObject({
        tool_calls: z.array(z.strictObject({ id: z.string(), type: z.literal('function'), function: functionCall })),
      }),
    })
    .nullable(),
  last_error: lastError.nullable(),
  model: z.string(),
  instructions: z.string(),
  tools: z.array(toolSchema),
  tool_resources: toolResourcesSchema,
  metadata: metadataSchema,
  temperature: z.number(),
  top_p: z.number(),
  max_completion_tokens: z.int().nullable(),
  max_prompt_tokens: z.int().nullable(),
  truncation_strategy: z.strictObject({ type: z.enum(['auto', 'last_messages']), last_messages: z.int().nullable() }),
  incomplete_details: z.strictObject({ reason: z.enum(['max_completion_tokens', 'max_prompt_tokens']) }).nullable(),
  usage: usage.nullable(),
  response_format: responseFormatSchema,
  tool_choice: toolChoiceSchema,
  parallel_tool_calls: z.boolean(),
}).meta({ id: 'RunObject' });

const fileSearchResult = z.strictObject({
  file_id: z.string(),
  file_name: z.string(),
  score: z.number(),
  /** Only when `include[]` asks for it. */
  content: z.array(textPart).optional(),
});

const stepToolCall = z.discriminatedUnion('type', [
  z.strictObject({
    id: z.string(),
    type: z.literal('function'),
    function: functionCall.extend({ output: z.string().nullable() }),
  }),
  z.strictObject({
    id: z.string(),
    type: z.literal('file_search'),
    file_search: z.strictObject({
      ranking_options: z.strictObject({ ranker: z.enum(['auto', 'default_2024_08_21']), score_threshold: z.number() }),
      results: z.array(fileSearchResult),
    }),
  }),
]);

export const runStepObject = z.strictObject({
  id: z.string(),
  object: z.literal('thread.run.step'),
  created_at: seconds,
  run_id: z.string(),
  assistant_id: z.string(),
  thread_id: z.string(),
  type: z.enum(['message_creation', 'tool_calls']),
  status: z.enum(STEP_STATUSES),
  cancelled_at: nullableSeconds,
  completed_at: nullableSeconds,
  expires_at: nullableSeconds,
  failed_at: nullableSeconds,
  expired_at: nullableSeconds,
  last_error: lastError.nullable(),
  step_details: z.discriminatedUnion('type', [
    z.strictObject({ type: z.literal('message_creation'), message_creation: z.strictObject({ message_id: z.string() }) }),
    z.strictObject({ type: z.literal('tool_calls'), tool_calls: z.array(stepToolCall) }),
  ]),
  usage: usage.nullable(),
  metadata: z.strictObject({}),
}).meta({ id: 'RunStepObject' });

export const fileObject = z.strictObject({
  id: z.string(),
  object: z.literal('file'),
  bytes: z.int(),
  created_at: seconds,
  expires_at: nullableSeconds,
  filename: z.string(),
  purpose: z.string(),
  status: z.literal('processed'),
  status_details: z.null(),
}).meta({ id: 'OpenAIFile' });

const fileCounts = z.strictObject({
  in_progress: z.int(),
  completed: z.int(),
  cancelled: z.int(),
  failed: z.int(),
  total: z.int(),
});

export const vectorStoreObject = z.strictObject({
  id: z.string(),
  object: z.literal('vector_store'),
  created_at: seconds,
  name: z.string().nullable(),
  usage_bytes: z.int(),
  file_counts: fileCounts,
  status: z.enum(['expired', 'in_progress', 'completed']),
  expires_after: expiresAfterSchema.optional(),
  expires_at: nullableSeconds,
  last_active_at: seconds,
  metadata: metadataSchema,
}).meta({ id: 'VectorStoreObject' });

export const vectorStoreFileObject = z.strictObject({
  id: z.string(),
  object: z.literal('vector_store.file'),
  usage_bytes: z.int(),
  created_at: seconds,
  vector_store_id: z.string(),
  status: z.enum(['in_progress', 'completed', 'cancelled', 'failed']),
  last_error: z.strictObject({ code: z.enum(['server_error', 'unsupported_file', 'invalid_file']), message: z.string() }).nullable(),
  chunking_strategy: z.discriminatedUnion('type', [
    z.strictObject({
      type: z.literal('static'),
      static: z.strictObject({ max_chunk_size_tokens: z.int(), chunk_overlap_tokens: z.int() }),
    }),
    z.strictObject({ type: z.literal('other') }),
  ]),
  attributes: attributesSchema.nullable(),
}).meta({ id: 'VectorStoreFileObject' });

export const vectorStoreFileBatchObject = z.strictObject({
  id: z.string(),
  object: z.literal('vector_store.files_batch'),
  created_at: seconds,
  vector_store_id: z.string(),
  status: z.enum(['cancelled', 'in_progress', 'failed', 'completed']),
  file_counts: fileCounts,
}).meta({ id: 'VectorStoreFileBatchObject' });

export const vectorStoreSearchResultsPage = z.strictObject({
  object: z.literal('vector_store.search_results.page'),
  search_query: z.array(z.string()),
  data: z.array(
    z.strictObject({
      file_id: z.string(),
      filename: z.string(),
      score: z.number(),
      attributes: attributesSchema.nullable(),
      content: z.array(textPart),
    }),
  ),
  has_more: z.boolean(),
  next_page: z.null(),
}).meta({ id: 'VectorStoreSearchResultsPage' });

export const policyObject = z.strictObject({
  id: z.string(),
  type: z.enum(POLICY_TYPES),
  unit: z.enum(POLICY_UNITS),
  value: z.int(),
  status: z.enum(POLICY_STATUSES),
  workspace_id: z.string(),
  organisation_id: z.string(),
  created_at: z.iso.datetime(),
  last_updated_at: z.iso.datetime(),
  name: z.string(),
  conditions: z.array(z.strictObject({ key: z.string(), value: z.string() })),
  group_by: z.array(z.strictObject({ key: z.string() })),
  /** The kind of API key that created it: an organisation's policy is changed only by organisation keys. */
  created_by: z.enum(['organisation', 'workspace']),
}).meta({ id: 'Policy' });

export const virtualKeyObject = z.strictObject({
  object: z.literal('virtual_key'),
  id: z.string(),
  slug: z.string(),
  provider: z.enum(PROVIDERS),
  base_url: z.string(),
  workspace_id: z.string(),
  created_at: seconds,
  revoked_at: nullableSeconds,
  /** Azure OpenAI only: its API version, deployment, and the model the deployment serves. */
  api_version: z.string().optional(),
  deployment: z.string().optional(),
  model: z.string().optional(),
  /** Exact model names and `*` globs whose runs this key executes when they name no key. */
  models: z.array(z.string()),
  /** Whether this is the workspace's default key. */
  default: z.boolean(),
}).meta({ id: 'VirtualKey' });

/** GET /v1/policies/rate-limits: one page of policies, and how many match in all. */
export const policyList = z.strictObject({ object: z.literal('list'), data: z.array(policyObject), total: z.int() });

/** POST /v1/policies/rate-limits: the new policy's id. */
export const createdPolicy = z.strictObject({ id: z.string(), object: z.literal('policy_usage_limits') });

/** GET /v1/virtual-keys: every key of the scope, in one page. */
export const virtualKeyList = z.strictObject({ object: z.literal('list'), data: z.array(virtualKeyObject) });

const usageResult = z.strictObject({
  object: z.literal('usage.result'),
  input_tokens: z.int(),
  output_tokens: z.int(),
  total_tokens: z.int(),
  num_requests: z.int(),
  workspace_id: z.string().nullable(),
  api_key_id: z.string().nullable(),
  /** The virtual key's slug. */
  virtual_key: z.string().nullable(),
  model: z.string().nullable(),
  kind: z.enum(['run', 'embeddings']).nullable(),
});

/** GET /v1/usage: buckets of time, each with its results by the groups asked for. */
export const usagePage = z.strictObject({
  object: z.literal('page'),
  data: z.array(
    z.strictObject({ object: z.literal('bucket'), start_time: seconds, end_time: seconds, results: z.array(usageResult) }),
  ),
  has_more: z.boolean(),
  next_page: z.string().nullable(),
}).meta({ id: 'UsagePage' });

/** GET /v1/vector_stores/{id}/files/{file_id}/content: the file's text as stored, its chunks in order. */
export const vectorStoreFileContentPage = z.strictObject({
  object: z.literal('vector_store.file_content.page'),
  data: z.array(textPart),
  has_more: z.boolean(),
  next_page: z.null(),
}).meta({ id: 'VectorStoreFileContentPage' });

/** GET /health: the process is up and serving. */
export const healthObject = z.strictObject({ status: z.literal('ok') });

/** OpenAI's list object over `item`: one page, its first and last ids, whether more follow. */
export const listOf = <Item extends z.ZodType>(item: Item) =>
  z.strictObject({
    object: z.literal('list'),
    data: z.array(item),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  });

/** What a DELETE answers: the id, `<object>.deleted` and `deleted: true`. */
export const deletedObject = <Name extends string>(object: Name) =>
  z.strictObject({ id: z.string(), object: z.literal(object), deleted: z.literal(true) });

export type AssistantObject = z.infer<typeof assistantObject>;
export type ThreadObject = z.infer<typeof threadObject>;
export type MessageObject = z.infer<typeof messageObject>;
export type RunObject = z.infer<typeof runObject>;
export type RunStepObject = z.infer<typeof runStepObject>;
export type FileObject = z.infer<typeof fileObject>;
export type VectorStoreObject = z.infer<typeof vectorStoreObject>;
export type VectorStoreFileObject = z.infer<typeof vectorStoreFileObject>;
export type VectorStoreFileBatchObject = z.infer<typeof vectorStoreFileBatchObject>;
export type VectorStoreSearchResultsPage = z.infer<typeof vectorStoreSearchResultsPage>;
export type PolicyObject = z.infer<typeof policyObject>;
export type VirtualKeyObject = z.infer<typeof virtualKeyObject>;
export type UsagePage = z.infer<typeof usagePage>;
export type UsageResult = z.infer<typeof usageResult>;
