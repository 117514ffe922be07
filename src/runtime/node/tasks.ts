/**
 * Work that outlives the request that started it (a non-streamed run, a stream whose client left),
 * kept track of so that a graceful shutdown can wait for it: what `waitUntil` does on Node
 * (runtime/node/app.ts), where Workers have the platform's.
 */
export class TaskTracker {
  readonly #pending = new Set<Promise<unknown>>();

  track(task: Promise<unknown>): void {
    const settled = task.then(
      () => undefined,
      () => undefined,
    );
    this.#pending.add(settled);
    void settled.finally(() => this.#pending.delete(settled));
  }

  get size(): number {
    return this.#pending.size;
  }

  /** Resolves when every tracked task has settled, or after `timeoutMs`; true if all settled. */
  async drain(timeoutMs: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    const all = (async () => {
      while (this.#pending.size > 0) await Promise.all(this.#pending);
      return true as const;
    })();
    try {
      return await Promise.race([all, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
