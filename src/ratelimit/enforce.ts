import type { PolicyUnit } from '../db/schema';
import type { Deps } from '../deps';
import { ApiError } from '../errors';
import { sha256Hex } from '../lib/crypto';
import { attributeValues, type RequestAttributes } from './attributes';
import { hasRoom, type CounterAdmission } from './counter-store';
import { goDuration, rateLimitHeaders, tightest, type PolicyUsage } from './headers';
import type { ActivePolicy } from './matching';
import { secondsUntil, UNIT_NAMES, windowOf } from './windows';

/**
 * Enforcement at the two points of a run's life: admission, before anything of the run is
 * written, and token charging, when the run reaches a terminal state.
 */

export interface Admission {
  /**
   * Rate-limit headers for the admitted response: for the tightest matching requests policy and
   * the tightest matching tokens policy (see headers.ts). `{}` when no policy matches.
   */
  headers: Record<string, string>;
  /** What the run's tokens are charged to when it ends (stored on the run); null without tokens policies. */
  ticket: TokenTicket | null;
}

/**
 * The tokens policies an admitted request matched, with the request's group in each: enough to
 * find the counter of whichever window the run ends in. JSON, stored on the run.
 */
export interface TokenTicket {
  workspace_id: string;
  policies: { policy_id: string; unit: PolicyUnit; group: string }[];
}

/**
 * Admits a request under every active policy of its workspace that matches it, or refuses it
 * with 429 rate_limit_exceeded. All or nothing: an admitted request costs 1 in each matching
 * requests policy's counter; a refused one costs nothing anywhere. Tokens policies refuse while
 * their counter has reached the value; they are charged later, by chargeTokens.
 */
export async function admitRequest(deps: Deps, attributes: RequestAttributes): Promise<Admission> {
  const index = await deps.policyCache.get(attributes.workspace_id);
  if (index.size === 0) return { headers: {}, ticket: null };
  const values = attributeValues(attributes);
  const matched = index.match(values);
  if (matched.length === 0) return { headers: {}, ticket: null };

  const now = deps.now();
  const counters = await Promise.all(matched.map((policy) => counterOf(policy, values, now)));
  const { admitted, used } = await deps.counters.admit(attributes.workspace_id, counters, now);
  const usages: PolicyUsage[] = counters.map((counter) => ({
    policy: counter.policy,
    used: used.get(counter.key) ?? 0,
    windowEnd: counter.windowEnd,
  }));
  if (!admitted) throw refusal(usages, now);

  const byType = (type: ActivePolicy['type']) => tightest(usages.filter((usage) => usage.policy.type === type));
  const shown = [byType('requests'), byType('tokens')].filter((usage) => usage !== undefined);
  const tokens = counters.filter((counter) => counter.policy.type === 'tokens');
  return {
    headers: rateLimitHeaders(shown, now),
    ticket:
      tokens.length === 0
        ? null
        : {
            workspace_id: attributes.workspace_id,
            policies: tokens.map(({ policy, group }) => ({ policy_id: policy.id, unit: policy.unit, group })),
          },
  };
}

/**
 * Adds a finished run's total tokens to its groups' counters of the tokens policies in its ticket,
 * in the window in which the run ends: when its tokens are known, and where they still weigh on
 * the next admissions (a run admitted just before a boundary would otherwise charge a window that
 * no longer decides anything). A failure is logged, never thrown: it must not fail a finished run.
 */
export async function chargeTokens(deps: Deps, ticket: TokenTicket | null, totalTokens: number): Promise<void> {
  if (!ticket || !(totalTokens > 0)) return;
  try {
    const now = deps.now();
    const counters = ticket.policies.map(({ policy_id, unit, group }) => {
      const window = windowOf(unit, now);
      return { key: counterKey(policy_id, unit, window.start, group), windowEnd: window.end };
    });
    await deps.counters.charge(ticket.workspace_id, counters, totalTokens);
  } catch (error) {
    deps.log.error('rate-limit token charge failed', { error, workspace_id: ticket.workspace_id, tokens: totalTokens });
  }
}

/** Group values longer than this are hashed in counter keys, which stay short whatever the metadata. */
const GROUP_TEXT_MAX = 128;

/**
 * A policy's counter for the request in the window holding `now`. The group lists each group_by
 * key with the request's value, or null when absent: an absent value is a group of its own, apart
 * from every present value (the empty string included).
 */
async function counterOf(policy: ActivePolicy, values: Map<string, string>, now: number) {
  const window = windowOf(policy.unit, now);
  const groupText = JSON.stringify(policy.groupBy.map((key) => [key, values.get(key) ?? null]));
  const group = groupText.length <= GROUP_TEXT_MAX ? groupText : `sha256:${await sha256Hex(groupText)}`;
  return {
    policy,
    group,
    key: counterKey(policy.id, policy.unit, window.start, group),
    windowEnd: window.end,
    cost: costOf(policy),
    limit: policy.value,
  } satisfies CounterAdmission & { policy: ActivePolicy; group: string };
}

/** The unit is part of the key, so a policy whose unit changes starts new counters. */
const counterKey = (policyId: string, unit: PolicyUnit, windowStart: number, group: string) =>
  `${policyId}/${unit}/${windowStart}/${group}`;

const costOf = (policy: ActivePolicy) => (policy.type === 'requests' ? 1 : 0);

/**
 * The 429 for a refused request. When several policies lack room, it reports the one whose window
 * ends last: the wait after which a retry can succeed (then a requests policy before a tokens one,
 * then by id).
 */
function refusal(usages: PolicyUsage[], now: number): ApiError {
  const full = usages.filter((usage) => !hasRoom(usage.used, costOf(usage.policy), usage.policy.value));
  // Only a prune of an ended window between the decision and the read can leave `full` empty.
  const reported = (full.length > 0 ? full : usages).sort(
    (a, b) =>
      b.windowEnd - a.windowEnd ||
      Number(b.policy.type === 'requests') - Number(a.policy.type === 'requests') ||
      (a.policy.id < b.policy.id ? -1 : 1),
  )[0]!;
  const { policy } = reported;
  const named = policy.name ? `'${policy.name}' (${policy.id})` : policy.id;
  const requested = policy.type === 'requests' ? ', Requested 1' : '';
  const message =
    `Rate limit reached for policy ${named} on ${policy.type} per ${UNIT_NAMES[policy.unit]}: ` +
    `Limit ${policy.value}, Used ${reported.used}${requested}. ` +
    `The window resets at ${new Date(reported.windowEnd).toISOString()}; please try again in ${goDuration(reported.windowEnd - now)}.`;
  return new ApiError('rate_limit_exceeded', message, {
    type: policy.type,
    headers: { 'retry-after': String(secondsUntil(reported.windowEnd, now)), ...rateLimitHeaders([reported], now) },
  });
}
