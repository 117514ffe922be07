import * as z from 'zod';
import { cursorListQuery, knownValues, metadataSchema } from '../../http/schemas';
import { RUN_STATUSES } from '../../db/run-statuses';
import { THREAD_LIMITS, threadMessageSchema, threadSchema } from '../threads/schemas';
import { responseFormatSchema, toolChoiceSchema, toolResourcesSchema, toolsSchema } from '../../db/json-columns';

/**
 * Runs: creating one on an existing thread (POST /threads/{id}/runs, OpenAI's CreateRunRequest) or
 * with a new thread (POST /threads/runs, CreateThreadAndRunRequest), submitting tool outputs,
 * updating one, listing runs and their steps (the shapes of what a run stores in its JSON columns
 * are in db/json-columns.ts).
 */

export const RUN_LIMITS = {
  tools: 20,
  minTokens: 256,
  instructions: 256_000,
} as const;

export const truncationStrategySchema = z
  .strictObject({
    type: z.enum(['auto', 'last_messages']),
    last_messages: z
      .int()
      .min(1)
      .max(THREAD_LIMITS.messages * 10)
      .nullable()
      .optional(),
  })
  .refine((strategy) => strategy.type !== 'last_messages' || typeof strategy.last_messages === 'number', {
    error: "A truncation_strategy of type 'last_messages' needs last_messages (an integer >= 1).",
    path: ['last_messages'],
  });

const tokenCap = z.int().min(RUN_LIMITS.minTokens).max(100_000_000).nullable().optional();

/** Fields a run takes over from its assistant unless the request overrides them. */
const runOverrides = {
  model: z.string().min(1).max(256).nullable().optional(),
  instructions: z.string().max(RUN_LIMITS.instructions).nullable().optional(),
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

export const createRunBody = z.strictObject({
  assistant_id: z.string().min(1).max(128),
  /** Appended to the run's instructions (the request's, else the assistant's). */
  additional_instructions: z.string().max(RUN_LIMITS.instructions).nullable().optional(),
  /** Added to the thread in the batch that creates the run, before it. */
  additional_messages: z.array(threadMessageSchema).max(THREAD_LIMITS.messages).nullable().optional(),
  ...runOverrides,
});
export type CreateRunBody = z.infer<typeof createRunBody>;

/** The fields of a request that creates a run which set its effective settings (resources/runs/execution/settings.ts). */
export type RunOverrides = Omit<CreateThreadAndRunBody, 'assistant_id' | 'thread' | 'stream'> &
  Pick<CreateRunBody, 'additional_instructions'>;

/**
 * What `include[]` may ask of run steps: the content of file search results, which only runs with
 * the file_search tool have. Accepted and checked wherever OpenAI takes it (creating a run, listing
 * and retrieving steps).
 */
export const RUN_STEP_INCLUDES = ['step_details.tool_calls[*].file_search.results[*].content'] as const;

export type RunStepInclude = (typeof RUN_STEP_INCLUDES)[number];

/** `include[]=…`, once or repeated. */
const includeParam = knownValues('include[]', RUN_STEP_INCLUDES);

export const runStepIncludeQuery = z.strictObject({ 'include[]': includeParam.optional() });

export const listRunStepsQuery = cursorListQuery.extend({ 'include[]': includeParam.optional() });

export const modifyRunBody = z.strictObject({ metadata: metadataSchema.nullable().optional() });
export type ModifyRunBody = z.infer<typeof modifyRunBody>;

export const submitToolOutputsBody = z.strictObject({
  tool_outputs: z
    .array(z.strictObject({ tool_call_id: z.string().min(1).max(128), output: z.string().max(THREAD_LIMITS.text) }))
    .min(1)
    .max(128),
  stream: z.boolean().nullable().optional(),
});
export type SubmitToolOutputsBody = z.infer<typeof submitToolOutputsBody>;

/**
 * GET /v1/runs (a gateway extension, for the console): the workspace's runs across its threads,
 * newest first, of one status, assistant or thread.
 */
export const listWorkspaceRunsQuery = cursorListQuery.extend({
  status: z.enum(RUN_STATUSES).optional(),
  assistant_id: z.string().min(1).max(128).optional(),
  thread_id: z.string().min(1).max(128).optional(),
});
export type ListWorkspaceRunsQuery = z.infer<typeof listWorkspaceRunsQuery>;
