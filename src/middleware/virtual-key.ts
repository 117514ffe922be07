import { createMiddleware } from 'hono/factory';
import { ApiError } from '../errors';
import { findActiveVirtualKey, type VirtualKey } from '../services/virtual-keys';
import type { DepsVariables } from './deps';
import type { WorkspaceVariables } from './workspace';

export const VIRTUAL_KEY_HEADER = 'x-gateway-virtual-key';

export type VirtualKeyVariables = { virtualKey: VirtualKey };

/**
 * Requires `x-gateway-virtual-key`, the slug of a live virtual key of `c.var.workspace` (so it
 * runs after workspace()). Missing is 400 `missing_virtual_key`; unknown, revoked and another
 * workspace's are one 401 `invalid_virtual_key`, which does not repeat the value, so other
 * workspaces' slugs cannot be probed. Sets `c.var.virtualKey`.
 */
export const virtualKey = () =>
  createMiddleware<{ Variables: DepsVariables & WorkspaceVariables & VirtualKeyVariables }>(async (c, next) => {
    const slug = c.req.header(VIRTUAL_KEY_HEADER)?.trim();
    if (!slug) {
      throw new ApiError('missing_virtual_key', `Missing required header: '${VIRTUAL_KEY_HEADER}' (a virtual key's slug).`, {
        param: VIRTUAL_KEY_HEADER,
      });
    }
    const key = await findActiveVirtualKey(c.var.deps.db, c.var.workspace.workspaceId, slug);
    if (!key) {
      throw new ApiError(
        'invalid_virtual_key',
        `The '${VIRTUAL_KEY_HEADER}' header names no live virtual key of this workspace.`,
        { param: VIRTUAL_KEY_HEADER },
      );
    }
    c.set('virtualKey', key);
    await next();
  });
