import type { Deps } from '../deps';
import { abortExecution, executeRun, executeStreamed } from '../runs/engine';

/**
 * Runs a dispatched run in this process, as background work (see Deps.dispatchRun), from the next
 * turn of the event loop: starting the provider call is about a millisecond of synchronous work,
 * which would otherwise go out before the acknowledgement it does not need to precede.
 */
export const dispatchInProcess: Deps['dispatchRun'] = (c, run, preloaded) => {
  const { deps } = c.var;
  const nextTurn = new Promise<void>((resolve) => setImmediate(resolve));
  deps.background(c, nextTurn.then(() => executeRun(deps, run, { preloaded })));
};

/** Streams a run executing in this process, as background work (see Deps.streamRun). */
export const streamInProcess: Deps['streamRun'] = (c, run, options) => {
  const { deps } = c.var;
  const { readable, done } = executeStreamed(deps, run, options, c.var.requestId);
  deps.background(c, done);
  return Promise.resolve(readable);
};

/** Stops a run executing in this process (see Deps.abortRun). */
export const abortInProcess: Deps['abortRun'] = (_c, runId) => abortExecution(runId);
