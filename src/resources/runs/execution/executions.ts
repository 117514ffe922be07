import type { Executions } from '../../../deps';

/** Why a run stopped early, carried as an abort reason. */
export class RunStopped extends Error {
  constructor(readonly outcome: 'cancelled' | 'expired') {
    super(`run ${outcome}`);
  }
}

/**
 * Deps.executions: a cancel that reaches the same app stops its run at once, with RunStopped as the
 * reason (others see it on their lease's renewal). A run may have more than one execution here for
 * a moment: two submissions of its tool outputs at once each start one beside their writes, and the
 * one whose write fails stops; a cancel stops both.
 */
export class RunExecutions implements Executions {
  readonly #running = new Map<string, Set<AbortController>>();

  add(runId: string, abort: AbortController): void {
    const running = this.#running.get(runId);
    if (running) running.add(abort);
    else this.#running.set(runId, new Set([abort]));
  }

  remove(runId: string, abort: AbortController): void {
    const running = this.#running.get(runId);
    if (running?.delete(abort) && running.size === 0) this.#running.delete(runId);
  }

  cancel(runId: string): void {
    for (const abort of this.#running.get(runId) ?? []) abort.abort(new RunStopped('cancelled'));
  }
}
