import type { Logger } from '../../../logger';
import { UpstreamError } from '../../../providers/types';
import type { Settlement } from '../executor-writes';
import type { RunError } from '../../../db/json-columns';
import { RunStopped } from './executions';
import { upstreamCause, upstreamErrorCode } from './outcome';

/**
 * How a turn that stopped without its answer settles: the errors the engine throws to say why,
 * and the settlement each one becomes (the engine writes it: engine.ts, #settleFailure).
 */

/** The gateway ends the run itself: failed with `lastError`, for the reason `why` (its log line's cause). */
export class RunFailed extends Error {
  constructor(
    readonly lastError: RunError,
    readonly why: string,
  ) {
    super(lastError.message);
  }
}

/** Recording how a run ended failed (the write threw); carries what failed, for the log. */
export class OutcomeNotRecorded extends Error {
  constructor(readonly reason: unknown) {
    super("the run's outcome could not be recorded");
  }
}

/** The last_error of a run whose outcome could not be recorded: what happened, without internals. */
export const NOT_RECORDED = {
  code: 'server_error',
  message: "The gateway could not record the run's outcome: the write to its database failed.",
};

/**
 * The settlement of a turn that stopped with `error` (or was stopped: `abortReason`), and whether
 * the gateway itself failed (`internal`: logged here, and the stream ends with an `error` event).
 */
export function failureSettlement(
  error: unknown,
  abortReason: unknown,
  log: Logger,
  runId: string,
): { settlement: Settlement; internal: boolean } {
  const stopped = error instanceof RunStopped ? error : abortReason instanceof RunStopped ? abortReason : null;
  if (stopped) return { settlement: { status: stopped.outcome }, internal: false };
  if (error instanceof RunFailed)
    return { settlement: { status: 'failed', lastError: error.lastError, cause: error.why }, internal: false };
  if (error instanceof UpstreamError) {
    return {
      settlement: {
        status: 'failed',
        lastError: { code: upstreamErrorCode(error), message: error.message },
        cause: upstreamCause(error),
      },
      internal: false,
    };
  }
  if (error instanceof OutcomeNotRecorded) {
    log.error('could not record how a run ended', { run_id: runId, error: error.reason });
    return { settlement: { status: 'failed', lastError: NOT_RECORDED, cause: 'not_recorded' }, internal: true };
  }
  log.error('run failed inside the gateway', { run_id: runId, error });
  return {
    settlement: {
      status: 'failed',
      lastError: { code: 'server_error', message: 'The gateway had an internal error while executing the run.' },
      cause: 'internal',
    },
    internal: true,
  };
}
