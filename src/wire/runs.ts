import { toUnixSeconds } from '../lib/time';
import { isTerminal, type RunRow, type StepRow } from '../services/runs';

/** OpenAI's Run and RunStep objects, from their rows. */

export function toRunJson(row: RunRow) {
  const terminal = isTerminal(row.status);
  return {
    id: row.id,
    object: 'thread.run' as const,
    created_at: toUnixSeconds(row.createdAt),
    assistant_id: row.assistantId,
    thread_id: row.threadId,
    status: row.status,
    started_at: seconds(row.startedAt),
    // As OpenAI does: a run that has ended no longer expires.
    expires_at: terminal ? null : seconds(row.expiresAt),
    cancelled_at: seconds(row.cancelledAt),
    failed_at: seconds(row.failedAt),
    completed_at: seconds(row.completedAt),
    required_action: row.requiredAction ?? null,
    last_error: row.lastError ?? null,
    model: row.model,
    instructions: row.instructions,
    tools: row.tools,
    tool_resources: row.toolResources ?? {},
    metadata: row.metadata,
    temperature: row.temperature ?? 1,
    top_p: row.topP ?? 1,
    max_completion_tokens: row.maxCompletionTokens,
    max_prompt_tokens: row.maxPromptTokens,
    truncation_strategy: row.truncationStrategy,
    incomplete_details: row.incompleteDetails ?? null,
    usage: terminal ? (row.usage ?? null) : null,
    response_format: row.responseFormat,
    tool_choice: row.toolChoice,
    parallel_tool_calls: row.parallelToolCalls,
  };
}

export function toStepJson(row: StepRow, run: Pick<RunRow, 'expiresAt'>) {
  return {
    id: row.id,
    object: 'thread.run.step' as const,
    created_at: toUnixSeconds(row.createdAt),
    run_id: row.runId,
    assistant_id: row.assistantId,
    thread_id: row.threadId,
    type: row.type,
    status: row.status,
    cancelled_at: seconds(row.cancelledAt),
    completed_at: seconds(row.completedAt),
    expires_at: row.status === 'in_progress' ? seconds(run.expiresAt) : null,
    failed_at: seconds(row.failedAt),
    expired_at: seconds(row.expiredAt),
    last_error: row.lastError ?? null,
    step_details: row.stepDetails,
    usage: row.usage ?? null,
    // OpenAI's RunStep has metadata, which no operation sets: always empty here.
    metadata: {},
  };
}

const seconds = (ms: number | null) => (ms === null ? null : toUnixSeconds(ms));
