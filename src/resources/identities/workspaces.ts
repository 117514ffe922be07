import { and, asc, eq, or } from 'drizzle-orm';
import type { Db } from '../../db/client';
import { workspaces } from '../../db/schema';
import { ApiError } from '../../errors';
import { newUuid } from '../../lib/ids';
import type { AuthenticatedKey } from '../../db/schema';

export interface Workspace {
  id: string;
  organisationId: string;
  slug: string;
  name: string;
  createdAt: number;
}

/** Lowercase letters, digits and hyphens; never UUID-shaped, so `workspace_id` can take either. */
export const WORKSPACE_SLUG = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;
const UUID_SHAPED = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function checkWorkspaceSlug(slug: string): string | null {
  if (!WORKSPACE_SLUG.test(slug)) {
    return 'A workspace slug has 1 to 64 lowercase letters, digits and inner hyphens.';
  }
  if (UUID_SHAPED.test(slug)) return 'A workspace slug cannot have the shape of a UUID.';
  return null;
}

export async function createWorkspace(
  db: Db,
  input: { organisationId: string; slug: string; name?: string; now: number },
): Promise<Workspace> {
  const problem = checkWorkspaceSlug(input.slug);
  if (problem) throw new ApiError('invalid_value', problem, { param: 'slug' });
  const [row] = await db
    .insert(workspaces)
    .values({
      id: newUuid(),
      organisationId: input.organisationId,
      slug: input.slug,
      name: input.name ?? input.slug,
      createdAt: input.now,
    })
    .onConflictDoNothing()
    .returning();
  if (!row) {
    throw new ApiError('already_exists', `A workspace with slug '${input.slug}' already exists.`, { param: 'slug' });
  }
  return row;
}

export async function listWorkspaces(db: Db, organisationId?: string): Promise<Workspace[]> {
  return db
    .select()
    .from(workspaces)
    .where(organisationId ? eq(workspaces.organisationId, organisationId) : undefined)
    .orderBy(asc(workspaces.createdAt), asc(workspaces.slug));
}

/** A workspace of the organisation by id or slug. */
export async function findWorkspace(db: Db, organisationId: string, ref: string): Promise<Workspace | null> {
  const [row] = await db
    .select()
    .from(workspaces)
    .where(and(eq(workspaces.organisationId, organisationId), or(eq(workspaces.id, ref), eq(workspaces.slug, ref))))
    .limit(1);
  return row ?? null;
}

/** A workspace the caller may act on: its id, and its organisation's. */
export interface WorkspaceScope {
  workspaceId: string;
  organisationId: string;
}

/**
 * Which workspace a call acts on. A workspace key acts on its own workspace: naming it (by id or
 * slug) is allowed, naming any other is 403. An organisation key must name one of its
 * organisation's workspaces when `required`; anything outside the organisation is 403 too, so the
 * answer never tells whether another tenant's workspace exists. Returns null when an organisation
 * key names none and none is required (the call then spans the organisation).
 */
export async function resolveWorkspaceScope(
  db: Db,
  apiKey: AuthenticatedKey,
  ref: string | undefined,
  options: { required: true; param?: string },
): Promise<WorkspaceScope>;
export async function resolveWorkspaceScope(
  db: Db,
  apiKey: AuthenticatedKey,
  ref: string | undefined,
  options: { required: boolean; param?: string },
): Promise<WorkspaceScope | null>;
export async function resolveWorkspaceScope(
  db: Db,
  apiKey: AuthenticatedKey,
  ref: string | undefined,
  options: { required: boolean; param?: string },
): Promise<WorkspaceScope | null> {
  const param = options.param ?? 'workspace_id';
  if (apiKey.workspace) {
    if (ref !== undefined && ref !== apiKey.workspace.id && ref !== apiKey.workspace.slug) {
      throw forbidden(ref, param);
    }
    return { workspaceId: apiKey.workspace.id, organisationId: apiKey.organisationId };
  }
  if (ref === undefined) {
    if (!options.required) return null;
    throw new ApiError(
      'missing_required_parameter',
      `Missing required parameter: '${param}'. An organisation API key must name the workspace (id or slug).`,
      { param },
    );
  }
  const workspace = await findWorkspace(db, apiKey.organisationId, ref);
  if (!workspace) throw forbidden(ref, param);
  return { workspaceId: workspace.id, organisationId: workspace.organisationId };
}

const forbidden = (ref: string, param: string) =>
  new ApiError('workspace_forbidden', `The API key has no access to workspace '${ref}'.`, { param });
