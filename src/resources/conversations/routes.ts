import { Hono } from 'hono';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { deletedObject } from '../../http/objects';
import type { ApiEnv, WorkspaceEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import type { ReconcileRun } from '../threads/commands';
import {
  addItems,
  createConversation,
  deleteConversation,
  deleteItem,
  listConversationItems,
  retrieveConversationItem,
  updateConversation,
} from './commands';
import { conversationItem, conversationItemList, conversationObject } from './objects';
import { getConversation } from './queries';
import {
  createConversationBody,
  createItemsBody,
  includeQuery,
  includesOf,
  listItemsQuery,
  updateConversationBody,
} from './schemas';
import { toConversationJson, toItemList } from './wire';

/**
 * /v1/conversations: conversations and their items, in the workspace of workspace(). A
 * conversation is a thread (any thread of the workspace, `conv_…` or `thread_…`); a run left
 * behind is settled by `reconcileRun` before a write it would refuse, as under /v1/threads.
 */
export const conversationRoutes = (reconcileRun: ReconcileRun) =>
  new Hono<ApiEnv>().use(workspace()).route(
    '/',
    new Hono<WorkspaceEnv>()
      .post(
        '/',
        responds({ summary: 'Create a conversation', ok: conversationObject }),
        validate('json', createConversationBody),
        async (c) => {
          const thread = await createConversation(
            c.get('deps'),
            c.get('settings'),
            c.get('actor'),
            c.req.valid('json'),
          );
          return c.json(toConversationJson(thread));
        },
      )
      .get('/:conversation_id', responds({ summary: 'Retrieve a conversation', ok: conversationObject }), async (c) => {
        const thread = await getConversation(
          c.get('deps').db,
          c.get('actor').workspaceId,
          c.req.param('conversation_id'),
        );
        return c.json(toConversationJson(thread));
      })
      .post(
        '/:conversation_id',
        responds({ summary: 'Update a conversation', ok: conversationObject }),
        validate('json', updateConversationBody),
        async (c) => {
          const thread = await updateConversation(
            c.get('deps'),
            c.get('settings'),
            c.get('actor').workspaceId,
            c.req.param('conversation_id'),
            c.req.valid('json'),
          );
          return c.json(toConversationJson(thread));
        },
      )
      .delete(
        '/:conversation_id',
        responds({ summary: 'Delete a conversation', ok: deletedObject('conversation.deleted') }),
        async (c) => {
          const id = c.req.param('conversation_id');
          await deleteConversation(c.get('deps'), reconcileRun, c.get('settings'), c.get('actor').workspaceId, id);
          return c.json({ id, object: 'conversation.deleted' as const, deleted: true as const });
        },
      )
      .post(
        '/:conversation_id/items',
        responds({ summary: 'Create conversation items', ok: conversationItemList }),
        validate('query', includeQuery),
        validate('json', createItemsBody),
        async (c) => {
          const data = await addItems(
            c.get('deps'),
            reconcileRun,
            c.get('settings'),
            c.get('actor'),
            c.req.param('conversation_id'),
            c.req.valid('json').items,
          );
          return c.json(toItemList(data, false));
        },
      )
      .get(
        '/:conversation_id/items',
        responds({ summary: 'List conversation items', ok: conversationItemList }),
        validate('query', listItemsQuery),
        async (c) => {
          const query = c.req.valid('query');
          const { workspaceId } = c.get('actor');
          const id = c.req.param('conversation_id');
          return c.json(await listConversationItems(c.get('deps').db, workspaceId, id, query, includesOf(query)));
        },
      )
      .get(
        '/:conversation_id/items/:item_id',
        responds({ summary: 'Retrieve a conversation item', ok: conversationItem }),
        validate('query', includeQuery),
        async (c) => {
          const { conversation_id: id, item_id: itemId } = c.req.param();
          const include = includesOf(c.req.valid('query'));
          return c.json(
            await retrieveConversationItem(c.get('deps').db, c.get('actor').workspaceId, id, itemId, include),
          );
        },
      )
      .delete(
        '/:conversation_id/items/:item_id',
        responds({ summary: 'Delete a conversation item', ok: conversationObject }),
        async (c) => {
          const { conversation_id: id, item_id: itemId } = c.req.param();
          const { deps, settings, actor } = c.var;
          return c.json(toConversationJson(await deleteItem(deps.db, settings, actor.workspaceId, id, itemId)));
        },
      ),
  );
