import { Hono } from 'hono';
import { changesSettings } from '../../http/middleware/changes-settings';
import { assistantsBeta } from '../../http/middleware/assistants-beta';
import { validate } from '../../http/middleware/validate';
import { workspace } from '../identities/middleware/workspace';
import { createAssistantBody, modifyAssistantBody } from './schemas';
import { cursorListQuery } from '../../http/schemas';
import { createAssistant, modifyAssistant } from './commands';
import { deleteAssistant, listAssistants } from './queries';
import { toAssistantJson } from './wire';
import { listObject } from '../../http/lists';
import type { ApiEnv } from '../identities/env';
import { requestContext } from '../../http/request-context';
import { responds } from '../../http/middleware/responds';
import { deletedObject, listOf } from '../../http/objects';
import { assistantObject } from './objects';

/**
 * /v1/assistants, in the workspace of workspace(). Retrieving one needs a virtual key that would
 * execute its runs (the gateway's API has always asked for one there), resolved as a run of the
 * assistant's model resolves it; creating and modifying need one only for the vector store their
 * tool_resources create (its embeddings), listing and deleting never.
 */
export const assistantRoutes = new Hono<ApiEnv>()
  .use(assistantsBeta(), workspace(), changesSettings())
  .post(
    '/',
    responds({ summary: 'Create an assistant', ok: assistantObject }),
    validate('json', createAssistantBody),
    async (c) => {
      const row = await createAssistant(c.get('deps'), c.get('actor'), c.req.valid('json'), requestContext(c));
      return c.json(toAssistantJson(row));
    },
  )
  .get(
    '/',
    responds({ summary: 'List assistants', ok: listOf(assistantObject) }),
    validate('query', cursorListQuery),
    async (c) => {
      const page = await listAssistants(c.get('deps').db, c.get('actor').workspaceId, c.req.valid('query'));
      return c.json(listObject(page, toAssistantJson));
    },
  )
  .get('/:assistant_id', responds({ summary: 'Retrieve an assistant', ok: assistantObject }), async (c) => {
    // From the settings as of this request (db/settings-cache.ts): no round trip of their own when unchanged.
    const settings = c.get('settings');
    const { workspaceId, virtualKeySlug } = c.get('actor');
    const row = await settings.assistant(workspaceId, c.req.param('assistant_id'));
    await settings.virtualKey(workspaceId, { slug: virtualKeySlug, model: row.model });
    return c.json(toAssistantJson(row));
  })
  .post(
    '/:assistant_id',
    responds({ summary: 'Modify an assistant', ok: assistantObject }),
    validate('json', modifyAssistantBody),
    async (c) => {
      const row = await modifyAssistant(
        c.get('deps'),
        c.get('actor'),
        c.req.param('assistant_id'),
        c.req.valid('json'),
        requestContext(c),
      );
      return c.json(toAssistantJson(row));
    },
  )
  .delete(
    '/:assistant_id',
    responds({ summary: 'Delete an assistant', ok: deletedObject('assistant.deleted') }),
    async (c) => {
      const { db, now } = c.get('deps');
      const row = await deleteAssistant(db, c.get('actor').workspaceId, c.req.param('assistant_id'), now());
      return c.json({ id: row.id, object: 'assistant.deleted', deleted: true });
    },
  );
