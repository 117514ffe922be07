import { Hono } from 'hono';
import { assistantsBeta } from '../../http/middleware/assistants-beta';
import { validate } from '../../http/middleware/validate';
import { workspace } from '../identities/middleware/workspace';
import { guardedWrite } from '../identities/middleware/api-key-auth';
import {
  createMessageBody,
  createThreadBody,
  listMessagesQuery,
  listThreadsQuery,
  modifyMessageBody,
  modifyThreadBody,
} from './schemas';
import { deleteMessage, getMessage, getThread, listMessages, listThreads, modifyMessage } from './queries';
import { createMessage, createThread, deleteThread, modifyThread, type ReconcileRun } from './commands';
import { listObject } from '../../http/lists';
import { besideRow } from '../../db/client';
import { toMessageJson, toThreadJson } from './wire';
import type { ApiEnv, WorkspaceEnv } from '../identities/env';
import { requestContext } from '../../http/request-context';
import { responds } from '../../http/middleware/responds';
import { deletedObject, listOf } from '../../http/objects';
import { messageObject, threadObject } from './objects';

/** Threads and their messages, under /v1/threads; a run left behind is settled by `reconcileRun` (commands.ts). */
const threadAndMessageRoutes = (reconcileRun: ReconcileRun) =>
  new Hono<WorkspaceEnv>()
    .post(
      '/',
      responds({ summary: 'Create a thread', ok: threadObject }),
      validate('json', createThreadBody),
      async (c) => {
        const thread = await createThread(
          c.get('deps'),
          c.get('settings'),
          c.get('actor'),
          c.req.valid('json'),
          requestContext(c),
        );
        return c.json(toThreadJson(thread));
      },
    )
    // A gateway extension, for the console: OpenAI lists no threads.
    .get(
      '/',
      responds({ summary: "List the workspace's threads", ok: listOf(threadObject) }),
      validate('query', listThreadsQuery),
      async (c) => {
        const page = await listThreads(c.get('deps').db, c.get('actor').workspaceId, c.req.valid('query'));
        return c.json(listObject(page, toThreadJson));
      },
    )
    .get('/:thread_id', responds({ summary: 'Retrieve a thread', ok: threadObject }), async (c) => {
      const thread = await getThread(c.get('deps').db, c.get('actor').workspaceId, c.req.param('thread_id'));
      return c.json(toThreadJson(thread));
    })
    .post(
      '/:thread_id',
      responds({ summary: 'Modify a thread', ok: threadObject }),
      validate('json', modifyThreadBody),
      async (c) => {
        const thread = await modifyThread(
          c.get('deps'),
          c.get('settings'),
          c.get('actor').workspaceId,
          c.req.param('thread_id'),
          c.req.valid('json'),
        );
        return c.json(toThreadJson(thread));
      },
    )
    .delete('/:thread_id', responds({ summary: 'Delete a thread', ok: deletedObject('thread.deleted') }), async (c) => {
      const id = c.req.param('thread_id');
      await deleteThread(c.get('deps'), reconcileRun, c.get('settings'), {
        id,
        workspaceId: c.get('actor').workspaceId,
      });
      return c.json({ id, object: 'thread.deleted', deleted: true });
    })
    .get(
      '/:thread_id/messages',
      responds({ summary: 'List messages', ok: listOf(messageObject) }),
      validate('query', listMessagesQuery),
      async (c) => {
        const { db } = c.get('deps');
        const threadId = c.req.param('thread_id');
        // The page, by the path's id, is answered only once the thread is the workspace's.
        const [, page] = await besideRow(
          getThread(db, c.get('actor').workspaceId, threadId),
          listMessages(db, threadId, c.req.valid('query')),
        );
        return c.json(listObject(page, toMessageJson));
      },
    )
    .post(
      '/:thread_id/messages',
      responds({ summary: 'Create a message', ok: messageObject }),
      validate('json', createMessageBody),
      async (c) => {
        const message = await createMessage(
          c.get('deps'),
          reconcileRun,
          c.get('settings'),
          c.get('actor'),
          c.req.param('thread_id'),
          c.req.valid('json'),
          requestContext(c),
        );
        return c.json(toMessageJson(message));
      },
    )
    .get(
      '/:thread_id/messages/:message_id',
      responds({ summary: 'Retrieve a message', ok: messageObject }),
      async (c) => {
        const { thread_id: threadId, message_id: messageId } = c.req.param();
        return c.json(
          toMessageJson(await getMessage(c.get('deps').db, c.get('actor').workspaceId, threadId, messageId)),
        );
      },
    )
    .post(
      '/:thread_id/messages/:message_id',
      responds({ summary: 'Modify a message', ok: messageObject }),
      validate('json', modifyMessageBody),
      async (c) => {
        const { thread_id: threadId, message_id: messageId } = c.req.param();
        const body = c.req.valid('json');
        const message = await guardedWrite(c.get('settings'), (guard) =>
          modifyMessage(c.get('deps').db, c.get('actor').workspaceId, threadId, messageId, body, guard),
        );
        return c.json(toMessageJson(message));
      },
    )
    .delete(
      '/:thread_id/messages/:message_id',
      responds({ summary: 'Delete a message', ok: deletedObject('thread.message.deleted') }),
      async (c) => {
        const { thread_id: threadId, message_id: messageId } = c.req.param();
        await guardedWrite(c.get('settings'), (guard) =>
          deleteMessage(c.get('deps').db, c.get('actor').workspaceId, threadId, messageId, guard),
        );
        return c.json({ id: messageId, object: 'thread.message.deleted', deleted: true });
      },
    );

/**
 * /v1/threads: threads, their messages and their runs, in the workspace of workspace(). The runs'
 * routes (resources/runs/routes.ts) and their recovery's reconcileRun are handed in by app.ts,
 * since runs use threads and not the other way round. The runs' routes go first: `POST /runs`
 * (createAndRun) must not be taken for a thread whose id is "runs".
 */
export const threadRoutes = (runRoutes: Hono<WorkspaceEnv>, reconcileRun: ReconcileRun) =>
  new Hono<ApiEnv>()
    .use(assistantsBeta(), workspace())
    .route('/', runRoutes)
    .route('/', threadAndMessageRoutes(reconcileRun));
