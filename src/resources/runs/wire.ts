import { toUnixSeconds } from '../../lib/time';
import type { RunObject, RunStepObject, RunTraceObject } from './objects';
import { runEndedAt, runEndFields } from './execution/trace';
import type { StepDetails } from '../../db/json-columns';
import { isTerminal } from '../../db/run-statuses';
import type { StepRow } from './queries';
import type { RunRow } from '../../db/schema';

/** OpenAI's Run and RunStep objects, from their rows. */

export function toRunJson(row: RunRow): RunObject {
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

/**
 * A run step. A file search shows its results' content only when the client asks for it
 * (`include[]=step_details.tool_calls[*].file_search.results[*].content`), as OpenAI's do; the
 * model's side of a file search or a code_interpreter call (`function`) is the gateway's own and
 * never shown.
 */
export function toStepJson(row: StepRow, run: Pick<RunRow, 'expiresAt'>, includeContent = false): RunStepObject {
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
    step_details: stepDetailsJson(row.stepDetails, includeContent),
    usage: row.usage ?? null,
    // OpenAI's RunStep has metadata, which no operation sets: always empty here.
    metadata: {},
  };
}

function stepDetailsJson(details: StepDetails, includeContent: boolean): RunStepObject['step_details'] {
  if (details.type === 'message_creation') return details;
  return {
    type: details.type,
    tool_calls: details.tool_calls.map((call) => {
      if (call.type === 'function') return call;
      if (call.type === 'code_interpreter')
        return { id: call.id, type: call.type, code_interpreter: call.code_interpreter };
      const results = call.file_search.results.map(({ content, ...result }) =>
        includeContent ? { ...result, content } : result,
      );
      return {
        id: call.id,
        type: call.type,
        file_search: { ranking_options: call.file_search.ranking_options, results },
      };
    }),
  };
}

const seconds = (ms: number | null) => (ms === null ? null : toUnixSeconds(ms));

type TraceEvent = RunTraceObject['events'][number];

/**
 * A run's trace (GET /v1/runs/{run_id}/trace): its log line's fields once it ended, its provider
 * attempts, and its events in time order from its row, `steps` (its first ones) and its attempts.
 * `virtualKey`: the slug of the key that answered last, or the run's own.
 */
export function toRunTraceJson(
  run: RunRow,
  steps: { rows: StepRow[]; hasMore: boolean },
  virtualKey: string | null,
  now: number,
): RunTraceObject {
  const attempts = run.trace?.attempts ?? [];
  const ended = runEndedAt(run);
  const events: TraceEvent[] = [{ at_ms: run.createdAt, type: 'created' }];
  if (run.startedAt !== null) events.push({ at_ms: run.startedAt, type: 'started' });
  attempts.forEach((attempt, index) =>
    events.push({
      at_ms: attempt.at_ms,
      type: 'attempt',
      attempt: index,
      ...(attempt.outcome ? { status: attempt.outcome } : {}),
    }),
  );
  for (const step of steps.rows) {
    events.push({ at_ms: step.createdAt, type: 'step_created', step_id: step.id, step_type: step.type });
    const stepEnded = step.completedAt ?? step.failedAt ?? step.cancelledAt ?? step.expiredAt;
    if (stepEnded !== null)
      events.push({ at_ms: stepEnded, type: 'step_ended', step_id: step.id, status: step.status });
  }
  const terminal = isTerminal(run.status);
  if (terminal && ended !== null) events.push({ at_ms: ended, type: 'ended', status: run.status });
  // Stable: what happened at the same millisecond keeps the order it was added in (created before started).
  events.sort((a, b) => a.at_ms - b.at_ms);
  return {
    object: 'run.trace',
    run_id: run.id,
    thread_id: run.threadId,
    log: terminal ? runEndFields(run, virtualKey, now) : null,
    attempts,
    attempts_total: run.trace?.attempts_total ?? 0,
    events,
    steps_omitted: steps.hasMore,
  };
}
