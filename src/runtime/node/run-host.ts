import { executeRun, executeStreamed } from '../../resources/runs/execution/engine';
import type { RunDeps } from '../../resources/runs/execution/run-deps';
import type { RunHost } from '../../deps';

/**
 * Runs execute in this process, kept alive by the request's waitUntil (on Node, a TaskTracker
 * that a shutdown waits for: runtime/node/app.ts). A cancel reaches the execution here at once.
 */
export function inProcessRunHost(deps: RunDeps): RunHost {
  return {
    start(run, options, context) {
      // From the next turn of the event loop: starting the provider call is about a millisecond of
      // synchronous work, which would otherwise go out before the acknowledgement it does not
      // need to precede.
      const nextTurn = new Promise<void>((resolve) => setImmediate(resolve));
      context.waitUntil(nextTurn.then(() => executeRun(deps, run, options)));
    },
    stream(run, options, context, written) {
      const { readable, done } = executeStreamed(deps, run, { rowsWritten: written, ...options }, context.requestId);
      context.waitUntil(done);
      return Promise.resolve(readable);
    },
    execute(run, options, context, written) {
      const done = executeRun(deps, run, { rowsWritten: written, ...options });
      context.waitUntil(done);
      return done;
    },
    cancel(runId) {
      deps.executions.cancel(runId);
    },
  };
}
