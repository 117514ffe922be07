import type { Actor } from '../../actor';
import type { Settings } from '../../db/settings-cache';
import type { Deps } from '../../deps';
import {
  admitRequest,
  admitWithoutTokens,
  promptChars,
  requestMetadata,
  settleTokens,
  turnReservation,
  type Admission,
  type RequestAttributes,
  type TurnTokens,
} from '../../ratelimit';
import type { VirtualKey } from '../../db/schema';
import type { StepRow } from './queries';
import type { RunRow } from '../../db/schema';
import type { Prompt } from '../../providers/types';

/**
 * A run's turns before rate limits (ratelimit/): what the first turn and the turn after tool
 * outputs reserve, their admission, and the reservation given back when the write that makes a
 * turn real fails. The run use-cases (commands.ts) call these in their order.
 */

type AdmissionDeps = Pick<Deps, 'config' | 'counters' | 'policyCache' | 'log' | 'now' | 'metrics'>;

/**
 * Rate-limit admission for run traffic: creating a run and continuing one both spend tokens
 * (runAttributes: what the policies match). The policies are taken as of the snapshot's generation only if it is the database's: settings assumed
 * unchanged (ProvisionalSettings) that have moved would find the policies held at it, which may
 * predate a policy made since.
 */
export async function admit(
  deps: AdmissionDeps,
  actor: Actor,
  snapshot: Settings,
  key: VirtualKey,
  run: RunRow,
  turn: TurnTokens,
): Promise<Admission> {
  const generation = (await snapshot.holds()) ? snapshot.generation : null;
  return admitRequest(deps, runAttributes(actor, key, run), turn, generation);
}

/**
 * A new run's admission before its prompt is known (commands.ts, a run in one round trip): null,
 * counting nothing, where it needs the prompt (a tokens policy matches) or the policies are not
 * held at the snapshot's generation (reading them would cost the round trip it saves); and null
 * for a refusal under settings that moved, decided again on the settings as they are (the 429 is
 * thrown when they have not).
 */
export async function admitBeforePrompt(
  deps: AdmissionDeps,
  actor: Actor,
  snapshot: Settings,
  key: VirtualKey,
  run: RunRow,
): Promise<Admission | null> {
  try {
    return await admitWithoutTokens(deps, runAttributes(actor, key, run), snapshot.generation);
  } catch (error) {
    if (await snapshot.holds()) throw error;
    return null;
  }
}

/** What the policies match a run's turn on. The model is the run's, which through an Azure key is the deployment's (servedModel). */
function runAttributes(actor: Actor, key: VirtualKey, run: RunRow): RequestAttributes {
  return {
    api_key: actor.apiKeyId,
    workspace_id: actor.workspaceId,
    virtual_key: key.slug,
    provider: key.provider,
    model: run.model,
    metadata: requestMetadata(run.metadata, actor.metadataHeader),
  };
}

/** What a new run's first turn reserves: its prompt, as it will be sent (truncated). */
export function firstTurn(deps: AdmissionDeps, run: RunRow, prompt: Prompt): TurnTokens {
  const estimate = {
    promptChars: prompt.chars,
    knownPromptTokens: 0,
    maxCompletionTokens: run.maxCompletionTokens,
    completionTokensSoFar: 0,
  };
  return { reservation: turnReservation(estimate, deps.config.GATEWAY_TOKEN_RESERVATION), baseTokens: 0 };
}

/**
 * What the turn after tool outputs reserves: its prompt is the last turn's tokens (that turn's
 * prompt and its calls, the step's usage) and the outputs.
 */
export function nextTurn(deps: AdmissionDeps, run: RunRow, step: StepRow, outputs: Map<string, string>): TurnTokens {
  const estimate = {
    promptChars: promptChars([...outputs.values()]),
    knownPromptTokens: step.usage?.total_tokens ?? 0,
    maxCompletionTokens: run.maxCompletionTokens,
    completionTokensSoFar: run.usage?.completion_tokens ?? 0,
  };
  return {
    reservation: turnReservation(estimate, deps.config.GATEWAY_TOKEN_RESERVATION),
    baseTokens: run.usage?.total_tokens ?? 0,
  };
}

/**
 * The write that makes an admitted turn real. If it fails, the turn never executes and nothing
 * would release its token reservation: it goes back at once.
 */
export async function unlessWritten<T>(deps: AdmissionDeps, admission: Admission, write: Promise<T>): Promise<T> {
  try {
    return await write;
  } catch (error) {
    await settleTokens(deps, admission.ticket, 0);
    throw error;
  }
}
