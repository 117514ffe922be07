import type { PolicyType, PolicyUnit } from '../db/schema';
import type { EnforcedPolicyRow } from '../services/policies';
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
 */
export class PolicyIndex {
  readonly size: number;
  readonly #exact = new Map<string, Map<string, ActivePolicy[]>>();
  readonly #anyValue = new Map<string, ActivePolicy[]>();
  /** Policies without conditions (only direct SQL can write one): every request matches them. */
  readonly #unconditional: ActivePolicy[] = [];

  constructor(policies: ActivePolicy[]) {
    this.size = policies.length;
    // First how many policies name each exact (key, value); then each policy's rarest one.
    const frequency = new Map<string, Map<string, number>>();
    for (const policy of policies) {
      for (const { key, value } of policy.conditions) {
        if (value === ANY_VALUE) continue;
        let byValue = frequency.get(key);
        if (!byValue) frequency.set(key, (byValue = new Map()));
        byValue.set(value, (byValue.get(value) ?? 0) + 1);
      }
    }
    for (const policy of policies) {
      let anchor: { key: string; value: string } | undefined;
      let rarest = Infinity;
      for (const condition of policy.conditions) {
        if (condition.value === ANY_VALUE) continue;
        const count = frequency.get(condition.key)!.get(condition.value)!;
        if (count < rarest) {
          anchor = condition;
          rarest = count;
        }
      }
      if (anchor) {
        let byValue = this.#exact.get(anchor.key);
        if (!byValue) this.#exact.set(anchor.key, (byValue = new Map()));
        push(byValue, anchor.value, policy);
      } else if (policy.conditions.length > 0) {
        push(this.#anyValue, policy.conditions[0]!.key, policy);
      } else {
        this.#unconditional.push(policy);
      }
    }
  }

  /** The policies whose every condition the request's attribute values satisfy. */
  match(values: Map<string, string>): ActivePolicy[] {
    const matched: ActivePolicy[] = [];
    const consider = (candidates: ActivePolicy[] | undefined) => {
      if (!candidates) return;
      for (const policy of candidates) if (matchesPolicy(policy, values)) matched.push(policy);
    };
    for (const [key, value] of values) {
      consider(this.#exact.get(key)?.get(value));
      consider(this.#anyValue.get(key));
    }
    consider(this.#unconditional);
    return matched;
  }
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V) {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
