import type { Logger } from '../../logger';
import type { RequestContext } from '../../actor';
import type { Answered, RunHost, StartOptions, StreamOptions } from '../../deps';
import type { RunRow } from '../../db/schema';

/**
 * What a run's executor object (run-executor.ts) answers over RPC: the RunHost calls, received
 * where the run executes.
 */
export interface RunExecutorRpc extends Rpc.DurableObjectBranded {
  start(run: RunRow, options: StartOptions): Promise<void>;
  stream(
    run: RunRow,
    options: Omit<StreamOptions, 'answered'>,
    written?: Written,
    answered?: Rpc.Stub<Answered>,
  ): Promise<ReadableStream<Uint8Array>>;
  execute(run: RunRow, options: StartOptions, written?: Written, answered?: Rpc.Stub<Answered>): Promise<void>;
  cancel(runId: string): Promise<void>;
}

/**
 * The commit of a run's rows, still under way when the run is handed over (RunHost.stream's
 * `written`): a function the object calls back over RPC, since a promise cannot travel, which
 * answers whether the rows were written. The object starts the run's upstream call meanwhile, as
 * Node's host does, so that a streamed run's first token waits for one round trip to the database
 * fewer.
 */
export type Written = () => Promise<boolean>;

/**
 * Runs execute in Durable Objects: a Worker's `waitUntil` ends 30 seconds after its response or its
 * client's disconnect, too short for a run that takes minutes. `executors` objects take turns at
 * them, each run in the one its id names (executorName), so that a cancel and a run continued by
 * tool outputs come back to the same one; an object serves run after run, where creating one (and
 * opening its storage) for each was a fifth of workerd's CPU per streamed run (bench:worker under
 * perf). 0: an object of its own for every run.
 */
export function workersRunHost(
  namespace: DurableObjectNamespace<RunExecutorRpc>,
  log: Logger,
  executors: number,
): RunHost {
  const executor = (runId: string) => namespace.get(namespace.idFromName(executorName(runId, executors)));

  /**
   * A call to the executor that the request does not wait for (the object outlives the request):
   * kept going by the request's waitUntil, its failure reported by `failed`.
   */
  const handOver = (
    context: RequestContext,
    runId: string,
    call: (stub: DurableObjectStub<RunExecutorRpc>) => Promise<unknown>,
    failed: (error: unknown) => void,
  ) => context.waitUntil(call(executor(runId)).catch(failed));

  return {
    // Should the hand-over fail, the run is still leased: recovery fails it once the lease runs out.
    start: (run, options, context) =>
      handOver(
        context,
        run.id,
        (stub) => stub.start(run, options),
        (error) =>
          log.error('run could not be handed to its executor', {
            run_id: run.id,
            request_id: context.requestId,
            error,
          }),
      ),
    // How the run settled comes back as one call from the object (StreamOptions.answered), not read
    // from its stream, which the runtime relays to the client without running JavaScript here.
    stream: (run, { answered, ...options }, _context, written) =>
      executor(run.id).stream(run, options, asked(written), answered),
    // Awaited by the request: a client that goes away does not stop the execution, which the object keeps alive.
    execute: (run, { answered, ...options }, _context, written) =>
      executor(run.id).execute(run, options, asked(written), answered),
    // The run's lease renewal notices the cancel anyway, within a third of the lease.
    cancel: (runId, context) =>
      handOver(
        context,
        runId,
        (stub) => stub.cancel(runId),
        (error) =>
          log.warn('cancel could not reach the run executor', { run_id: runId, request_id: context.requestId, error }),
      ),
  };
}

/** `written` as the executor object asks for it (Written). */
function asked(written: Promise<unknown> | undefined): Written | undefined {
  return (
    written &&
    (() =>
      written.then(
        () => true,
        () => false,
      ))
  );
}

/**
 * The name of the executor object of the run `runId` among `executors` (its id's FNV-1a hash,
 * modulo their number): the same for every request about the run. 0 executors: the run's own.
 */
export function executorName(runId: string, executors: number): string {
  if (executors === 0) return runId;
  let hash = 0x811c9dc5;
  for (let i = 0; i < runId.length; i++) hash = Math.imul(hash ^ runId.charCodeAt(i), 0x01000193);
  return `executor-${(hash >>> 0) % executors}`;
}
