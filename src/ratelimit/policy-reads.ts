import { and, asc, eq, gt, sql } from 'drizzle-orm';
import { preparedQuery, type Db } from '../db/client';
import { rateLimitPolicies, rateLimitPolicyVersions } from '../db/schema';

/**
 * How enforcement reads a workspace's policies (for policy-cache.ts): their version and their
 * pages. Creating and changing them is the policies resource's (resources/policies/).
 */

/**
 * The version of a workspace's policies: it grows with every change to them (triggers on the
 * table bump it in the change's own transaction), so a cache that holds this version is current.
 */
const policyVersion = preparedQuery((db) =>
  db
    .select({ version: rateLimitPolicyVersions.version })
    .from(rateLimitPolicyVersions)
    .where(eq(rateLimitPolicyVersions.workspaceId, sql.placeholder('workspaceId')))
    .limit(1)
    .prepare(),
);

export async function readPolicyVersion(db: Db, workspaceId: string): Promise<number> {
  const [row] = await policyVersion(db).all({ workspaceId });
  return row?.version ?? 0;
}

/** What enforcing a policy takes from its row. */
export type EnforcedPolicyRow = Pick<
  typeof rateLimitPolicies.$inferSelect,
  'id' | 'name' | 'type' | 'unit' | 'value' | 'conditions' | 'groupBy'
>;

/** A policy as the policy cache reads it: what enforcing it takes, and where it stands. */
export interface PolicyRecord extends EnforcedPolicyRow {
  active: boolean;
  /** The workspace's policy version at the row's last change. */
  version: number;
  seq: number;
}

export interface PolicyPage {
  /** The workspace's policy version when the page was read. */
  version: number;
  /** The version at which a policy last left the workspace (deleted, moved): see PolicyCache. */
  fullReloadVersion: number;
  policies: PolicyRecord[];
}

/**
 * Where a page starts: after a `seq` among the workspace's active policies (a full load, in
 * insertion order), or after a version among every policy changed since it, archived ones
 * included (an incremental load, in the order of their changes).
 */
export type PolicyPageStart = { afterSeq: number } | { changedAfter: number };

/**
 * One page of at most `limit` policies of a workspace and the version state they were read at, in
 * one snapshot (one batch).
 */
export async function readPolicyPage(
  db: Db,
  workspaceId: string,
  start: PolicyPageStart,
  limit: number,
): Promise<PolicyPage> {
  const t = rateLimitPolicies;
  const v = rateLimitPolicyVersions;
  const [versions, rows] = await db.batch([
    db
      .select({ version: v.version, fullReloadVersion: v.fullReloadVersion })
      .from(v)
      .where(eq(v.workspaceId, workspaceId)),
    db
      .select({
        id: t.id,
        name: t.name,
        type: t.type,
        unit: t.unit,
        value: t.value,
        conditions: t.conditions,
        groupBy: t.groupBy,
        status: t.status,
        version: t.version,
        seq: t.seq,
      })
      .from(t)
      .where(
        'afterSeq' in start
          ? and(eq(t.workspaceId, workspaceId), eq(t.status, 'active'), gt(t.seq, start.afterSeq))
          : and(eq(t.workspaceId, workspaceId), gt(t.version, start.changedAfter)),
      )
      .orderBy('afterSeq' in start ? asc(t.seq) : asc(t.version))
      .limit(limit),
  ]);
  return {
    version: versions[0]?.version ?? 0,
    fullReloadVersion: versions[0]?.fullReloadVersion ?? 0,
    policies: rows.map(({ status, ...row }) => ({ ...row, active: status === 'active' })),
  };
}
