import { groupValues, type PolicyWindowCounters } from '../../ratelimit';
import type { PolicyCountersObject, PolicyObject } from './objects';
import type { PolicyRow } from './queries';

/** A rate-limit policy on the wire: timestamps in ISO 8601. */
export function toPolicyJson(row: PolicyRow): PolicyObject {
  return {
    id: row.id,
    type: row.type,
    unit: row.unit,
    value: row.value,
    status: row.status,
    workspace_id: row.workspaceId,
    organisation_id: row.organisationId,
    created_at: new Date(row.createdAt).toISOString(),
    last_updated_at: new Date(row.lastUpdatedAt).toISOString(),
    name: row.name,
    conditions: row.conditions,
    group_by: row.groupBy,
    created_by: row.createdBy,
  };
}

/**
 * A policy's counters on the wire: a group as its keys and values (or its hash), times in ISO 8601,
 * each refusal's API key with its prefix from `prefixes` (by id).
 */
export function toPolicyCountersJson(
  row: PolicyRow,
  counters: PolicyWindowCounters,
  prefixes: Map<string, string>,
): PolicyCountersObject {
  const iso = (ms: number) => new Date(ms).toISOString();
  return {
    object: 'rate_limit_policy.counters',
    policy_id: row.id,
    type: row.type,
    unit: row.unit,
    value: row.value,
    window_start: iso(counters.window.start),
    window_end: iso(counters.window.end),
    groups: counters.groups.map(({ group, used }) => ({ ...groupJson(group), used })),
    total_groups: counters.totalGroups,
    refusals: counters.refusals.map((refusal) => ({
      created_at: iso(refusal.at),
      ...groupJson(refusal.group),
      api_key_id: refusal.apiKeyId,
      api_key_prefix: prefixes.get(refusal.apiKeyId) ?? null,
      virtual_key: refusal.virtualKey,
      requested: refusal.requested,
      used: refusal.used,
      limit: refusal.limit,
    })),
  };
}

function groupJson(group: string) {
  const values = groupValues(group);
  return { group: values, group_hash: values ? null : group };
}
