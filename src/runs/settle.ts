import { batch } from '../db/client';
import type { Deps } from '../deps';
import { chargeTokens } from '../ratelimit';
import type { RunStatus } from '../db/schema';
import { settleRunStatements, type RunRow, type Settlement } from '../services/runs';
import type { MessageRow } from '../services/threads';

/**
 * Ends a run that will not produce its answer: cancelled, expired or failed. Used by the engine when
 * an execution stops, by the cancel route for a run with no executor (queued, requires_action), and
 * by the recovery sweep for runs whose executor died. Charges the run's tokens once it is terminal.
 * Only a run in one of `from` is settled. Returns the settled run and the message it left
 * incomplete, or a null run when the run was no longer in one of `from`.
 */
export async function settleRun(
  deps: Deps,
  runId: string,
  from: readonly RunStatus[],
  settlement: Settlement,
  partial?: { messageId: string; text: string },
): Promise<{ run: RunRow | null; message: MessageRow | null }> {
  const statements = settleRunStatements(deps.db, runId, from, settlement, deps.now(), partial);
  const results = await batch(deps.db, statements);
  const [run] = results[results.length - 1] as RunRow[];
  const [message] = results[results.length - 2] as MessageRow[];
  if (run) await chargeRun(deps, run);
  return { run: run ?? null, message: message ?? null };
}

/**
 * Fails a run whose settlement could not be written (settleRun threw): first the run's row alone,
 * one statement, so that the run ends at once with `lastError` instead of waiting for its lease;
 * then its open steps and message, one statement each, as far as they go. Answers the failed run,
 * or null when it was no longer in one of `from`. Throws only when the run's own write fails.
 */
export async function failRunAlone(
  deps: Deps,
  runId: string,
  from: readonly RunStatus[],
  lastError: { code: string; message: string },
): Promise<RunRow | null> {
  const statements = settleRunStatements(deps.db, runId, from, { status: 'failed', lastError }, deps.now());
  const [run] = (await statements[statements.length - 1]!) as RunRow[];
  if (!run) return null;
  for (const close of statements.slice(0, -1)) {
    try {
      await close;
    } catch (error) {
      deps.log.error('could not close a step or message of a failed run', { run_id: runId, error });
    }
  }
  await chargeRun(deps, run);
  return run;
}

/** Charges a terminal run's tokens to the token policies it was admitted under. Never throws. */
export async function chargeRun(deps: Deps, run: RunRow): Promise<void> {
  const total = run.usage?.total_tokens ?? 0;
  if (total <= 0 || !run.rateLimit) return;
  try {
    await chargeTokens(deps, run.rateLimit as Parameters<typeof chargeTokens>[1], total);
  } catch (error) {
    deps.log.error('could not charge a run to its token policies', { run_id: run.id, error });
  }
}
