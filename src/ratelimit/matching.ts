import type { PolicyType, PolicyUnit } from '../db/schema';
import type { EnforcedPolicyRow } from './policy-reads';
import { ANY_VALUE } from './vocabulary';

/** An active policy as enforcement needs it. */
export interface ActivePolicy {
  id: string;
  name: string;
  type: PolicyType;
  unit: PolicyUnit;
  value: number;
  conditions: { key: string; value: string }[];
  groupBy: string[];
}

export function toActivePolicy(row: EnforcedPolicyRow): ActivePolicy {
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    unit: row.unit,
    value: row.value,
    conditions: row.conditions,
    groupBy: row.groupBy.map((group) => group.key),
  };
}

/** Whether every condition holds: the key is present, and its value is the condition's or `*`. */
export function matchesPolicy(policy: ActivePolicy, values: Map<string, string>): boolean {
  for (const condition of policy.conditions) {
    const value = values.get(condition.key);
    if (value === undefined) return false;
    if (condition.value !== ANY_VALUE && condition.value !== value) return false;
  }
  return true;
}

/**
 * A workspace's active policies, indexed so that a request looks at the few policies that can
 * match it instead of all of them. Each policy is filed once, under one of its conditions (its
 * anchor): a request can only match the policy if it has the anchor's key with the anchor's
 * value (or any value, for `*`), so the request looks up each of its own (key, value) pairs and
 * checks every condition of the policies filed there. The anchor is the policy's condition whose
 * exact value is rarest among the workspace's policies (`workspace_id` matches every request of
 * the workspace and makes a poor anchor, `model` a good one); a policy whose conditions are all
 * `*` is filed under its first key, among the policies that match any present value.
 *
 * The index changes in place (upsert, remove), so that a change to one policy costs that policy,
 * not the workspace. Adding is two halves that a large load spreads over many turns of the event
 * loop: count every policy's values first, then file each (PolicyCache); an anchor chosen then is
 * the rarest among all of them. Later changes choose among the counts as they stand; any anchor is
 * correct, the rarest only the cheapest.
 */
export class PolicyIndex {
  /** Where each policy is: its bucket, and the map holding the bucket (to drop it once empty). */
  readonly #filed = new Map<
    string,
    { policy: ActivePolicy; bucket: Map<string, ActivePolicy>; holder?: [Map<string, unknown>, string] }
  >();
  readonly #exact = new Map<string, Map<string, Map<string, ActivePolicy>>>();
  readonly #anyValue = new Map<string, Map<string, ActivePolicy>>();
  /** Policies without conditions (only direct SQL can write one): every request matches them. */
  readonly #unconditional = new Map<string, ActivePolicy>();
  /** How many counted policies name each exact (key, value). */
  readonly #frequency = new Map<string, Map<string, number>>();

  constructor(policies: ActivePolicy[] = []) {
    this.count(policies);
    this.file(policies);
  }

  get size(): number {
    return this.#filed.size;
  }

  /** Adds a policy, or replaces the one with its id. */
  upsert(policy: ActivePolicy): void {
    this.remove(policy.id);
    this.count([policy]);
    this.file([policy]);
  }

  /** Removes the policy with this id, if filed. */
  remove(id: string): void {
    const filed = this.#filed.get(id);
    if (!filed) return;
    this.#filed.delete(id);
    filed.bucket.delete(id);
    if (filed.bucket.size === 0 && filed.holder) filed.holder[0].delete(filed.holder[1]);
    this.#tally(filed.policy, -1);
  }

  /** The first half of adding policies: counts their exact values. Each must then be filed once. */
  count(policies: ActivePolicy[]): void {
    for (const policy of policies) this.#tally(policy, 1);
  }

  /** The second half: files counted policies under their rarest exact condition. */
  file(policies: ActivePolicy[]): void {
    for (const policy of policies) {
      let anchor: { key: string; value: string } | undefined;
      let rarest = Infinity;
      for (const condition of policy.conditions) {
        if (condition.value === ANY_VALUE) continue;
        const count = this.#frequency.get(condition.key)?.get(condition.value) ?? 0;
        if (count < rarest) {
          anchor = condition;
          rarest = count;
        }
      }
      let holder: [Map<string, Map<string, ActivePolicy>>, string] | undefined;
      if (anchor) {
        let byValue = this.#exact.get(anchor.key);
        if (!byValue) this.#exact.set(anchor.key, (byValue = new Map()));
        holder = [byValue, anchor.value];
      } else {
        const [first] = policy.conditions;
        if (first) holder = [this.#anyValue, first.key];
      }
      let bucket = this.#unconditional;
      if (holder) {
        bucket = holder[0].get(holder[1]) ?? new Map();
        holder[0].set(holder[1], bucket);
      }
      bucket.set(policy.id, policy);
      this.#filed.set(policy.id, { policy, bucket, holder });
    }
  }

  /** The policies whose every condition the request's attribute values satisfy. */
  match(values: Map<string, string>): ActivePolicy[] {
    const matched: ActivePolicy[] = [];
    const consider = (candidates: Map<string, ActivePolicy> | undefined) => {
      if (!candidates) return;
      for (const policy of candidates.values()) if (matchesPolicy(policy, values)) matched.push(policy);
    };
    for (const [key, value] of values) {
      consider(this.#exact.get(key)?.get(value));
      consider(this.#anyValue.get(key));
    }
    consider(this.#unconditional);
    return matched;
  }

  #tally(policy: ActivePolicy, delta: 1 | -1): void {
    for (const { key, value } of policy.conditions) {
      if (value === ANY_VALUE) continue;
      let byValue = this.#frequency.get(key);
      if (!byValue) this.#frequency.set(key, (byValue = new Map()));
      const count = (byValue.get(value) ?? 0) + delta;
      if (count > 0) byValue.set(value, count);
      else byValue.delete(value);
    }
  }
}
