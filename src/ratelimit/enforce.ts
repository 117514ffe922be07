import type { PolicyUnit, TokenTicket } from '../db/schema';
import { ApiError } from '../errors';
import { sha256Hex } from '../lib/crypto';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics/gateway';
import { attributeValues, type RequestAttributes } from './attributes';
import {
  hasRoom,
  type CounterAdjustment,
  type CounterAdmission,
  type CounterStore,
  type PolicyCounters,
} from './counter-store';
import { goDuration, rateLimitHeaders, tightest, type PolicyUsage } from './headers';
import type { ActivePolicy } from './matching';
import type { PolicyCache } from './policy-cache';
import { secondsUntil, UNIT_NAMES, windowOf } from './windows';

/**
 * Enforcement at the two points of each turn of a run: admission, before anything of the turn is
 * written (creating the run, submitting tool outputs), and settling its tokens when the turn ends
 * (in requires_action or a terminal state).
 */

/** What enforcement takes of the gateway's Deps. */
export interface RateLimitDeps {
  policyCache: PolicyCache;
  counters: CounterStore;
  now: () => number;
  log: Logger;
  /** Where each policy's decision is counted (gateway_rate_limit_decisions_total). */
  metrics: Metrics;
}

export interface Admission {
  /**
   * Rate-limit headers for the admitted response: for the tightest matching requests policy and
   * the tightest matching tokens policy (see headers.ts). `{}` when no policy matches.
   */
  headers: Record<string, string>;
  /**
   * The turn's tokens policies and its reservation in them (stored on the run), settled when the
   * turn ends (settleTokens); null without tokens policies.
   */
  ticket: TokenTicket | null;
  /** The unit each requests counter took (giveBack returns it); none without requests policies. */
  counted?: CounterAdjustment[];
}

/** What the turn being admitted brings to its tokens policies. */
export interface TurnTokens {
  /** Tokens the turn reserves in each matching tokens policy until it ends (see reservation.ts). */
  reservation: number;
  /** The run's total tokens before this turn (0 for a new run): the turn is charged the rest. */
  baseTokens: number;
}

/**
 * Admits a request under every active policy of its workspace that matches it, or refuses it
 * with 429 rate_limit_exceeded. All or nothing: an admitted request costs 1 in each matching
 * requests policy's counter and reserves `turn.reservation` in each matching tokens policy's; a
 * refused one costs nothing anywhere. A requests counter admits while the unit fits under the
 * value; a tokens counter while it is below the value (a reservation may take it past: the next
 * request is refused). The reservation is released, and the real tokens charged, by settleTokens.
 * `settingsGeneration`, the request's (db/settings-cache.ts), spares the policy version read while it holds.
 */
export async function admitRequest(
  deps: Pick<RateLimitDeps, 'policyCache' | 'now' | 'counters' | 'metrics' | 'log'>,
  attributes: RequestAttributes,
  turn: TurnTokens,
  settingsGeneration: number | null = null,
): Promise<Admission> {
  const index = await deps.policyCache.get(attributes.workspace_id, settingsGeneration);
  if (index.size === 0) return { headers: {}, ticket: null };
  const values = attributeValues(attributes);
  const matched = index.match(values);
  if (matched.length === 0) return { headers: {}, ticket: null };

  const now = deps.now();
  const reservation = Math.max(0, Math.ceil(turn.reservation));
  const counters = await Promise.all(matched.map((policy) => counterOf(policy, values, now, reservation)));
  const { admitted, used } = await deps.counters.admit(attributes.workspace_id, counters, now);
  const usages: CounterUsage[] = counters.map((counter) => ({
    cost: counter.cost,
    group: counter.group,
    policy: counter.policy,
    used: used.get(counter.key) ?? 0,
    windowEnd: counter.windowEnd,
  }));
  if (!admitted) {
    // The policies without room refused it; the others would have admitted it, and count nothing.
    const refusing = refusingPolicies(usages);
    for (const usage of refusing) deps.metrics.rateLimit(usage.policy.id, 'refused');
    await noteRefusals(deps, attributes, refusing, now);
    throw refusal(refusing, now);
  }
  for (const counter of counters) deps.metrics.rateLimit(counter.policy.id, 'allowed');

  const byType = (type: ActivePolicy['type']) => tightest(usages.filter((usage) => usage.policy.type === type));
  const shown = [byType('requests'), byType('tokens')].filter((usage) => usage !== undefined);
  const tokens = counters.filter((counter) => counter.policy.type === 'tokens');
  return {
    counted: counters
      .filter((counter) => counter.policy.type === 'requests')
      .map(({ key, windowEnd }) => ({ key, windowEnd, delta: -1 })),
    headers: rateLimitHeaders(shown, now),
    ticket:
      tokens.length === 0
        ? null
        : {
            workspace_id: attributes.workspace_id,
            policies: tokens.map(({ policy, group }) => ({ policy_id: policy.id, unit: policy.unit, group })),
            reserved: reservation,
            reserved_at: now,
            base_tokens: turn.baseTokens,
          },
  };
}

/**
 * admitRequest for a request that cannot wait for the workspace's policies to be read and does not
 * know its tokens yet (a run admitted before its thread's history is read: runs/commands.ts): null,
 * counting nothing, unless the policies are held at `settingsGeneration` and no tokens policy matches.
 */
export async function admitWithoutTokens(
  deps: Pick<RateLimitDeps, 'policyCache' | 'now' | 'counters' | 'metrics' | 'log'>,
  attributes: RequestAttributes,
  settingsGeneration: number | null,
): Promise<Admission | null> {
  const index = deps.policyCache.peek(attributes.workspace_id, settingsGeneration);
  if (!index) return null;
  if (index.size > 0 && index.match(attributeValues(attributes)).some((policy) => policy.type === 'tokens'))
    return null;
  return admitRequest(deps, attributes, { reservation: 0, baseTokens: 0 }, settingsGeneration);
}

/**
 * Gives an admission back whole, for a request that turned out not to happen after all (its write
 * found the request could not be made as admitted, and it is made again from the start): each
 * requests counter's unit and its tokens' reservation. A failure is logged, as settleTokens does.
 */
export async function giveBack(
  deps: Pick<RateLimitDeps, 'now' | 'counters' | 'log'>,
  admission: Admission,
  workspaceId: string,
): Promise<void> {
  await settleTokens(deps, admission.ticket, 0);
  if (!admission.counted?.length) return;
  try {
    await deps.counters.adjust(workspaceId, admission.counted);
  } catch (error) {
    deps.log.error('rate-limit admission could not be given back', { error, workspace_id: workspaceId });
  }
}

/**
 * Ends a turn's hold on its tokens policies: releases its reservation in the window it was taken
 * in, and charges `tokens`, the turn's real usage, in the window in which the turn ends: when its
 * tokens are known, and where they still weigh on the next admissions (a run admitted just before
 * a boundary would otherwise charge a window that no longer decides anything). In one window the
 * two are one change. Counters never go below 0. A failure is logged, never thrown: it must not
 * fail a finished turn (the reservation then stays counted until its window ends).
 */
export async function settleTokens(
  deps: Pick<RateLimitDeps, 'now' | 'counters' | 'log'>,
  ticket: TokenTicket | null,
  tokens: number,
): Promise<void> {
  if (!ticket) return;
  const charged = Number.isFinite(tokens) && tokens > 0 ? tokens : 0;
  const reserved = ticket.reserved ?? 0;
  try {
    const now = deps.now();
    const adjustments: CounterAdjustment[] = [];
    for (const { policy_id, unit, group } of ticket.policies) {
      const held = windowOf(unit, ticket.reserved_at ?? now);
      const ends = windowOf(unit, now);
      if (held.start === ends.start) {
        adjustments.push({
          key: counterKey(policy_id, unit, ends.start, group),
          windowEnd: ends.end,
          delta: charged - reserved,
        });
      } else {
        adjustments.push(
          { key: counterKey(policy_id, unit, held.start, group), windowEnd: held.end, delta: -reserved },
          { key: counterKey(policy_id, unit, ends.start, group), windowEnd: ends.end, delta: charged },
        );
      }
    }
    await deps.counters.adjust(ticket.workspace_id, adjustments);
  } catch (error) {
    deps.log.error('rate-limit token settlement failed', {
      error,
      workspace_id: ticket.workspace_id,
      tokens: charged,
      reserved,
    });
  }
}

/**
 * Counts one more request in each requests policy that matches `attributes`, without asking for
 * room: a further attempt of a call that was admitted once, against its first key
 * (providers/attempts.ts), with the attributes of the key it is made with. Tokens policies are not
 * touched: the call's one reservation stands for whichever attempt answers.
 */
export async function countRequest(
  deps: Pick<RateLimitDeps, 'policyCache' | 'now' | 'counters'>,
  attributes: RequestAttributes,
  settingsGeneration: number | null = null,
): Promise<void> {
  const index = await deps.policyCache.get(attributes.workspace_id, settingsGeneration);
  if (index.size === 0) return;
  const values = attributeValues(attributes);
  const now = deps.now();
  const requests = index.match(values).filter((policy) => policy.type === 'requests');
  const counters = await Promise.all(requests.map((policy) => counterOf(policy, values, now, 0)));
  if (counters.length === 0) return;
  await deps.counters.adjust(
    attributes.workspace_id,
    counters.map(({ key, windowEnd }) => ({ key, windowEnd, delta: 1 })),
  );
}

/** A request as the refusals of policyCounters show it: a usage and the group it was counted in. */
type CounterUsage = PolicyUsage & { cost: number; group: string };

/** Kept for policyCounters; a failure to keep them is logged and the request still refused. */
async function noteRefusals(
  deps: Pick<RateLimitDeps, 'counters' | 'log'>,
  attributes: RequestAttributes,
  refusing: CounterUsage[],
  now: number,
): Promise<void> {
  try {
    await Promise.all(
      refusing.map((usage) =>
        deps.counters.noteRefusal(attributes.workspace_id, usage.policy.id, {
          at: now,
          group: usage.group,
          apiKeyId: attributes.api_key,
          virtualKey: attributes.virtual_key,
          requested: usage.cost,
          used: usage.used,
          limit: usage.policy.value,
        }),
      ),
    );
  } catch (error) {
    deps.log.warn('rate-limit refusal could not be kept', { workspace_id: attributes.workspace_id, error });
  }
}

/** What GET /v1/policies/rate-limits/{id}/counters reads of one policy. */
export interface PolicyWindowCounters extends PolicyCounters {
  window: { start: number; end: number };
}

/**
 * A policy's counters in the window holding `now`, the `limit` most used, with its recent refusals
 * (counter-store.ts's policyCounters).
 */
export async function policyCounters(
  deps: Pick<RateLimitDeps, 'counters' | 'now'>,
  policy: { id: string; unit: PolicyUnit; workspaceId: string },
  limit: number,
): Promise<PolicyWindowCounters> {
  const window = windowOf(policy.unit, deps.now());
  const prefix = counterPrefix(policy.id, policy.unit, window.start);
  return { window, ...(await deps.counters.policyCounters(policy.workspaceId, policy.id, prefix, limit)) };
}

/**
 * A group's values as counterOf wrote them, `[[key, value or null], …]`, or null for a hashed
 * group (`sha256:…`, whose values were too long to keep) or text not of that shape.
 */
export function groupValues(group: string): { key: string; value: string | null }[] | null {
  if (!group.startsWith('[')) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(group);
  } catch {
    return null;
  }
  if (!Array.isArray(parsed)) return null;
  const values: { key: string; value: string | null }[] = [];
  for (const pair of parsed) {
    if (!Array.isArray(pair) || pair.length !== 2) return null;
    const [key, value]: unknown[] = pair;
    if (typeof key !== 'string' || (typeof value !== 'string' && value !== null)) return null;
    values.push({ key, value });
  }
  return values;
}

/** Group values longer than this are hashed in counter keys, which stay short whatever the metadata. */
const GROUP_TEXT_MAX = 128;

/**
 * A policy's counter for the request in the window holding `now`. The group lists each group_by
 * key with the request's value, or null when absent: an absent value is a group of its own, apart
 * from every present value (the empty string included).
 */
async function counterOf(policy: ActivePolicy, values: Map<string, string>, now: number, reservation: number) {
  const window = windowOf(policy.unit, now);
  const groupText = JSON.stringify(policy.groupBy.map((key) => [key, values.get(key) ?? null]));
  const group = groupText.length <= GROUP_TEXT_MAX ? groupText : `sha256:${await sha256Hex(groupText)}`;
  return {
    policy,
    group,
    key: counterKey(policy.id, policy.unit, window.start, group),
    windowEnd: window.end,
    cost: policy.type === 'requests' ? 1 : reservation,
    limit: policy.value,
    mustFit: policy.type === 'requests',
  } satisfies CounterAdmission & { policy: ActivePolicy; group: string };
}

/** The unit is part of the key, so a policy whose unit changes starts new counters. */
const counterKey = (policyId: string, unit: PolicyUnit, windowStart: number, group: string) =>
  counterPrefix(policyId, unit, windowStart) + group;

/** What the keys of one policy's counters in one window begin with: the key less its group. */
const counterPrefix = (policyId: string, unit: PolicyUnit, windowStart: number) =>
  `${policyId}/${unit}/${windowStart}/`;

/**
 * The policies that refused a request: those that lacked room. Only a prune of an ended window
 * between the decision and the read can leave none: then all of them.
 */
function refusingPolicies(usages: CounterUsage[]): CounterUsage[] {
  const full = usages.filter(
    (usage) => !hasRoom(usage.used, usage.cost, usage.policy.value, usage.policy.type === 'requests'),
  );
  return full.length > 0 ? full : usages;
}

/**
 * The 429 for a refused request. When several policies refused it, it reports the one whose window
 * ends last: the wait after which a retry can succeed (then a requests policy before a tokens one,
 * then by id).
 */
function refusal(candidates: (PolicyUsage & { cost: number })[], now: number): ApiError {
  const [reported] = candidates.sort(
    (a, b) =>
      b.windowEnd - a.windowEnd ||
      Number(b.policy.type === 'requests') - Number(a.policy.type === 'requests') ||
      (a.policy.id < b.policy.id ? -1 : 1),
  );
  if (!reported) throw new Error('A refusal comes from at least one policy');
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
