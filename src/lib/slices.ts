/**
 * Sharing one event loop between the work of many runs (reading their upstreams' answers,
 * recording their ends): the work takes it in slices, and once a slice's worth ran in one turn of
 * the event loop, the rest waits for a later turn, after pending I/O (on Node 20 not always: see
 * the known limit in runtime/node/slices.ts). Each run's work per chunk is
 * bounded, but many upstreams pouring in at once would otherwise all be served in the same turn,
 * and every other request (another tenant's, a health check) would wait for the sum.
 *
 * Before each piece of work, in the function that does it:
 *
 *   while (slices.spent()) await slices.next();
 *
 * `while`, not `if`, and not inside a helper of its own: the waiters a slice's end resumes all run
 * in the same turn, one after another, and only a look taken right before a piece of work sees
 * what the pieces before it used. With `if` each of them ran a piece whatever was left of the
 * slice; behind a helper's `await`, each looked before any of them had worked. Eight runs at once
 * then held the event loop for three slices' worth and more, not one.
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

/**
 * How a slice ends, in a later turn of the event loop: `soon` for a slice nothing waits on yet (it
 * answers how to cancel that end), `afterIo` once work waits on it, after the I/O pending
 * meanwhile has been read (runtime/node/slices.ts says why two).
 */
export interface SliceEnds {
  soon(end: () => void): () => void;
  afterIo(end: () => void): void;
}

/** Slices of SLICE_MS over one event loop, for a process that executes many runs (Node). */
export class EventLoopSlices implements Slices {
  static readonly SLICE_MS = 8;
  readonly #now: () => number;
  readonly #ends: SliceEnds;
  #startedAt = -1;
  /** The end scheduled, if any: `soon` (how to cancel it) until work waits, then `afterIo`. */
  #ending: { cancelSoon: () => void } | 'afterIo' | null = null;
  #waiting: (() => void)[] = [];

  /** `now` is the clock (Date.now unless a test gives its own). */
  constructor(options: { ends: SliceEnds; now?: () => number }) {
    this.#ends = options.ends;
    this.#now = options.now ?? Date.now;
  }

  spent(): boolean {
    const now = this.#now();
    if (this.#startedAt < 0) {
      this.#startedAt = now;
      this.#ending ??= { cancelSoon: this.#ends.soon(() => this.#end()) };
      return false;
    }
    return now - this.#startedAt >= EventLoopSlices.SLICE_MS;
  }

  next(): Promise<void> {
    if (this.#ending !== 'afterIo') {
      this.#ending?.cancelSoon();
      this.#ending = 'afterIo';
      this.#ends.afterIo(() => this.#end());
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  #end(): void {
    if (this.#ending !== 'afterIo') this.#ending?.cancelSoon();
    this.#ending = null;
    this.#startedAt = -1;
    const resumed = this.#waiting;
    this.#waiting = [];
    for (const resume of resumed) resume();
  }
}
