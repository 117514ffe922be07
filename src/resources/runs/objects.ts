import { RUN_STATUSES, STEP_STATUSES } from '../../db/run-statuses';
import * as z from 'zod';
import { nullableSeconds, onDemand, seconds, textPart } from '../../http/objects';
import { metadataSchema } from '../../http/schemas';
import { responseFormatSchema, toolChoiceSchema, toolResourcesSchema, toolSchema } from '../../db/json-columns';

/** Runs and their steps as the API answers them (see http/objects.ts). */

const usage = onDemand(() =>
  z.strictObject({ prompt_tokens: z.int(), completion_tokens: z.int(), total_tokens: z.int() }),
);
const lastError = onDemand(() => z.strictObject({ code: z.string(), message: z.string() }));

const functionCall = onDemand(() => z.strictObject({ name: z.string(), arguments: z.string() }));

export const runObject = onDemand(() =>
  z
    .strictObject({
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
            tool_calls: z.array(
              z.strictObject({ id: z.string(), type: z.literal('function'), function: functionCall() }),
            ),
          }),
        })
        .nullable(),
      last_error: lastError().nullable(),
      model: z.string(),
      instructions: z.string(),
      tools: z.array(toolSchema),
      tool_resources: toolResourcesSchema,
      metadata: metadataSchema,
      temperature: z.number(),
      top_p: z.number(),
      max_completion_tokens: z.int().nullable(),
      max_prompt_tokens: z.int().nullable(),
      truncation_strategy: z.strictObject({
        type: z.enum(['auto', 'last_messages']),
        last_messages: z.int().nullable(),
      }),
      incomplete_details: z.strictObject({ reason: z.enum(['max_completion_tokens', 'max_prompt_tokens']) }).nullable(),
      usage: usage().nullable(),
      response_format: responseFormatSchema,
      tool_choice: toolChoiceSchema,
      parallel_tool_calls: z.boolean(),
    })
    .meta({ id: 'RunObject' }),
);

const fileSearchResult = onDemand(() =>
  z.strictObject({
    file_id: z.string(),
    file_name: z.string(),
    score: z.number(),
    /** Only when `include[]` asks for it. */
    content: z.array(textPart()).optional(),
  }),
);

const stepToolCall = onDemand(() =>
  z.discriminatedUnion('type', [
    z.strictObject({
      id: z.string(),
      type: z.literal('function'),
      function: functionCall().extend({ output: z.string().nullable() }),
    }),
    z.strictObject({
      id: z.string(),
      type: z.literal('file_search'),
      file_search: z.strictObject({
        ranking_options: z.strictObject({
          ranker: z.enum(['auto', 'default_2024_08_21']),
          score_threshold: z.number(),
        }),
        results: z.array(fileSearchResult()),
      }),
    }),
    z.strictObject({
      id: z.string(),
      type: z.literal('code_interpreter'),
      code_interpreter: z.strictObject({
        input: z.string(),
        outputs: z.array(
          z.discriminatedUnion('type', [
            z.strictObject({ type: z.literal('logs'), logs: z.string() }),
            z.strictObject({ type: z.literal('image'), image: z.strictObject({ file_id: z.string() }) }),
          ]),
        ),
      }),
    }),
  ]),
);

export const runStepObject = onDemand(() =>
  z
    .strictObject({
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
      last_error: lastError().nullable(),
      step_details: z.discriminatedUnion('type', [
        z.strictObject({
          type: z.literal('message_creation'),
          message_creation: z.strictObject({ message_id: z.string() }),
        }),
        z.strictObject({ type: z.literal('tool_calls'), tool_calls: z.array(stepToolCall()) }),
      ]),
      usage: usage().nullable(),
      metadata: z.strictObject({}),
    })
    .meta({ id: 'RunStepObject' }),
);

export type RunObject = z.infer<ReturnType<typeof runObject>>;
export type RunStepObject = z.infer<ReturnType<typeof runStepObject>>;

const millis = onDemand(() => z.int().describe('Milliseconds since the Unix epoch.'));
const duration = onDemand(() => z.int().nullable().describe('Milliseconds.'));

/**
 * GET /v1/runs/{run_id}/trace (a gateway extension, not OpenAI's): a run's log line, its provider
 * attempts and its events in time order, from its stored rows. Ids, counts and times only.
 */
export const runTraceObject = onDemand(() =>
  z
    .strictObject({
      object: z.literal('run.trace'),
      run_id: z.string(),
      thread_id: z.string(),
      /** The fields of its "run ended" log line, once it ended. */
      log: z
        .strictObject({
          run_id: z.string(),
          thread_id: z.string(),
          assistant_id: z.string(),
          workspace_id: z.string(),
          api_key_id: z.string(),
          virtual_key: z.string().nullable(),
          model: z.string(),
          status: z.enum(RUN_STATUSES),
          prompt_tokens: z.int(),
          completion_tokens: z.int(),
          total_tokens: z.int(),
          time_to_first_token_ms: duration(),
          duration_ms: z.int(),
          incomplete_reason: z.string().optional(),
          cause: z.string().optional(),
          error_code: z.string().optional(),
          error_message: z.string().optional(),
        })
        .nullable(),
      attempts: z.array(
        z.strictObject({
          at_ms: millis(),
          virtual_key: z.string(),
          model: z.string(),
          outcome: z.string().nullable(),
          status: z.int().nullable(),
          first_byte_ms: duration(),
          duration_ms: duration(),
        }),
      ),
      attempts_total: z.int(),
      events: z.array(
        z.strictObject({
          at_ms: millis(),
          type: z.enum(['created', 'started', 'attempt', 'step_created', 'step_ended', 'ended']),
          status: z.string().optional(),
          step_id: z.string().optional(),
          step_type: z.enum(['message_creation', 'tool_calls']).optional(),
          /** An attempt's index in `attempts`. */
          attempt: z.int().optional(),
        }),
      ),
      /** Whether the run has more steps than the events show (the first MAX_TRACE_STEPS). */
      steps_omitted: z.boolean(),
    })
    .meta({ id: 'RunTraceObject' }),
);

export type RunTraceObject = z.infer<ReturnType<typeof runTraceObject>>;
