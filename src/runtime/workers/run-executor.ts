import { DurableObject } from 'cloudflare:workers';
import { executeRun, executeStreamed } from '../../resources/runs/execution/engine';
import type { Answered, StartOptions, StreamOptions } from '../../deps';
import type { RunRow } from '../../db/schema';
import { workerDeps, type Env, type WorkerDeps } from './deps';
import type { RunExecutorRpc, Written } from './run-host';

/**
 * Where runs execute on Workers (runtime/workers/run-host.ts): one of GATEWAY_RUN_EXECUTORS objects,
 * each executing the runs whose ids it is named by, one after another or together.
 *
 * The object starts executing at once, in the call that hands it the run, and sets an alarm for
 * now whose handler waits for the executions to end: an object is kept in memory while an event
 * (the alarm) is in progress, for up to 15 minutes of wall time, longer than a run lives
 * (GATEWAY_RUN_EXPIRES_AFTER_SECONDS, 10 minutes by default). A streamed run answers its event
 * stream from here, the call in progress while the stream is read; only when the reader goes away
 * before the run ends is the alarm set, and the run carries on, detached.
 *
 * At most once: an alarm that finds no execution in memory (the object was restarted mid-run)
 * does not execute the run again, which would call the provider a second time; the run's lease
 * runs out instead and the cron sweep fails it, as on Node (every run the object executed).
 */
export class RunExecutor extends DurableObject<Env> implements RunExecutorRpc {
  /**
   * Executions in this instance (they never reject): the runs it was handed that have not ended,
   * among them perhaps one run's two turns for a moment, when tool outputs continue it just as its
   * previous turn ends.
   */
  readonly #executions = new Set<Promise<void>>();

  /** A non-streamed run its caller put in progress: executing once this returns. */
  async start(run: RunRow, options: StartOptions): Promise<void> {
    const deps = await this.#take();
    this.#track(executeRun(deps, run, options), deps);
  }

  /**
   * A streamed run its caller put in progress: its event stream, `leading` first. While the stream
   * is read, the call is in progress and keeps the object in memory; the alarm is set only if the
   * stream ends before the run does (its reader left), so that a run read to its end, the usual
   * case, writes nothing to the object's storage: the alarm's write and the deleteAll that undoes
   * it were a sixth of workerd's CPU per streamed run (bench:worker under perf).
   */
  async stream(
    run: RunRow,
    options: Omit<StreamOptions, 'answered'>,
    written?: Written,
    answered?: Rpc.Stub<Answered>,
  ): Promise<ReadableStream<Uint8Array>> {
    const rowsWritten = rowsWrittenBy(written);
    // Kept past this call, which returns before the run settles: a stub received as a parameter
    // lapses when its call returns. Released once the run has ended.
    const kept = answered?.dup();
    const deps = await workerDeps(this.env);
    const { readable, done } = executeStreamed(deps, run, {
      ...options,
      rowsWritten,
      answered: kept && ((answer) => kept(answer)),
    });
    let ended = false;
    this.#track(
      done.finally(() => {
        ended = true;
        kept?.[Symbol.dispose]();
      }),
      deps,
    );
    // Handed over RPC through a native byte stream: when the reader goes away, the runtime errors
    // a native stream, and pipeTo passes that on to the event stream, which detaches. A stream
    // built in JavaScript (the event stream's own) would never learn of it, and the run would
    // stall once its queue filled (test/workers/runs-and-rate-limits.test.ts, the client that disconnects).
    const { readable: wire, writable } = new IdentityTransformStream();
    const keepAlive = () => (ended ? undefined : this.#keepAlive());
    // The reader left, or the stream ended before the run's last writes: the run carries on, detached.
    readable
      .pipeTo(writable)
      .then(keepAlive, keepAlive)
      .catch((error: unknown) => {
        deps.log.error('run executor could not set its alarm', { run_id: run.id, error });
      });
    return wire;
  }

  /**
   * A run its caller put in progress and waits for: answered once its turn has ended. `answered`
   * (StreamOptions') needs no dup: this call lasts as long as the run.
   */
  async execute(run: RunRow, options: StartOptions, written?: Written, answered?: Rpc.Stub<Answered>): Promise<void> {
    const rowsWritten = rowsWrittenBy(written);
    const deps = await this.#take();
    const execution = executeRun(deps, run, {
      ...options,
      rowsWritten,
      answered: answered && ((messages) => answered(messages)),
    });
    this.#track(execution, deps);
    await execution;
  }

  /** A cancel: stops the run if it executes here, in this object's own context. */
  async cancel(runId: string): Promise<void> {
    (await workerDeps(this.env)).executions.cancel(runId);
  }

  /**
   * Waits for the executions under way when it starts, not for those handed over meanwhile: the
   * object's runs may follow one another for longer than an alarm may last. Should some remain,
   * the next alarm waits for them.
   */
  override async alarm(): Promise<void> {
    if (!(await othersRemain(this.#executions))) {
      // Nothing is kept once the runs have ended: an object with empty storage costs nothing.
      await this.ctx.storage.deleteAll();
      // A run handed over meanwhile may have set its alarm just before the deleteAll removed it.
      if (this.#executions.size === 0) return;
    }
    await this.ctx.storage.setAlarm(Date.now());
  }

  /** The deps, and the alarm that keeps this object alive while the run executes. */
  async #take() {
    const deps = await workerDeps(this.env);
    await this.#keepAlive();
    return deps;
  }

  /**
   * The alarm, unless one is set already, whose handler will wait for this run too: set again
   * before it went off, it made workerd log that the alarm it ran was not the one stored.
   */
  async #keepAlive() {
    if ((await this.ctx.storage.getAlarm()) === null) await this.ctx.storage.setAlarm(Date.now());
  }

  /** Keeps `execution` until it ends; then what it recorded (its run's end, tokens, calls) goes to the metrics' aggregate. */
  #track(execution: Promise<void>, deps: WorkerDeps) {
    this.#executions.add(execution);
    void execution.finally(() => {
      this.#executions.delete(execution);
      deps.metrics.handOffSoon((promise) => this.ctx.waitUntil(promise));
    });
  }
}

/**
 * Waits for the executions in `executions` now; answers whether others, added meanwhile, remain
 * (RunExecutor's alarm).
 */
export async function othersRemain(executions: ReadonlySet<Promise<void>>): Promise<boolean> {
  await Promise.all(executions);
  return executions.size > 0;
}

/**
 * The commit of the run's rows as the engine awaits it (ExecuteOptions.rowsWritten): asked at once,
 * while the caller's stub of `written` is still valid (it lapses when the call that carried it
 * returns, which a stream's does before the commit ends), and failing when the rows were not written.
 */
function rowsWrittenBy(written: Written | undefined): Promise<void> | undefined {
  const rowsWritten = written?.().then((ok) => {
    if (!ok) throw new Error('the run was not written');
  });
  // Handled by the execution, which may be built after it settles (once the deps are).
  rowsWritten?.catch(() => undefined);
  return rowsWritten;
}
