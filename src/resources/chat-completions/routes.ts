import { Hono } from 'hono';
import { listObject } from '../../http/lists';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { deletedObject, listOf } from '../../http/objects';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { passedThrough } from '../pass-through/route';
import { CHAT_COMPLETIONS } from './commands';
import { chatCompletionObject, storedCompletionObject, storedMessageObject } from './objects';
import { deleteStoredCompletion, getStoredCompletion, listStoredCompletions, updateStoredCompletion } from './queries';
import {
  createChatCompletionBody,
  listStoredCompletionsQuery,
  listStoredMessagesQuery,
  updateStoredCompletionBody,
} from './schemas';
import { storedMessagePage, toStoredCompletionJson } from './wire';

/**
 * /v1/chat/completions, in the workspace of workspace(): passed through to the provider of the
 * request's virtual key (commands.ts), its answer as the provider sent it; and the completions made
 * with `store: true`, kept by the gateway (stored.ts), listed, read, updated and deleted.
 */
export const chatCompletionRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .post(
    '/',
    responds({
      summary: 'Create a chat completion',
      ok: chatCompletionObject,
      stream: 'chat',
      errors: [429, 502, 504],
    }),
    validate('json', createChatCompletionBody),
    (c) => passedThrough(c, CHAT_COMPLETIONS, c.req.valid('json')),
  )
  .get(
    '/',
    responds({ summary: 'List stored chat completions', ok: listOf(storedCompletionObject) }),
    validate('query', listStoredCompletionsQuery),
    async (c) => {
      const page = await listStoredCompletions(c.get('deps').db, c.get('actor').workspaceId, c.req.valid('query'));
      return c.json(listObject(page, toStoredCompletionJson));
    },
  )
  .get(
    '/:completion_id',
    responds({ summary: 'Get a stored chat completion', ok: storedCompletionObject }),
    async (c) => {
      const row = await getStoredCompletion(c.get('deps').db, c.get('actor').workspaceId, c.req.param('completion_id'));
      return c.json(toStoredCompletionJson(row));
    },
  )
  .post(
    '/:completion_id',
    responds({ summary: "Update a stored chat completion's metadata", ok: storedCompletionObject }),
    validate('json', updateStoredCompletionBody),
    async (c) => {
      const row = await updateStoredCompletion(
        c.get('deps').db,
        c.get('actor').workspaceId,
        c.req.param('completion_id'),
        c.req.valid('json').metadata ?? {},
      );
      return c.json(toStoredCompletionJson(row));
    },
  )
  .delete(
    '/:completion_id',
    responds({ summary: 'Delete a stored chat completion', ok: deletedObject('chat.completion.deleted') }),
    async (c) => {
      const id = c.req.param('completion_id');
      await deleteStoredCompletion(c.get('deps').db, c.get('actor').workspaceId, id);
      return c.json({ id, object: 'chat.completion.deleted' as const, deleted: true as const });
    },
  )
  .get(
    '/:completion_id/messages',
    responds({ summary: "List a stored chat completion's messages", ok: listOf(storedMessageObject) }),
    validate('query', listStoredMessagesQuery),
    async (c) => {
      const row = await getStoredCompletion(c.get('deps').db, c.get('actor').workspaceId, c.req.param('completion_id'));
      return c.json(listObject(storedMessagePage(row, c.req.valid('query')), (message) => message));
    },
  );
