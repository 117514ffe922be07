/** Why a run stopped early, carried as an abort reason. */
export class RunStopped extends Error {
  constructor(readonly outcome: 'cancelled' | 'expired') {
    super(`run ${outcome}`);
  }
}

/**
 * The runs an app executes where it runs (a Node process, a Workers isolate), each with what stops
 * it: a cancel that reaches the same app stops its run at once (others see it on their lease's
 * renewal). One per app (Deps.executions), so that apps side by side in one process, as tests
 * build them, never stop each other's runs.
 */
export class Executions {
  readonly #running = new Map<string, AbortController>();

  add(runId: string, abort: AbortController): void {
    this.#running.set(runId, abort);
  }

  /** Forgets the execution that `abort` stops: not a later turn of the run that has already begun. */
  remove(runId: string, abort: AbortController): void {
    if (this.#running.get(runId) === abort) this.#running.delete(runId);
  }

  /** Stops the run if it executes here. */
  cancel(runId: string): void {
    this.#running.get(runId)?.abort(new RunStopped('cancelled'));
  }
}
