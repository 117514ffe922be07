import { Hono, type Context } from 'hono';
import { changesSettings } from '../../http/middleware/changes-settings';
import { validate } from '../../http/middleware/validate';
import { createVirtualKeyBody, listVirtualKeysQuery, revokeVirtualKeyQuery, updateVirtualKeyBody } from './schemas';
import { upstreamRules } from './upstream-rules';
import { createVirtualKey, listVirtualKeys, revokeVirtualKey, updateVirtualKey } from './commands';
import { resolveWorkspaceScope } from '../identities/workspaces';
import { toVirtualKeyJson } from './wire';
import type { ApiEnv } from '../identities/env';
import { responds } from '../../http/middleware/responds';
import { virtualKeyList, virtualKeyObject } from './objects';

/** The workspace a write acts on: an organisation key must name it (resolveWorkspaceScope throws otherwise). */
async function workspaceOf(c: Context<ApiEnv>, ref: string | undefined): Promise<string> {
  const scope = await resolveWorkspaceScope(c.get('deps').db, c.get('apiKey'), ref, { required: true });
  if (!scope) throw new Error('resolveWorkspaceScope answered no workspace where one is required');
  return scope.workspaceId;
}

/**
 * /v1/virtual-keys: a workspace key acts on its workspace; an organisation key names `workspace_id`.
 * An update is OpenAI's `POST /{id}`, here by slug; PATCH is accepted too, as REST clients send it.
 */
export const virtualKeyRoutes = new Hono<ApiEnv>()
  .use(changesSettings())
  .get(
    '/',
    responds({ summary: 'List virtual keys', ok: virtualKeyList, errors: [403] }),
    validate('query', listVirtualKeysQuery),
    async (c) => {
      const query = c.req.valid('query');
      const { db } = c.get('deps');
      const scope = await resolveWorkspaceScope(db, c.get('apiKey'), query.workspace_id, { required: false });
      const keys = await listVirtualKeys(db, {
        organisationId: c.get('apiKey').organisationId,
        workspaceId: scope?.workspaceId,
        includeRevoked: query.include_revoked,
      });
      return c.json({ object: 'list', data: keys.map(toVirtualKeyJson) });
    },
  )
  .post(
    '/',
    responds({ summary: 'Create a virtual key', ok: virtualKeyObject, errors: [403, 409] }),
    validate('json', createVirtualKeyBody),
    async (c) => {
      const body = c.req.valid('json');
      const { db, secrets, config, now } = c.get('deps');
      const key = await createVirtualKey(db, secrets, {
        workspaceId: await workspaceOf(c, body.workspace_id),
        body,
        upstreamRules: await upstreamRules(db, config, { now: now(), fresh: true }),
        maxKeys: config.GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE,
        now: now(),
      });
      return c.json(toVirtualKeyJson(key));
    },
  )
  .on(
    ['POST', 'PATCH'],
    '/:slug',
    responds({ summary: 'Update a virtual key', ok: virtualKeyObject, errors: [403, 409] }),
    validate('json', updateVirtualKeyBody),
    async (c) => {
      const body = c.req.valid('json');
      const { db, secrets, config, now } = c.get('deps');
      const key = await updateVirtualKey(db, secrets, {
        workspaceId: await workspaceOf(c, body.workspace_id),
        slug: c.req.param('slug'),
        body,
        upstreamRules: await upstreamRules(db, config, { now: now(), fresh: true }),
      });
      return c.json(toVirtualKeyJson(key));
    },
  )
  .delete(
    '/:slug',
    responds({ summary: 'Revoke a virtual key', ok: virtualKeyObject, errors: [403] }),
    validate('query', revokeVirtualKeyQuery),
    async (c) => {
      const { db, now } = c.get('deps');
      const query = c.req.valid('query');
      const key = await revokeVirtualKey(db, await workspaceOf(c, query.workspace_id), c.req.param('slug'), now());
      return c.json(toVirtualKeyJson(key));
    },
  );
