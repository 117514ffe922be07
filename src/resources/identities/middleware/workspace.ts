import { createMiddleware } from 'hono/factory';
import type { Actor } from '../../../actor';
import { METADATA_HEADER } from '../../../ratelimit/attributes';
import { resolveWorkspaceScope } from '../workspaces';
import type { ApiKeyVariables } from './api-key-auth';
import type { DepsVariables } from '../../../http/middleware/deps';
import { requestedVirtualKey } from '../../../http/middleware/virtual-key';

export const WORKSPACE_HEADER = 'x-gateway-workspace-id';

export type ActorVariables = { actor: Actor };

/**
 * Who calls, on routes whose bodies have no `workspace_id` (assistants, threads, runs, files,
 * vector stores): the authenticated key (api-key-auth.ts), its workspace, the virtual key the
 * request names. A workspace key acts on its own workspace; an organisation key names one of its
 * organisation's workspaces, by id or slug, in `x-gateway-workspace-id` (missing: 400; outside the
 * organisation: 403). Sets `c.get('actor')`.
 */
export const workspace = () =>
  createMiddleware<{ Variables: DepsVariables & ApiKeyVariables & ActorVariables }>(async (c, next) => {
    const apiKey = c.get('apiKey');
    const ref = c.req.header(WORKSPACE_HEADER)?.trim() || undefined;
    const scope = await resolveWorkspaceScope(c.get('deps').db, apiKey, ref, {
      required: true,
      param: WORKSPACE_HEADER,
    });
    c.set('actor', {
      apiKeyId: apiKey.id,
      workspaceId: scope.workspaceId,
      organisationId: scope.organisationId,
      virtualKeySlug: requestedVirtualKey(c),
      metadataHeader: c.req.header(METADATA_HEADER),
    });
    await next();
  });
