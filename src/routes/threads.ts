import { Hono } from 'hono';
import { assistantsBeta } from '../middleware/assistants-beta';
import { validate } from '../middleware/validate';
import { workspace } from '../middleware/workspace';
import { listMessagesQuery } from '../schemas/threads';
import { getThread, listMessages } from '../services/threads';
import { listObject } from '../wire/lists';
import { toMessageJson, toThreadJson } from '../wire/threads';
import type { ApiEnv, WorkspaceEnv } from './env';
import { runRoutes } from './runs';

/** Threads and their messages, under /v1/threads. */
const threadAndMessageRoutes = new Hono<WorkspaceEnv>()
  .get('/:thread_id', async (c) => {
    const thread = await getThread(c.var.deps.db, c.var.workspace.workspaceId, c.req.param('thread_id'));
    return c.json(toThreadJson(thread));
  })
  .get('/:thread_id/messages', validate('query', listMessagesQuery), async (c) => {
    const { db } = c.var.deps;
    const thread = await getThread(db, c.var.workspace.workspaceId, c.req.param('thread_id'));
    return c.json(listObject(await listMessages(db, thread.id, c.req.valid('query')), toMessageJson));
  });

/**
 * /v1/threads: threads, their messages and their runs, in the workspace of workspace(). The run
 * routes go first: `POST /runs` (createAndRun) must not be taken for a thread whose id is "runs".
 */
export const threadRoutes = new Hono<ApiEnv>()
  .use(assistantsBeta(), workspace())
  .route('/', runRoutes)
  .route('/', threadAndMessageRoutes);
