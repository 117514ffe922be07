import type { PolicyObject } from './objects';
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
