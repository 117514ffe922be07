import * as z from 'zod';
import { nullableSeconds, onDemand, seconds } from '../../http/objects';
import type { RunStatus } from '../../db/run-statuses';

/**
 * What the Responses API answers (OpenAI's Response, its items and usage), declared for the
 * OpenAPI document and typing wire.ts. Items are described by their type and id: their fields are
 * the reference's, mapped from the thread's rows (resources/conversations/).
 */

export const responseItemObject = onDemand(() => z.looseObject({ type: z.string(), id: z.string() }));
export type ResponseItemObject = z.infer<ReturnType<typeof responseItemObject>>;

export const responseUsageObject = onDemand(() =>
  z.strictObject({
    input_tokens: z.int(),
    input_tokens_details: z.strictObject({ cached_tokens: z.int(), cache_write_tokens: z.int() }),
    output_tokens: z.int(),
    output_tokens_details: z.strictObject({ reasoning_tokens: z.int() }),
    total_tokens: z.int(),
  }),
);
export type ResponseUsageObject = z.infer<ReturnType<typeof responseUsageObject>>;

export const RESPONSE_STATUSES = ['queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled'] as const;
export type ResponseStatus = (typeof RESPONSE_STATUSES)[number];

/**
 * A run's status as a response's: a response has no `requires_action` (its function calls end it,
 * completed: runs/execution/engine.ts) and no `expired` (a response past its time failed).
 */
export function responseStatus(status: RunStatus): ResponseStatus {
  switch (status) {
    case 'cancelling':
      return 'in_progress';
    case 'requires_action':
      return 'completed';
    case 'expired':
      return 'failed';
    default:
      return status;
  }
}

export const responseObject = onDemand(() =>
  z.strictObject({
    id: z.string(),
    object: z.literal('response'),
    created_at: seconds,
    status: z.enum(RESPONSE_STATUSES),
    background: z.boolean(),
    completed_at: nullableSeconds,
    conversation: z.strictObject({ id: z.string() }).nullable(),
    error: z
      .strictObject({ code: z.enum(['server_error', 'rate_limit_exceeded', 'invalid_prompt']), message: z.string() })
      .nullable(),
    incomplete_details: z.strictObject({ reason: z.enum(['max_output_tokens', 'content_filter']) }).nullable(),
    instructions: z.string().nullable(),
    max_output_tokens: z.int().nullable(),
    max_tool_calls: z.int().nullable(),
    metadata: z.record(z.string(), z.string()),
    model: z.string(),
    output: z.array(responseItemObject()),
    parallel_tool_calls: z.boolean(),
    previous_response_id: z.string().nullable(),
    prompt: z.looseObject({ id: z.string() }).nullable(),
    prompt_cache_key: z.string().nullable(),
    reasoning: z.strictObject({ effort: z.string().nullable(), summary: z.string().nullable() }),
    safety_identifier: z.string().nullable(),
    service_tier: z.string(),
    temperature: z.number(),
    text: z.strictObject({ format: z.looseObject({ type: z.string() }), verbosity: z.string() }),
    tool_choice: z.union([z.string(), z.looseObject({ type: z.string() })]),
    tools: z.array(z.looseObject({ type: z.string() })),
    top_logprobs: z.int(),
    top_p: z.number(),
    truncation: z.enum(['auto', 'disabled']),
    usage: responseUsageObject().optional(),
    user: z.string().optional(),
  }),
);
export type ResponseObject = z.infer<ReturnType<typeof responseObject>>;

export const inputTokensObject = onDemand(() =>
  z.strictObject({
    object: z.literal('response.input_tokens'),
    input_tokens: z.int(),
  }),
);
