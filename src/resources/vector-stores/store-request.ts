import type { Context } from 'hono';
import { requestedVirtualKey } from '../../http/middleware/virtual-key';
import type { StoreRequest } from './commands';
import type { WorkspaceEnv } from '../../http/env';

/** Who adds files to a vector store, from a request of a workspace route (vector stores, threads, messages). */
export const storeRequest = (c: Context<WorkspaceEnv>): StoreRequest => ({
  workspaceId: c.get('workspace').workspaceId,
  apiKeyId: c.get('apiKey').id,
  virtualKeySlug: requestedVirtualKey(c),
  waitUntil: (task) => c.executionCtx.waitUntil(task),
});
