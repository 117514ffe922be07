import { asc, eq, sql } from 'drizzle-orm';
import { insertWhere, type Db } from '../../db/client';
import { apiKeys, organisations, workspaces } from '../../db/schema';
import { newUuid } from '../../lib/ids';
import { prepareApiKey } from './api-keys';

export interface Organisation {
  id: string;
  name: string;
  createdAt: number;
}

export async function listOrganisations(db: Db): Promise<Organisation[]> {
  return db.select().from(organisations).orderBy(asc(organisations.createdAt));
}

export interface InitResult {
  organisation_id: string;
  workspace_id: string;
  workspace_slug: string;
  /** Plaintext keys: printed once by whoever called init, never stored or shown again. */
  organisation_api_key: string;
  workspace_api_key: string;
}

/**
 * First-run set-up: an organisation, its `default` workspace, one organisation key and one
 * workspace key. Idempotent, and safe against a concurrent `init` (two processes starting on one
 * empty database): each insert is guarded by "no other organisation exists" and all of them run in
 * one batch, which is one transaction, so exactly one caller creates anything. Returns null when
 * the database was already initialised.
 */
export async function initialise(db: Db, now: number): Promise<InitResult | null> {
  const organisationId = newUuid();
  const workspaceId = newUuid();
  const slug = 'default';
  const [orgKey, workspaceKey] = await Promise.all([
    prepareApiKey({ kind: 'organisation', organisationId, workspaceId: null, name: 'bootstrap', now }),
    prepareApiKey({ kind: 'workspace', organisationId, workspaceId, name: 'bootstrap', now }),
  ]);
  const guard = sql`NOT EXISTS (SELECT 1 FROM ${organisations} WHERE ${organisations.id} <> ${organisationId})`;
  await db.batch([
    insertWhere(db, organisations, { id: organisationId, name: 'default', createdAt: now }, guard),
    insertWhere(
      db,
      workspaces,
      { id: workspaceId, organisationId, slug, name: 'Default workspace', createdAt: now },
      guard,
    ),
    insertWhere(db, apiKeys, orgKey.row, guard),
    insertWhere(db, apiKeys, workspaceKey.row, guard),
  ]);
  const [created] = await db.select({ id: workspaces.id }).from(workspaces).where(eq(workspaces.id, workspaceId));
  if (!created) return null;
  return {
    organisation_id: organisationId,
    workspace_id: workspaceId,
    workspace_slug: slug,
    organisation_api_key: orgKey.plaintext,
    workspace_api_key: workspaceKey.plaintext,
  };
}
