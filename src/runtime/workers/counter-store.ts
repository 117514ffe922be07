import { DurableObject } from 'cloudflare:workers';
import type { Logger } from '../../logger';
import {
  hasRoom,
  type AdmitResult,
  type CounterAdjustment,
  type CounterAdmission,
  type CounterStore,
  MAX_REFUSALS,
  type PolicyCounters,
  type Refusal,
} from '../../ratelimit/counter-store';

/**
 * Rate-limit counters in Durable Objects (the default on Workers; GATEWAY_RATE_LIMIT_STORE): one
 * object per counter key, i.e. per (policy, unit, window, group), found by name from anywhere.
 *
 * Exactness. An object exists once worldwide and runs one event at a time; its check-and-add is
 * synchronous code over synchronous storage, so no other admission or charge can come between the
 * check and the add. A counter therefore never admits past its limit, whatever the concurrency.
 *
 * All or nothing over several counters, in effect. A request that matches several policies
 * reserves its cost in each object in turn (a requests policy's unit, a tokens policy's
 * reservation), in one fixed order (the read-only checks of counters that cost nothing first, then
 * the keys in code-unit order). When one refuses, the reservations already
 * made are released before the 429 is answered, so a refused request consumes nothing.
 * The fixed order matters: two requests competing for the last unit of the same counters meet at
 * the first one, where one of them wins and goes on; in different orders each could take one
 * counter and both be refused.
 *
 * The one imprecision: between a reservation and its release (a round trip or two), a concurrent
 * request on that counter sees the reserved unit (or tokens). If that was the last room, it is
 * refused although a strictly serial order would have admitted it. The error is only ever a
 * refusal, never an admission too many, and needs a request matching two or more policies with a
 * cost that is itself refused by a later one. A request that matches one such policy is decided
 * by one object: exact both ways. (The libSQL store decides everything in one statement and has no
 * such window.) A release that fails (the Worker stopped between the two calls) leaves the cost
 * counted until the window ends: the same direction, refusing rather than admitting.
 *
 * Each object deletes itself (its storage) with an alarm a minute after its window ends; the
 * minute covers clocks that disagree slightly about when the window ended.
 *
 * What GET …/counters reads is kept by objects of the same class under other names, off the path of
 * an admitted request: a window's index (named by the keys' common prefix, `<policy>/<unit>/<start>/`)
 * lists its first MAX_INDEXED_GROUPS groups, told of each by the request that first puts a cost in
 * its counter (one more call per group and window), and deleted with the window; a policy's ledger
 * (`<policy>/refusals`) keeps its last MAX_REFUSALS refusals, told by each refused request, and
 * deletes itself a day after the last.
 */

/** How long after its window a counter is kept. */
const EXPIRY_GRACE_MS = 60_000;
/** The groups a window's index lists, each read from its own counter when the counters are asked for. */
export const MAX_INDEXED_GROUPS = 100;
/** How long a policy's refusals are kept after the last. */
const REFUSALS_KEPT_MS = 86_400_000;

/** One counter: what `used` is, and when its storage goes. */
export class RateLimitCounter extends DurableObject {
  /** Adds `cost` if the counter has room (hasRoom); answers the decision and the usage after it. */
  admit(cost: number, limit: number, windowEnd: number, mustFit: boolean): { admitted: boolean; used: number } {
    const used = this.#used();
    if (!hasRoom(used, cost, limit, mustFit)) return { admitted: false, used };
    if (cost > 0) this.#add(cost, windowEnd);
    return { admitted: true, used: used + cost };
  }

  /** Takes back a reservation of a request refused elsewhere; answers the usage after it. */
  release(cost: number): number {
    const kv = this.ctx.storage.kv;
    const stored = kv.get<number>('used');
    // Nothing stored: the window ended and the counter was deleted with everything it held.
    if (stored === undefined) return 0;
    const used = Math.max(0, stored - cost);
    kv.put('used', used);
    return used;
  }

  /**
   * Adds a turn's tokens (delta > 0) or takes back its reservation (delta < 0), never below 0. A
   * release finds nothing to lower when the window ended and the counter was deleted.
   */
  adjust(delta: number, windowEnd: number): number {
    if (delta > 0) {
      this.#add(delta, windowEnd);
      return this.#used();
    }
    const stored = this.ctx.storage.kv.get<number>('used');
    if (stored === undefined) return 0;
    const used = Math.max(0, stored + delta);
    this.ctx.storage.kv.put('used', used);
    return used;
  }

  read(): number {
    return this.#used();
  }

  /** A window's index: `group` has a counter in it. */
  noteGroup(group: string, windowEnd: number): void {
    const kv = this.ctx.storage.kv;
    const groups = kv.get<string[]>('groups') ?? [];
    if (groups.length >= MAX_INDEXED_GROUPS || groups.includes(group)) return;
    groups.push(group);
    kv.put('groups', groups);
    this.#expireAfter(windowEnd);
  }

  groups(): string[] {
    return this.ctx.storage.kv.get<string[]>('groups') ?? [];
  }

  /** A policy's ledger: one more refusal, the oldest beyond MAX_REFUSALS forgotten. */
  noteRefusal(refusal: Refusal): void {
    const kv = this.ctx.storage.kv;
    kv.put('refusals', [refusal, ...this.refusals()].slice(0, MAX_REFUSALS));
    void this.ctx.storage.setAlarm(refusal.at + REFUSALS_KEPT_MS);
  }

  /** Newest first. */
  refusals(): Refusal[] {
    return this.ctx.storage.kv.get<Refusal[]>('refusals') ?? [];
  }

  override async alarm(): Promise<void> {
    await this.ctx.storage.deleteAll();
  }

  #used(): number {
    return this.ctx.storage.kv.get<number>('used') ?? 0;
  }

  #add(amount: number, windowEnd: number): void {
    this.ctx.storage.kv.put('used', this.#used() + amount);
    this.#expireAfter(windowEnd);
  }

  #expireAfter(windowEnd: number): void {
    const kv = this.ctx.storage.kv;
    if (kv.get('expires_at') === undefined) {
      const expiresAt = windowEnd + EXPIRY_GRACE_MS;
      kv.put('expires_at', expiresAt);
      // Not awaited: the output gate holds the reply until this is stored too.
      void this.ctx.storage.setAlarm(expiresAt);
    }
  }
}

export class DurableObjectCounterStore implements CounterStore {
  readonly #namespace: DurableObjectNamespace<RateLimitCounter>;
  readonly #log: Logger;

  constructor(namespace: DurableObjectNamespace<RateLimitCounter>, options: { log: Logger }) {
    this.#namespace = namespace;
    this.#log = options.log;
  }

  async admit(_scope: string, counters: CounterAdmission[], _now: number): Promise<AdmitResult> {
    const used = new Map<string, number>();
    const readOnly = counters.filter((counter) => counter.cost === 0);
    const costly = counters
      .filter((counter) => counter.cost > 0)
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));

    // Counters that cost nothing only refuse: checked together, first.
    if (readOnly.length > 0) {
      const checks = await Promise.all(
        readOnly.map(async (c) => ({
          key: c.key,
          check: await this.#counter(c.key).admit(0, c.limit, c.windowEnd, c.mustFit),
        })),
      );
      for (const { key, check } of checks) used.set(key, check.used);
      if (checks.some(({ check }) => !check.admitted)) {
        await this.#readInto(used, costly);
        return { admitted: false, used };
      }
    }

    const reserved: CounterAdmission[] = [];
    for (const [i, counter] of costly.entries()) {
      const result = await this.#counter(counter.key).admit(
        counter.cost,
        counter.limit,
        counter.windowEnd,
        counter.mustFit,
      );
      used.set(counter.key, result.used);
      if (result.admitted) {
        reserved.push(counter);
        if (result.used === counter.cost) await this.#index(counter);
        continue;
      }
      await Promise.all([this.#release(used, reserved), this.#readInto(used, costly.slice(i + 1))]);
      return { admitted: false, used };
    }
    return { admitted: true, used };
  }

  /**
   * Each counter is its own object, so a release and a charge in different windows are two calls:
   * the charge goes first, so that between them a concurrent admission sees more used, not less.
   */
  async adjust(_scope: string, adjustments: CounterAdjustment[]): Promise<void> {
    const changes = adjustments.filter((a) => a.delta !== 0 && Number.isFinite(a.delta));
    const apply = (list: CounterAdjustment[]) =>
      Promise.all(
        list.map(async (a) => {
          const used = await this.#counter(a.key).adjust(a.delta, a.windowEnd);
          if (a.delta > 0 && used === a.delta) await this.#index(a);
        }),
      );
    await apply(changes.filter((a) => a.delta > 0));
    await apply(changes.filter((a) => a.delta < 0));
  }

  /** Usage by key; 0 for a counter never used. */
  async read(keys: string[]): Promise<Map<string, number>> {
    return new Map(await Promise.all(keys.map(async (key) => [key, await this.#counter(key).read()] as const)));
  }

  async noteRefusal(_scope: string, policyId: string, refusal: Refusal): Promise<void> {
    await this.#counter(`${policyId}/refusals`).noteRefusal(refusal);
  }

  /** The window's indexed groups, each counter read (MAX_INDEXED_GROUPS at most), most used first. */
  async policyCounters(_scope: string, policyId: string, prefix: string, limit: number): Promise<PolicyCounters> {
    const [names, refusals] = await Promise.all([
      this.#counter(prefix).groups(),
      this.#counter(`${policyId}/refusals`).refusals(),
    ]);
    const used = await this.read(names.map((group) => prefix + group));
    const groups = names
      .map((group) => ({ group, used: used.get(prefix + group) ?? 0 }))
      .sort((a, b) => b.used - a.used || (a.group < b.group ? -1 : 1));
    return { groups: groups.slice(0, limit), totalGroups: groups.length, refusals };
  }

  /** Nothing to write: each refusal went to its policy's object as it came. */
  flush(): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Tells a counter's window index of its group: when the counter was first given a cost. A
   * failure is logged, not thrown: the index only serves people reading the counters.
   */
  async #index(counter: { key: string; windowEnd: number }): Promise<void> {
    // The key is `<policy>/<unit>/<window start>/<group>` (enforce.ts); the group may hold '/'.
    const parts = counter.key.split('/');
    const prefix = `${parts.slice(0, 3).join('/')}/`;
    try {
      await this.#counter(prefix).noteGroup(counter.key.slice(prefix.length), counter.windowEnd);
    } catch (error) {
      this.#log.warn('rate-limit counter could not be indexed', { policy_id: parts[0], error });
    }
  }

  /**
   * Takes back a refused request's reservations. A failed release is logged, not thrown: the
   * request is refused either way, and the unit stays counted until its window ends.
   */
  async #release(used: Map<string, number>, reserved: CounterAdmission[]): Promise<void> {
    await Promise.all(
      reserved.map(async (counter) => {
        try {
          used.set(counter.key, await this.#counter(counter.key).release(counter.cost));
        } catch (error) {
          // The policy id, not the key: the group part holds request metadata.
          this.#log.error('rate-limit reservation could not be released', {
            policy_id: counter.key.split('/')[0],
            error,
          });
        }
      }),
    );
  }

  /** The usage of counters the decision did not reach, for the 429's report. */
  async #readInto(used: Map<string, number>, counters: CounterAdmission[]): Promise<void> {
    for (const [key, value] of await this.read(counters.map((counter) => counter.key))) used.set(key, value);
  }

  #counter(key: string) {
    return this.#namespace.get(this.#namespace.idFromName(key));
  }
}
