import { createMiddleware } from 'hono/factory';
import { resolveVirtualKey, VIRTUAL_KEY_HEADER, type VirtualKey } from '../services/virtual-keys';
import type { DepsVariables } from './deps';
import type { WorkspaceVariables } from './workspace';

export { VIRTUAL_KEY_HEADER };

export type VirtualKeyVariables = { virtualKey: VirtualKey };

/**
 * The virtual key of a request that needs one before its handler runs (GET of an assistant), as
 * resolveVirtualKey finds it for `model`; after workspace(). Runs resolve theirs in their use-case,
 * once their model is known. Sets `c.var.virtualKey`.
 */
export const virtualKey = () =>
  createMiddleware<{ Variables: DepsVariables & WorkspaceVariables & VirtualKeyVariables }>(async (c, next) => {
    const slug = c.req.header(VIRTUAL_KEY_HEADER)?.trim() || undefined;
    c.set('virtualKey', await resolveVirtualKey(c.var.deps.db, c.var.workspace.workspaceId, { slug, model: '' }));
    await next();
  });
