import type { UpstreamError, Usage } from '../../../providers/types';

/**
 * How a turn of a run ends, decided from what the upstream said and the run's token caps: pure
 * decisions, kept apart from the engine's bookkeeping (test/resources/runs/execution/outcome.unit.test.ts lists the cases).
 */

/** What the engine saw of a turn that finished. */
export interface TurnEnd {
  /**
   * The upstream's finish_reason; `length` too when the gateway cut the turn short: at its answer
   * cap, or because the run had no completion tokens left to ask for.
   */
  finishReason: string;
  /** Whether the turn streamed tool calls. */
  toolCalls: boolean;
  /** Whether the answer reached GATEWAY_MAX_ANSWER_BYTES and was cut there. */
  cutAtAnswerCap: boolean;
  /** The run's usage, this turn included. */
  usage: Usage;
  maxPromptTokens: number | null;
  maxCompletionTokens: number | null;
}

export type TurnOutcome =
  | { status: 'requires_action' }
  | {
      status: 'completed' | 'incomplete';
      /** Why the run is incomplete; null when it completed. */
      incompleteReason: 'max_completion_tokens' | 'max_prompt_tokens' | null;
      /** Why the answer's message is incomplete; null when it completed. */
      messageIncompleteReason: 'max_tokens' | 'content_filter' | null;
      /** Tool calls cut short cannot be executed: their step fails, saying what cut them. */
      toolCallsCutBy: 'answer_cap' | 'max_completion_tokens' | null;
    };

/**
 * Tool calls that finished ask the client for outputs (requires_action). Otherwise the run ends:
 * incomplete when the answer was cut (`length`) or the run's usage went past one of its caps
 * (prompt first), completed otherwise; its message says why it is incomplete (`max_tokens` for a
 * cut, `content_filter` for a filter) and tool calls cut short fail.
 */
export function turnOutcome(end: TurnEnd): TurnOutcome {
  const cut = end.finishReason === 'length';
  if (end.toolCalls && !cut) return { status: 'requires_action' };
  const incompleteReason = cut
    ? 'max_completion_tokens'
    : end.maxPromptTokens !== null && end.usage.prompt_tokens > end.maxPromptTokens
      ? 'max_prompt_tokens'
      : end.maxCompletionTokens !== null && end.usage.completion_tokens > end.maxCompletionTokens
        ? 'max_completion_tokens'
        : null;
  return {
    status: incompleteReason === null ? 'completed' : 'incomplete',
    incompleteReason,
    messageIncompleteReason: cut ? 'max_tokens' : end.finishReason === 'content_filter' ? 'content_filter' : null,
    toolCallsCutBy: !end.toolCalls ? null : end.cutAtAnswerCap ? 'answer_cap' : 'max_completion_tokens',
  };
}

/**
 * The completion tokens a turn may ask for: what the run's max_completion_tokens leaves after its
 * earlier turns (0 or less: none, the turn ends as cut), or null without a cap.
 */
export function completionBudget(maxCompletionTokens: number | null, earlierCompletionTokens: number): number | null {
  return maxCompletionTokens === null ? null : maxCompletionTokens - earlierCompletionTokens;
}

export const NO_USAGE: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };

export function sumUsage(usages: (Usage | null | undefined)[]): Usage {
  const total = { ...NO_USAGE };
  for (const usage of usages) {
    if (!usage) continue;
    total.prompt_tokens += usage.prompt_tokens;
    total.completion_tokens += usage.completion_tokens;
    total.total_tokens += usage.total_tokens;
  }
  return total;
}

/**
 * The last_error code of a run its upstream failed. OpenAI documents three for runs
 * (`server_error`, `rate_limit_exceeded`, `invalid_prompt`); an upstream's refusal gets the code
 * OpenAI's API answers the same refusal with, so that a client can tell a wrong provider key or
 * model, which retrying will not fix, from the gateway's own failure.
 */
export function upstreamErrorCode(error: Pick<UpstreamError, 'kind' | 'status'>): string {
  if (error.kind !== 'http') return 'server_error';
  switch (error.status) {
    case 401:
    case 403:
      return 'invalid_api_key';
    case 404:
      return 'model_not_found';
    case 400:
    case 422:
      return 'invalid_request_error';
    case 429:
      return 'rate_limit_exceeded';
    default:
      return 'server_error';
  }
}

/** Why an upstream call failed, in a word, for the run's log line: `http_404`, `dns`, `timeout`, … */
export function upstreamCause(error: Pick<UpstreamError, 'kind' | 'status' | 'network'>): string {
  if (error.kind === 'http') return `http_${error.status}`;
  return error.kind === 'network' ? (error.network ?? 'network') : error.kind;
}
