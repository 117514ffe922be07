import { and, count, desc, eq, sql, type SQL } from 'drizzle-orm';
import { preparedQuery, type Db } from '../db/client';
import { rateLimitPolicies, rateLimitPolicyVersions } from '../db/schema';
import { ApiError } from '../errors';
import { newUuid } from '../lib/ids';
import type {
  CreatePolicyBody,
  ListPoliciesQuery,
  PolicyJson,
  UpdatePolicyBody,
} from '../schemas/policies';
import type { AuthenticatedKey } from './api-keys';
import type { WorkspaceScope } from './workspaces';

export type PolicyRow = typeof rateLimitPolicies.$inferSelect;

export function toPolicyJson(row: PolicyRow): PolicyJson {
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
  };
}

export async function createPolicy(
  db: Db,
  scope: WorkspaceScope,
  body: CreatePolicyBody,
  now: number,
): Promise<PolicyRow> {
  const [row] = await db
    .insert(rateLimitPolicies)
    .values({
      id: newUuid(),
      organisationId: scope.organisationId,
      workspaceId: scope.workspaceId,
      name: body.name ?? '',
      type: body.type,
      unit: body.unit,
      value: body.value,
      status: 'active',
      conditions: body.conditions,
      groupBy: body.group_by,
      createdAt: now,
      lastUpdatedAt: now,
    })
    .returning();
  return row!;
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

export async function getPolicy(db: Db, apiKey: AuthenticatedKey, id: string): Promise<PolicyRow> {
  const [row] = await db
    .select()
    .from(rateLimitPolicies)
    .where(and(eq(rateLimitPolicies.id, id), inReach(apiKey)))
    .limit(1);
  if (!row) throw notFound(id);
  return row;
}

/** Changes an active policy; an archived one is kept as it was archived (409). */
export async function updatePolicy(
  db: Db,
  apiKey: AuthenticatedKey,
  id: string,
  body: UpdatePolicyBody,
  now: number,
): Promise<PolicyRow> {
  const [row] = await db
    .update(rateLimitPolicies)
    .set({
      name: body.name,
      value: body.value,
      unit: body.unit,
      conditions: body.conditions,
      groupBy: body.group_by,
      lastUpdatedAt: now,
    })
    .where(and(eq(rateLimitPolicies.id, id), inReach(apiKey), eq(rateLimitPolicies.status, 'active')))
    .returning();
  if (row) return row;
  const existing = await getPolicy(db, apiKey, id);
  throw new ApiError('policy_archived', `Rate-limit policy '${existing.id}' is archived and cannot be changed.`, {
    param: 'id',
  });
}

/** Archives a policy. Archiving an archived policy changes nothing and answers it as it is. */
export async function archivePolicy(db: Db, apiKey: AuthenticatedKey, id: string, now: number): Promise<PolicyRow> {
  const [row] = await db
    .update(rateLimitPolicies)
    .set({ status: 'archived', lastUpdatedAt: now })
    .where(and(eq(rateLimitPolicies.id, id), inReach(apiKey), eq(rateLimitPolicies.status, 'active')))
    .returning();
  return row ?? getPolicy(db, apiKey, id);
}

/**
 * The version of a workspace's policies: it grows with every change to them (triggers on the
 * table bump it in the change's own transaction), so a cache that holds this version is current.
 */
const policyVersion = preparedQuery((db) =>
  db
    .select({ version: rateLimitPolicyVersions.version })
    .from(rateLimitPolicyVersions)
    .where(eq(rateLimitPolicyVersions.workspaceId, sql.placeholder('workspaceId')))
    .prepare(),
);

export async function readPolicyVersion(db: Db, workspaceId: string): Promise<number> {
  const [row] = await policyVersion(db).all({ workspaceId });
  return row?.version ?? 0;
}

/** What enforcing a policy takes from its row. */
export type EnforcedPolicyRow = Pick<PolicyRow, 'id' | 'name' | 'type' | 'unit' | 'value' | 'conditions' | 'groupBy'>;

/**
 * Every active policy of a workspace and the version they are at, read in one snapshot. The rows
 * come as one JSON array built by SQLite: a workspace may hold 10,000 policies, and materialising
 * them as result rows costs several times more than parsing one string. The value goes as text of
 * 17 significant digits, which round-trips any double (JSON and plain printf keep 15 or 16; `!`
 * lifts SQLite's cap).
 */
export async function loadActivePolicies(
  db: Db,
  workspaceId: string,
): Promise<{ version: number; policies: EnforcedPolicyRow[] }> {
  const t = rateLimitPolicies;
  const [versions, [aggregate]] = await db.batch([
    db
      .select({ version: rateLimitPolicyVersions.version })
      .from(rateLimitPolicyVersions)
      .where(eq(rateLimitPolicyVersions.workspaceId, workspaceId)),
    db
      .select({
        policies: sql<string>`json_group_array(json_array(${t.id}, ${t.name}, ${t.type}, ${t.unit}, printf('%!.17g', ${t.value}), json(${t.conditions}), json(${t.groupBy})))`,
      })
      .from(t)
      .where(and(eq(t.workspaceId, workspaceId), eq(t.status, 'active'))),
  ]);
  type Item = [string, string, PolicyRow['type'], PolicyRow['unit'], string, PolicyRow['conditions'], PolicyRow['groupBy']];
  const items = JSON.parse(aggregate?.policies ?? '[]') as Item[];
  return {
    version: versions[0]?.version ?? 0,
    policies: items.map(([id, name, type, unit, value, conditions, groupBy]) => ({
      id,
      name,
      type,
      unit,
      value: Number(value),
      conditions,
      groupBy,
    })),
  };
}
