import type { RequestContext } from '../../../actor';
import type { RunRow } from '../queries';
import type { VirtualKey } from '../../virtual-keys/commands';
import type { ServerSentEvent } from './event-stream';
import type { Prompt } from './prompt';

/**
 * Where runs execute: the one thing the two runtimes do differently with a run. Node executes it
 * in its own process (runtime/node/run-host.ts); Workers hand it to the run's executor object, since a
 * Worker's `waitUntil` ends 30 seconds after its response (runtime/workers/run-host.ts). Either way the
 * execution does not belong to the request: a client that disconnects does not stop it.
 *
 * The caller has already put the run in progress (created it, or accepted its tool outputs), so
 * the host owns it from here: resources/runs/execution/engine.ts executes it, resources/runs/execution/settle.ts ends it.
 */
export interface RunHost {
  /** Executes the run in the background; its answer (the queued run) has gone out already. */
  start(run: RunRow, options: StartOptions, context: RequestContext): void;
  /**
   * Executes the run into its event stream, `leading` first: the response's body. `written` is
   * the commit of the run's rows when it is still under way: a host may start the run's upstream
   * call meanwhile (the first token comes sooner by a commit), but sends and writes nothing until
   * it has succeeded, and drops the execution, without a trace, if it fails. The caller answers
   * with the stream only once the commit succeeded.
   */
  stream(run: RunRow, options: StreamOptions, context: RequestContext, written?: Promise<unknown>): Promise<ReadableStream<Uint8Array>>;
  /**
   * Stops a run just marked `cancelling`, at once, where it executes. Wherever this does not
   * reach, the run's lease renewal notices the cancel, within a third of the lease.
   */
  cancel(runId: string, context: RequestContext): void;
}

/**
 * What the caller of a run's first turn already holds, to spare the turn's database reads: the
 * creating use-case resolved the virtual key and built the prompt (it sized the turn's token
 * reservation by it).
 */
export interface Preloaded {
  virtualKey: VirtualKey;
  prompt: Prompt;
}

export interface StartOptions {
  preloaded?: Preloaded;
}

export interface StreamOptions extends StartOptions {
  /** Events the stream opens with, before the run's `in_progress` (thread.created, …). */
  leading?: ServerSentEvent[];
  /** Whether file search steps show their results' content (`include[]` on run create). */
  includeResultContent?: boolean;
}
