import { createMiddleware } from 'hono/factory';
import { resolveWorkspaceScope, type WorkspaceScope } from '../../resources/identities/workspaces';
import type { ApiKeyVariables } from './api-key-auth';
import type { DepsVariables } from './deps';

export const WORKSPACE_HEADER = 'x-gateway-workspace-id';

export type WorkspaceVariables = { workspace: WorkspaceScope };

/**
 * The workspace of routes whose bodies have no `workspace_id` (assistants, threads, runs): a
 * workspace key acts on its own; an organisation key names one of its organisation's workspaces,
 * by id or slug, in `x-gateway-workspace-id` (missing: 400; outside the organisation: 403).
 * Sets `c.get('workspace')`.
 */
export const workspace = () =>
  createMiddleware<{ Variables: DepsVariables & ApiKeyVariables & WorkspaceVariables }>(async (c, next) => {
    const ref = c.req.header(WORKSPACE_HEADER)?.trim() || undefined;
    const scope = await resolveWorkspaceScope(c.get('deps').db, c.get('apiKey'), ref, {
      required: true,
      param: WORKSPACE_HEADER,
    });
    c.set('workspace', scope!);
    await next();
  });
