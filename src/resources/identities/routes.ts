import { Hono } from 'hono';
import { changesSettings } from '../../http/middleware/changes-settings';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { createApiKey, listScopedApiKeys, revokeScopedApiKey } from './api-keys';
import type { ApiEnv } from './env';
import { apiKeyList, apiKeyObject, createdApiKey, workspaceList } from './objects';
import { createApiKeyBody, listApiKeysQuery } from './schemas';
import { toApiKeyJson, toWorkspaceJson } from './wire';
import { listWorkspaces, resolveWorkspaceScope } from './workspaces';

/**
 * GET /v1/workspaces: the workspaces the key may act on, what a client (the console) offers to pick
 * from: an organisation key's organisation's, a workspace key's own.
 */
export const workspaceRoutes = new Hono<ApiEnv>().get(
  '/',
  responds({ summary: 'List the workspaces the key may act on', ok: workspaceList }),
  async (c) => {
    const apiKey = c.get('apiKey');
    const all = await listWorkspaces(c.get('deps').db, apiKey.organisationId);
    const visible = apiKey.workspace ? all.filter((workspace) => workspace.id === apiKey.workspace?.id) : all;
    return c.json({ object: 'list' as const, data: visible.map(toWorkspaceJson) });
  },
);

/**
 * /v1/api-keys: a workspace key manages its workspace's keys; an organisation key any of its
 * organisation's, and names the workspace a new key is for. The key itself is answered once, at
 * creation; the database keeps its hash (api-keys.ts).
 */
export const apiKeyRoutes = new Hono<ApiEnv>()
  .use(changesSettings())
  .get(
    '/',
    responds({ summary: 'List API keys', ok: apiKeyList, errors: [403] }),
    validate('query', listApiKeysQuery),
    async (c) => {
      const { db } = c.get('deps');
      const apiKey = c.get('apiKey');
      const scope = await resolveWorkspaceScope(db, apiKey, c.req.valid('query').workspace_id, { required: false });
      const keys = await listScopedApiKeys(db, {
        organisationId: apiKey.organisationId,
        workspaceId: scope?.workspaceId ?? null,
      });
      return c.json({ object: 'list' as const, data: keys.map(toApiKeyJson) });
    },
  )
  .post(
    '/',
    responds({ summary: 'Create a workspace API key', ok: createdApiKey, errors: [403] }),
    validate('json', createApiKeyBody),
    async (c) => {
      const body = c.req.valid('json');
      const { db, now } = c.get('deps');
      const scope = await resolveWorkspaceScope(db, c.get('apiKey'), body.workspace_id, { required: true });
      const { record, plaintext } = await createApiKey(db, {
        kind: 'workspace',
        organisationId: scope.organisationId,
        workspaceId: scope.workspaceId,
        name: body.name,
        now: now(),
      });
      return c.json({ ...toApiKeyJson(record), key: plaintext });
    },
  )
  .delete('/:id', responds({ summary: 'Revoke an API key', ok: apiKeyObject }), async (c) => {
    const { db, now } = c.get('deps');
    const key = await revokeScopedApiKey(db, c.get('apiKey'), c.req.param('id'), now());
    return c.json(toApiKeyJson(key));
  });
