import { and, count, desc, eq, inArray, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import { insertWhere, type Db } from '../../db/client';
import { apiKeys, rateLimitPolicies, rateLimitPolicyVersions, type ApiKeyKind } from '../../db/schema';
import { ApiError } from '../../errors';
import { newUuid } from '../../lib/ids';
import type { CreatePolicyBody, ListPoliciesQuery, UpdatePolicyBody } from './schemas';
import type { AuthenticatedKey } from '../../db/schema';
import { quotaExceeded, utf8Bytes, type WorkspaceCaps } from '../identities/quotas';
import type { WorkspaceScope } from '../identities/workspaces';

export type PolicyRow = typeof rateLimitPolicies.$inferSelect;

/** What a workspace's active policies hold now (kept by the triggers of migration 0002). */
const workspaceStats = (workspaceId: string | SQL) => ({
  count: sql<number>`coalesce((SELECT ${rateLimitPolicyVersions.activeCount} FROM ${rateLimitPolicyVersions} WHERE ${rateLimitPolicyVersions.workspaceId} = ${workspaceId}), 0)`,
  bytes: sql<number>`coalesce((SELECT ${rateLimitPolicyVersions.activeBytes} FROM ${rateLimitPolicyVersions} WHERE ${rateLimitPolicyVersions.workspaceId} = ${workspaceId}), 0)`,
});

async function readWorkspaceStats(db: Db, workspaceId: string): Promise<{ count: number; bytes: number }> {
  const [row] = await db
    .select({ count: rateLimitPolicyVersions.activeCount, bytes: rateLimitPolicyVersions.activeBytes })
    .from(rateLimitPolicyVersions)
    .where(eq(rateLimitPolicyVersions.workspaceId, workspaceId));
  return row ?? { count: 0, bytes: 0 };
}

/**
 * The bytes a policy counts against GATEWAY_MAX_POLICY_BYTES_PER_WORKSPACE: its name, conditions
 * and group_by as stored (JSON text), as the triggers measure them with length(CAST(… AS BLOB)).
 */
export function policyBytes(policy: { name: string; conditions: unknown; groupBy: unknown }): number {
  return (
    utf8Bytes(policy.name) + utf8Bytes(JSON.stringify(policy.conditions)) + utf8Bytes(JSON.stringify(policy.groupBy))
  );
}

function checkConditions(conditions: readonly unknown[] | undefined, caps: WorkspaceCaps) {
  if (conditions !== undefined && conditions.length > caps.policyConditions) {
    throw quotaExceeded(
      `A rate-limit policy may have at most ${caps.policyConditions} conditions in this gateway; this one has ${conditions.length}.`,
      'conditions',
    );
  }
}

const bytesQuota = (workspaceBytes: number, policy: number, cap: number) =>
  quotaExceeded(
    `This workspace's active rate-limit policies take ${workspaceBytes} bytes (names, conditions and group_by); ` +
      `a policy of ${policy} bytes would pass its cap of ${cap} bytes. Archive or shrink policies first.`,
  );

/**
 * Creates an active policy, within the workspace's caps (WorkspaceCaps: how many active policies,
 * conditions per policy, their bytes together), checked in the insert itself so that concurrent
 * creates cannot pass them. `createdBy` is the kind of the calling key: an organisation's policy
 * is changed and archived by organisation keys only.
 */
export async function createPolicy(
  db: Db,
  scope: WorkspaceScope,
  body: CreatePolicyBody,
  now: number,
  rules: { createdBy: ApiKeyKind; caps: WorkspaceCaps },
): Promise<PolicyRow> {
  const { caps } = rules;
  checkConditions(body.conditions, caps);
  const values = {
    id: newUuid(),
    organisationId: scope.organisationId,
    workspaceId: scope.workspaceId,
    name: body.name ?? '',
    type: body.type,
    unit: body.unit,
    value: body.value,
    status: 'active' as const,
    conditions: body.conditions,
    groupBy: body.group_by,
    createdAt: now,
    lastUpdatedAt: now,
    createdBy: rules.createdBy,
  };
  const size = policyBytes(values);
  const stats = workspaceStats(scope.workspaceId);
  const [row] = await insertWhere(
    db,
    rateLimitPolicies,
    values,
    sql`${stats.count} < ${caps.policies} AND ${stats.bytes} + ${size} <= ${caps.policyBytes}`,
  ).returning();
  if (row) return row;
  const held = await readWorkspaceStats(db, scope.workspaceId);
  if (held.count >= caps.policies) {
    throw quotaExceeded(
      `This workspace has ${held.count} active rate-limit policies; its cap is ${caps.policies}. Archive one before creating another.`,
    );
  }
  throw bytesQuota(held.bytes, size, caps.policyBytes);
}

export interface PolicyFilter {
  organisationId: string;
  /** One workspace, or null for every workspace of the organisation. */
  workspaceId: string | null;
  status: ListPoliciesQuery['status'];
  type?: ListPoliciesQuery['type'];
  unit?: ListPoliciesQuery['unit'];
}

/**
 * One page, newest first (by insertion order, which never ties), and the number of policies that
 * match the filter in all. Both queries run in one batch: one round trip to a remote database
 * and one consistent snapshot, so `total` always describes the same data as the page.
 */
export async function listPolicies(
  db: Db,
  filter: PolicyFilter,
  page: { size: number; index: number },
): Promise<{ rows: PolicyRow[]; total: number }> {
  const where = and(
    filter.workspaceId === null
      ? eq(rateLimitPolicies.organisationId, filter.organisationId)
      : eq(rateLimitPolicies.workspaceId, filter.workspaceId),
    eq(rateLimitPolicies.status, filter.status),
    filter.type ? eq(rateLimitPolicies.type, filter.type) : undefined,
    filter.unit ? eq(rateLimitPolicies.unit, filter.unit) : undefined,
  );
  const [rows, [totals]] = await db.batch([
    db
      .select()
      .from(rateLimitPolicies)
      .where(where)
      .orderBy(desc(rateLimitPolicies.seq))
      .limit(page.size)
      .offset(page.size * page.index),
    db.select({ total: count() }).from(rateLimitPolicies).where(where),
  ]);
  return { rows, total: totals?.total ?? 0 };
}

/** Policies the key may see: its workspace's, or its organisation's for an organisation key. */
function inReach(apiKey: AuthenticatedKey): SQL {
  return apiKey.workspace
    ? eq(rateLimitPolicies.workspaceId, apiKey.workspace.id)
    : eq(rateLimitPolicies.organisationId, apiKey.organisationId);
}

const notFound = (id: string) =>
  new ApiError('policy_not_found', `No rate-limit policy found with id '${id}'.`, { param: 'id' });

/**
 * Policies the key may change or archive: those in reach, except that a workspace key cannot
 * touch what an organisation key created, which binds the workspace from above.
 */
function changeableBy(apiKey: AuthenticatedKey): SQL | undefined {
  return and(inReach(apiKey), apiKey.kind === 'workspace' ? eq(rateLimitPolicies.createdBy, 'workspace') : undefined);
}

/** 403 when `row` is an organisation's policy and the key a workspace key. */
function checkOwner(apiKey: AuthenticatedKey, row: PolicyRow, action: 'changed' | 'archived') {
  if (apiKey.kind === 'workspace' && row.createdBy === 'organisation') {
    throw new ApiError(
      'policy_forbidden',
      `Rate-limit policy '${row.id}' was created with an organisation API key and can be ${action} only with one; ` +
        'a workspace API key can read it.',
      { param: 'id' },
    );
  }
}

export async function getPolicy(db: Db, apiKey: AuthenticatedKey, id: string): Promise<PolicyRow> {
  const [row] = await db
    .select()
    .from(rateLimitPolicies)
    .where(and(eq(rateLimitPolicies.id, id), inReach(apiKey)))
    .limit(1);
  if (!row) throw notFound(id);
  return row;
}

/**
 * Changes an active policy: 404 out of reach, 403 an organisation's policy for a workspace key,
 * 409 an archived one (kept as it was archived), 400 past the caps. A change that grows the
 * policy must fit the workspace's bytes cap; one that shrinks it always may, so a workspace over
 * its caps (created before them, or under a higher cap) can still come back under them.
 */
export async function updatePolicy(
  db: Db,
  apiKey: AuthenticatedKey,
  id: string,
  body: UpdatePolicyBody,
  now: number,
  caps: WorkspaceCaps,
): Promise<PolicyRow> {
  checkConditions(body.conditions, caps);
  const t = rateLimitPolicies;
  const stored = (column: AnyColumn) => sql`length(CAST(${column} AS BLOB))`;
  const oldSize = sql`(${stored(t.name)} + ${stored(t.conditions)} + ${stored(t.groupBy)})`;
  const newSize = sql`(${body.name !== undefined ? utf8Bytes(body.name) : stored(t.name)} + ${
    body.conditions !== undefined ? utf8Bytes(JSON.stringify(body.conditions)) : stored(t.conditions)
  } + ${body.group_by !== undefined ? utf8Bytes(JSON.stringify(body.group_by)) : stored(t.groupBy)})`;
  const fits = sql`(${newSize} <= ${oldSize} OR ${workspaceStats(sql`${t.workspaceId}`).bytes} - ${oldSize} + ${newSize} <= ${caps.policyBytes})`;
  const [row] = await db
    .update(t)
    .set({
      name: body.name,
      value: body.value,
      unit: body.unit,
      conditions: body.conditions,
      groupBy: body.group_by,
      lastUpdatedAt: now,
    })
    .where(and(eq(t.id, id), changeableBy(apiKey), eq(t.status, 'active'), fits))
    .returning();
  if (row) return row;
  const existing = await getPolicy(db, apiKey, id);
  checkOwner(apiKey, existing, 'changed');
  if (existing.status === 'archived') {
    throw new ApiError('policy_archived', `Rate-limit policy '${existing.id}' is archived and cannot be changed.`, {
      param: 'id',
    });
  }
  const changed = {
    name: body.name ?? existing.name,
    conditions: body.conditions ?? existing.conditions,
    groupBy: body.group_by ?? existing.groupBy,
  };
  const stats = await readWorkspaceStats(db, existing.workspaceId);
  throw bytesQuota(stats.bytes - policyBytes(existing), policyBytes(changed), caps.policyBytes);
}

/**
 * Archives a policy (403 as updatePolicy for an organisation's policy and a workspace key).
 * Archiving an archived policy changes nothing and answers it as it is.
 */
export async function archivePolicy(db: Db, apiKey: AuthenticatedKey, id: string, now: number): Promise<PolicyRow> {
  const [row] = await db
    .update(rateLimitPolicies)
    .set({ status: 'archived', lastUpdatedAt: now })
    .where(and(eq(rateLimitPolicies.id, id), changeableBy(apiKey), eq(rateLimitPolicies.status, 'active')))
    .returning();
  if (row) return row;
  const existing = await getPolicy(db, apiKey, id);
  checkOwner(apiKey, existing, 'archived');
  return existing;
}

/**
 * The prefixes of the API keys among `ids` that belong to `organisationId` (the policy's: the keys
 * its refusals name), by id. A key of no such id (deleted, or never one) is absent.
 */
export async function apiKeyPrefixes(db: Db, organisationId: string, ids: string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .select({ id: apiKeys.id, prefix: apiKeys.prefix })
    .from(apiKeys)
    .where(and(eq(apiKeys.organisationId, organisationId), inArray(apiKeys.id, [...new Set(ids)])));
  return new Map(rows.map((row) => [row.id, row.prefix]));
}
