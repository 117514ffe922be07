import * as z from 'zod';

/** Organisation keys name a workspace (id or slug); workspace keys may name their own. */
const workspaceRef = z.string().min(1).max(255);

export const listApiKeysQuery = z.strictObject({ workspace_id: workspaceRef.optional() });

/** POST /v1/api-keys: a workspace key, for the caller's workspace or the one an organisation key names. */
export const createApiKeyBody = z.strictObject({
  name: z.string().trim().min(1).max(200),
  workspace_id: workspaceRef.optional(),
});
