import type { ResponseRow, RunRow } from '../../db/schema';
import { responseErrorCode, responseUsage, type DescribeResponse, type ResponseState } from './events';
import { responseStatus, type ResponseItemObject, type ResponseObject } from './objects';

/**
 * A response as the Responses API answers it: its run's state (status, settings, usage, error)
 * with what the responses row keeps of the request (`options`), and its output items.
 */

const seconds = (ms: number) => Math.floor(ms / 1000);

export function toResponseJson(run: RunRow, row: ResponseRow, output: ResponseItemObject[]): ResponseObject {
  return responseObject(run, row, {
    status: responseStatus(run.status),
    output,
    usage: run.usage ? responseUsage(run.usage) : null,
    error: run.lastError ? { code: responseErrorCode(run.lastError.code), message: run.lastError.message } : null,
    incomplete_details: run.incompleteDetails ? { reason: incompleteReason(run.incompleteDetails.reason) } : null,
    completed_at: run.completedAt === null ? null : seconds(run.completedAt),
  });
}

/**
 * The response object for a state (status, output, usage, …) from the stream's view or the run's
 * row, every other field from the run and the row: built field by field, in the reference's order,
 * since the stream builds it for its first and last events.
 */
function responseObject<Output>(
  run: RunRow,
  row: ResponseRow,
  state: Omit<ResponseState, 'output'> & { output: Output },
): Omit<ResponseObject, 'output'> & { output: Output } {
  const { options } = row;
  return {
    id: run.id,
    object: 'response',
    created_at: seconds(run.createdAt),
    status: state.status,
    background: row.background,
    completed_at: state.completed_at,
    conversation: row.conversationId === null ? null : { id: row.conversationId },
    error: state.error,
    incomplete_details: state.incomplete_details,
    instructions: options.instructions ?? null,
    max_output_tokens: run.maxCompletionTokens,
    max_tool_calls: options.max_tool_calls ?? null,
    metadata: run.metadata,
    model: run.model,
    output: state.output,
    parallel_tool_calls: run.parallelToolCalls,
    previous_response_id: row.previousResponseId,
    prompt: options.prompt ?? null,
    prompt_cache_key: options.prompt_cache_key ?? null,
    reasoning: { effort: run.reasoningEffort, summary: options.reasoning?.summary ?? null },
    safety_identifier: options.safety_identifier ?? null,
    service_tier: options.service_tier ?? 'default',
    temperature: run.temperature ?? 1,
    text: { format: options.text?.format ?? { type: 'text' }, verbosity: options.text?.verbosity ?? 'medium' },
    tool_choice: options.tool_choice ?? 'auto',
    tools: options.tools ?? [],
    top_logprobs: options.top_logprobs ?? 0,
    top_p: run.topP ?? 1,
    truncation: options.truncation ?? 'disabled',
    // Absent rather than null, as OpenAI's description has them: no usage yet, no user given.
    ...(state.usage ? { usage: state.usage } : {}),
    ...(options.user ? { user: options.user } : {}),
  };
}

/**
 * The response object the events of its stream carry (events.ts): the response as it stands, with
 * the stream's own view of its status, output and usage.
 */
export function describeResponse(run: RunRow, row: ResponseRow): DescribeResponse {
  return (state) => responseObject(run, row, state);
}

function incompleteReason(reason: string): 'max_output_tokens' | 'content_filter' {
  return reason === 'content_filter' ? 'content_filter' : 'max_output_tokens';
}
