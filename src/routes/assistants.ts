import { Hono } from 'hono';
import type { AppEnv } from '../deps';
import { assistantsBeta } from '../middleware/assistants-beta';
import { validate } from '../middleware/validate';
import { virtualKey } from '../middleware/virtual-key';
import { workspace } from '../middleware/workspace';
import { createAssistantBody, cursorListQuery } from '../schemas/assistants';
import { createAssistant, deleteAssistant, getAssistant, listAssistants, toAssistantJson } from '../services/assistants';

/**
 * /v1/assistants, in the workspace of workspace(). Retrieving one needs `x-gateway-virtual-key`
 * as the seed says; creating, listing and deleting do not.
 */
export const assistantRoutes = new Hono<AppEnv>()
  .use(assistantsBeta(), workspace())
  .post('/', validate('json', createAssistantBody), async (c) => {
    const { db, now } = c.var.deps;
    const row = await createAssistant(db, c.var.workspace.workspaceId, c.req.valid('json'), now());
    return c.json(toAssistantJson(row));
  })
  .get('/', validate('query', cursorListQuery), async (c) => {
    const { rows, hasMore } = await listAssistants(c.var.deps.db, c.var.workspace.workspaceId, c.req.valid('query'));
    const data = rows.map(toAssistantJson);
    return c.json({
      object: 'list',
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: hasMore,
    });
  })
  .get('/:assistant_id', virtualKey(), async (c) => {
    const row = await getAssistant(c.var.deps.db, c.var.workspace.workspaceId, c.req.param('assistant_id'));
    return c.json(toAssistantJson(row));
  })
  .delete('/:assistant_id', async (c) => {
    const { db, now } = c.var.deps;
    const row = await deleteAssistant(db, c.var.workspace.workspaceId, c.req.param('assistant_id'), now());
    return c.json({ id: row.id, object: 'assistant.deleted', deleted: true });
  });
