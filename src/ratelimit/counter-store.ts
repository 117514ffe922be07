/**
 * Where rate-limit counters live. A counter is one policy's usage by one group in one fixed window,
 * named by a string key: `<policy id>/<unit>/<window start>/<group>` (enforce.ts). Two stores
 * implement it (GATEWAY_RATE_LIMIT_STORE chooses on Workers): libsql-counter-store.ts, in the
 * database (Node's, and an option on Workers), and runtime/workers/counter-store.ts, one Durable Object
 * per counter (the default on Workers).
 */

/** One counter of an admission. */
export interface CounterAdmission {
  key: string;
  /** When the counter's window ends (ms since the epoch): after that it may be pruned. */
  windowEnd: number;
  /**
   * What the request adds: 1 for a requests policy; for a tokens policy the tokens the run
   * reserves (released when its turn ends, see enforce.ts).
   */
  cost: number;
  /** The policy's value. */
  limit: number;
  /**
   * Whether the cost must fit under the limit (requests: used + 1 ≤ value), or only the counter
   * be below it (tokens: a reservation may take the counter past the value; the next is refused).
   */
  mustFit: boolean;
}

/** The one rule of room: the counter is below its limit, and the cost still fits under it when it must. */
export function hasRoom(used: number, cost: number, limit: number, mustFit: boolean): boolean {
  return used < limit && (!mustFit || used + cost <= limit);
}

/** A change to one counter: `delta` tokens added (charged) or taken back (released). */
export interface CounterAdjustment {
  key: string;
  windowEnd: number;
  delta: number;
}

export interface AdmitResult {
  /** True when every counter had room and each now holds its cost; false when nothing changed. */
  admitted: boolean;
  /**
   * Usage by key after the decision (a counter never used reads 0). When refused, read just after
   * the decision: usage within a window only grows, so a counter that had no room still has none.
   */
  used: Map<string, number>;
}

export interface CounterStore {
  /**
   * All or nothing: when every counter has room, adds each one's cost, atomically with respect to
   * every other admission and charge on the same counters, in any process.
   * @param scope the workspace all the counters belong to.
   * @param now the decision's time: a store may prune counters whose window ended by then.
   */
  admit(scope: string, counters: CounterAdmission[], now: number): Promise<AdmitResult>;
  /**
   * Adds each delta to its counter, never taking one below 0, atomically with respect to
   * admissions. A positive delta creates a missing counter; a negative one leaves it missing (its
   * window ended and was pruned, or never counted).
   */
  adjust(scope: string, adjustments: CounterAdjustment[]): Promise<void>;
}
