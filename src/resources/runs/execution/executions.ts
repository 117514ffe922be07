import type { Executions } from '../../../deps';

/** Why a run stopped early, carried as an abort reason. */
export class RunStopped extends Error {
  constructor(readonly outcome: 'cancelled' | 'expired') {
    super(`run ${outcome}`);
  }
}

/**
 * Deps.executions: a cancel that reaches the same app stops its run at once, with RunStopped as the
 * reason (others see it on their lease's renewal).
 */
export class RunExecutions implements Executions {
  readonly #running = new Map<string, AbortController>();

  add(runId: string, abort: AbortController): void {
    this.#running.set(runId, abort);
  }

  remove(runId: string, abort: AbortController): void {
    if (this.#running.get(runId) === abort) this.#running.delete(runId);
  }

  cancel(runId: string): void {
    this.#running.get(runId)?.abort(new RunStopped('cancelled'));
  }
}
