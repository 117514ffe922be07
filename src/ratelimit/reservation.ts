/**
 * How many tokens a turn of a run reserves in its tokens policies while it executes: what it may
 * complete, plus an estimate of its prompt. The turn's real usage replaces the reservation when
 * the turn ends (settleTokens), so the estimate only decides how many turns run at once, never what
 * is charged. The README's "Rate limiting" gives the overshoot this bounds.
 */

/** About four characters a token: the estimate the engine also uses for upstreams that report no usage. */
export const CHARS_PER_TOKEN = 4;

/**
 * The usage charged for an answer whose provider reported none (or none plausible): about four
 * characters a token of what was sent and of what came back, so that token policies still count.
 */
export function estimatedUsage(promptChars: number, completionChars: number) {
  const prompt = Math.ceil(promptChars / CHARS_PER_TOKEN);
  const completion = Math.ceil(completionChars / CHARS_PER_TOKEN);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

export interface TurnEstimate {
  /** Characters of what the turn sends that the gateway holds as text (instructions, tools, messages, tool outputs). */
  promptChars: number;
  /** Tokens known to be in the prompt already: the earlier turns' prompt and completion. */
  knownPromptTokens: number;
  /** The run's max_completion_tokens, or null. */
  maxCompletionTokens: number | null;
  /** Completion tokens the run's earlier turns used (they count against max_completion_tokens). */
  completionTokensSoFar: number;
}

/**
 * The prompt estimate plus the completion the turn may still produce: what is left of
 * max_completion_tokens, or `defaultCompletion` (GATEWAY_TOKEN_RESERVATION) without it.
 */
export function turnReservation(turn: TurnEstimate, defaultCompletion: number): number {
  const prompt = turn.knownPromptTokens + Math.ceil(turn.promptChars / CHARS_PER_TOKEN);
  const completion =
    turn.maxCompletionTokens === null
      ? defaultCompletion
      : Math.max(0, turn.maxCompletionTokens - turn.completionTokensSoFar);
  return prompt + completion;
}

/** Characters of a prompt's parts as JSON, the way they travel to the provider. */
export function promptChars(parts: unknown[]): number {
  return JSON.stringify(parts).length;
}
