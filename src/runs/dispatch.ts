import type { Deps } from '../deps';
import { serverError } from '../errors';
import type { RunRow } from '../services/runs';
import { abortExecution, executeRun, type ExecuteOptions } from './engine';
import { EventStream } from './event-stream';

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

/**
 * Executes a run into a new event stream, wherever it executes (here, or in a Workers executor
 * object): the stream to answer with, and the execution, which never rejects. The stream ends with
 * `done`, after an `error` event if the gateway itself failed once the stream had begun.
 */
export function executeStreamed(
  deps: Deps,
  run: RunRow,
  options: Pick<ExecuteOptions, 'leading' | 'preloaded'>,
  requestId?: string,
): { readable: ReadableStream<Uint8Array>; done: Promise<void> } {
  // A client that reads nothing is given as long as a silent upstream.
  const events = new EventStream({ stallMs: deps.config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS });
  const done = (async () => {
    try {
      await executeRun(deps, run, { ...options, sink: events });
    } catch (error) {
      deps.log.error('run stream failed', { run_id: run.id, request_id: requestId, error });
      await events.fail(serverError().body);
    } finally {
      await events.close();
    }
  })();
  return { readable: events.readable, done };
}
