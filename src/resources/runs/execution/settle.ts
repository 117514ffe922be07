import type { Deps } from '../../../deps';
import { settleTokens } from '../../../ratelimit';
import { isTerminal, type RunStatus } from '../../../db/run-statuses';
import { settleRunStatements, type PartialAnswer, type Settlement } from '../executor-writes';
import type { RunRow } from '../../../db/schema';
import type { MessageRow } from '../../threads/queries';
import { getVirtualKey } from '../../virtual-keys/commands';
import type { RunTrace } from '../../../db/json-columns';
import { runEndFields } from './trace';

/** What settling a run uses of the deps. */
export type SettleDeps = Pick<Deps, 'db' | 'now' | 'log' | 'counters' | 'metrics'>;

/**
 * Ends a run that will not produce its answer: cancelled, expired or failed. Used by the engine when
 * an execution stops, by cancelRun (resources/runs/commands.ts) for a run that waits for tool outputs and so
 * has no execution, and by recovery for runs whose executor died. Settles the tokens of the turn it ends, if it
 * ends one. Only a run in one of `from` is settled; `trace` is written with it, its cause the
 * settlement's when it failed. Returns the settled run and the message it left
 * incomplete, or a null run when the run was no longer in one of `from`.
 */
export async function settleRun(
  deps: SettleDeps,
  runId: string,
  from: readonly RunStatus[],
  settlement: Settlement,
  trace: RunTrace,
  partial?: PartialAnswer,
): Promise<{ run: RunRow | null; message: MessageRow | null }> {
  const [, [message], [run]] = await deps.db.batch(
    settleRunStatements(deps.db, runId, from, settlement, deps.now(), trace, partial),
  );
  // A run waiting for tool outputs executes no turn: its last one was settled when it began to wait.
  if (run && !from.includes('requires_action')) await chargeRun(deps, run);
  if (run) await logRunEnd(deps, run);
  return { run: run ?? null, message: message ?? null };
}

/**
 * Fails a run whose settlement could not be written (settleRun threw): first the run's row alone,
 * one statement, so that the run ends at once with `lastError` instead of waiting for its lease;
 * then its open steps and message, one statement each, as far as they go. Answers the failed run,
 * or null when it was no longer in one of `from`. Throws only when the run's own write fails.
 */
export async function failRunAlone(
  deps: SettleDeps,
  runId: string,
  from: readonly RunStatus[],
  lastError: { code: string; message: string },
  trace: RunTrace,
): Promise<RunRow | null> {
  const [steps, message, failRun] = settleRunStatements(
    deps.db,
    runId,
    from,
    { status: 'failed', lastError },
    deps.now(),
    trace,
  );
  const [run] = await failRun;
  if (!run) return null;
  for (const close of [steps, message]) {
    try {
      await close;
    } catch (error) {
      deps.log.error('could not close a step or message of a failed run', { run_id: runId, error });
    }
  }
  await chargeRun(deps, run);
  await logRunEnd(deps, run);
  return run;
}

/**
 * Settles the turn a run just ended, in requires_action or a terminal state, with its tokens
 * policies: the turn's reservation released, its real tokens (the run's usage beyond what it had
 * before the turn) charged. Called once per turn, by whoever moved the run out of execution: the
 * move is conditional, so only one caller gets the row. Never throws.
 */
export async function chargeRun(deps: Pick<Deps, 'now' | 'log' | 'counters'>, run: RunRow): Promise<void> {
  const ticket = run.rateLimit;
  if (!ticket) return;
  const tokens = (run.usage?.total_tokens ?? 0) - (ticket.base_tokens ?? 0);
  try {
    await settleTokens(deps, ticket, tokens);
  } catch (error) {
    deps.log.error('could not settle a run turn with its token policies', { run_id: run.id, error });
  }
}

/**
 * One `info` line for each run that ends (completed, incomplete, failed, cancelled, expired), whoever
 * ends it: the engine, a cancel, the recovery sweep; its fields (trace.ts, runEndFields) are those
 * the run's trace answers, from the row as it was written, its trace included. Ids and counts only,
 * never content. Never throws. The run is counted in the metrics here too, with its tokens as the
 * usage table's trigger counts them (migration 0015): the whole run's, under its model and kind, when it ends.
 */
export async function logRunEnd(deps: Pick<Deps, 'db' | 'log' | 'now' | 'metrics'>, run: RunRow): Promise<void> {
  if (!isTerminal(run.status)) return;
  deps.metrics.runEnded(run.kind, run.status);
  deps.metrics.tokens(run.kind, run.model, run.usage?.prompt_tokens ?? 0, run.usage?.completion_tokens ?? 0);
  if (!deps.log.enabled('info')) return;
  deps.log.info('run ended', runEndFields(run, await answeringKey(deps, run), deps.now()));
}

/** The slug of the virtual key that answered the run last, or else the run's own (read; null if gone). */
export async function answeringKey(deps: Pick<Deps, 'db'>, run: RunRow): Promise<string | null> {
  return run.trace?.virtual_key ?? (await getVirtualKey(deps.db, run.virtualKeyId).catch(() => null))?.slug ?? null;
}
