import { ACTIVE_STATUSES, isActive } from '../../../db/run-statuses';
import { orphanedRuns, overdueRuns } from '../executor-writes';
import type { RunRow } from '../../../db/schema';
import { settleRun, type SettleDeps } from './settle';
import { settledTrace } from './trace';

/**
 * No run stays queued, in progress or waiting forever. Two ways a run is left behind:
 * - its executor died (a crash, a kill -9, a redeploy): its lease runs out, and the run fails with a
 *   last_error that says so;
 * - it waits for tool outputs past its expiry: it expires.
 * `reconcileRun` settles one such run when a client looks at it; `sweepRuns` settles all of them,
 * periodically (a timer on Node, the cron trigger on Workers).
 */

export const ORPHANED = {
  code: 'server_error',
  message:
    'The gateway executing this run stopped before the run finished (a restart or a crash); it was not completed.',
} as const;

/** The run as it really stands: settles it first if it was left behind. */
export async function reconcileRun(deps: SettleDeps, run: RunRow): Promise<RunRow> {
  const now = deps.now();
  if (isActive(run.status) && run.leaseExpiresAt !== null && run.leaseExpiresAt < now) {
    return (
      (
        await settleRun(
          deps,
          run.id,
          ACTIVE_STATUSES,
          { status: 'failed', lastError: { ...ORPHANED }, cause: 'executor_lost' },
          settledTrace(run, deps.now),
        )
      ).run ?? run
    );
  }
  if (run.status === 'requires_action' && run.expiresAt !== null && run.expiresAt < now) {
    return (
      (await settleRun(deps, run.id, ['requires_action'], { status: 'expired' }, settledTrace(run, deps.now))).run ??
      run
    );
  }
  return run;
}

/** Settles every left-behind run (in bounded batches); answers how many it settled. */
export async function sweepRuns(deps: SettleDeps, batchSize = 100): Promise<number> {
  let settled = 0;
  for (const find of [orphanedRuns, overdueRuns]) {
    for (;;) {
      const stale = await find(deps.db, deps.now(), batchSize);
      for (const run of stale) {
        const after = await reconcileRun(deps, run);
        if (after !== run) settled++;
      }
      if (stale.length < batchSize) break;
    }
  }
  return settled;
}
