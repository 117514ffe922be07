import { renewLease } from '../executor-writes';
import { leaseMs } from '../queries';
import type { RunRow } from '../../../db/schema';
import type { RunDeps } from './run-deps';
import { RunStopped } from './executions';

/**
 * The clocks of an execution: the run's expiry (expires_at), and the renewal of its lease, which
 * also notices a cancel made where the execution is not (another process, another isolate). Both
 * stop the execution through `abort`, with RunStopped as the reason. Returns what stops them.
 */
export function holdLease(
  deps: Pick<RunDeps, 'db' | 'config' | 'log' | 'now'>,
  run: RunRow,
  abort: AbortController,
  rowsExist: Promise<boolean>,
): () => void {
  const expiresIn = (run.expiresAt ?? Infinity) - deps.now();
  const expiry = setTimeout(
    () => abort.abort(new RunStopped('expired')),
    Math.max(0, Math.min(expiresIn, 2 ** 31 - 1)),
  );
  const renew = async () => {
    if (!(await rowsExist)) return;
    try {
      const status = await renewLease(deps.db, run.id, deps.now() + leaseMs(deps.config));
      if (status === 'cancelling' || status === null) abort.abort(new RunStopped('cancelled'));
    } catch (error) {
      deps.log.warn('run lease renewal failed', { run_id: run.id, error });
    }
  };
  // Renewed a few times per lease, so that one slow renewal does not lose it.
  const renewal = setInterval(() => void renew(), leaseMs(deps.config) / 3);
  return () => {
    clearTimeout(expiry);
    clearInterval(renewal);
  };
}
