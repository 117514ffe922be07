/**
 * Sharing one event loop between the work of many runs (reading their upstreams' answers,
 * recording their ends): the work takes it in slices, and once a slice's worth ran in one turn of
 * the event loop, the rest waits for a later turn, after pending I/O. Each run's work per chunk is
 * bounded, but many upstreams pouring in at once would otherwise all be served in the same turn,
 * and every other request (another tenant's, a health check) would wait for the sum.
 *
 *   if (slices.spent()) await slices.next();
 */
export interface Slices {
  /** Whether this turn's slice is spent (starting a slice if none is running). */
  spent(): boolean;
  /** Resolves when the current slice has ended (or the next one, if none is running). */
  next(): Promise<void>;
}

/** No slicing: for a runtime where each run has an event loop to itself (Workers' executors). */
export const UNSLICED: Slices = {
  spent: () => false,
  next: () => Promise.resolve(),
};

/** Slices of SLICE_MS over one event loop, for a process that executes many runs (Node). */
export class EventLoopSlices implements Slices {
  static readonly SLICE_MS = 8;
  #startedAt = -1;
  #ending = false;
  #waiting: (() => void)[] = [];

  spent(): boolean {
    const now = Date.now();
    if (this.#startedAt < 0) {
      this.#startedAt = now;
      this.#scheduleEnd();
      return false;
    }
    return now - this.#startedAt >= EventLoopSlices.SLICE_MS;
  }

  next(): Promise<void> {
    this.#scheduleEnd();
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  #scheduleEnd(): void {
    if (this.#ending) return;
    this.#ending = true;
    setTimeout(() => this.#end(), 0);
  }

  #end(): void {
    this.#ending = false;
    this.#startedAt = -1;
    const resumed = this.#waiting;
    this.#waiting = [];
    for (const resume of resumed) resume();
  }
}
