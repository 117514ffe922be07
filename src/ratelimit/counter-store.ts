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

/**
 * A request a policy refused, as kept for GET /v1/policies/rate-limits/{id}/counters: who asked
 * (the API key's id and the virtual key's slug, never a secret), in which group, and for what.
 */
export interface Refusal {
  /** When (ms since the epoch). */
  at: number;
  /** The counter's group (enforce.ts's counterOf). */
  group: string;
  apiKeyId: string;
  virtualKey: string;
  /** What the request would have added: 1, or the tokens its turn would have reserved. */
  requested: number;
  /** The counter when it was refused. */
  used: number;
  limit: number;
}

/** The refusals kept per policy, newest first: the last this many. */
export const MAX_REFUSALS = 20;

/** One group's counter in a window. */
export interface GroupUsage {
  group: string;
  used: number;
}

/** A policy's counters in one window, most used first, and its recent refusals, newest first. */
export interface PolicyCounters {
  groups: GroupUsage[];
  /** How many groups have a counter in the window (`groups` holds the first `limit`). */
  totalGroups: number;
  refusals: Refusal[];
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
  /**
   * Keeps `refusal` among `policyId`'s last MAX_REFUSALS. Bookkeeping for people reading the
   * counters: a store may lose it (a crash before its write), never fail an admission for it.
   */
  noteRefusal(scope: string, policyId: string, refusal: Refusal): Promise<void>;
  /**
   * The counters whose keys begin with `prefix` (one policy's window: enforce.ts's counterPrefix),
   * the `limit` most used, and `policyId`'s recent refusals.
   */
  policyCounters(scope: string, policyId: string, prefix: string, limit: number): Promise<PolicyCounters>;
  /** Writes what the store holds in memory for a later write (the libSQL store's refusals), at a clean stop. */
  flush(): Promise<void>;
}
