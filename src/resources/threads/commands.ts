import type { Deps } from '../../deps';
import type { ApiError } from '../../errors';
import { holdsThread } from '../../db/run-statuses';
import { checkCodeAttachments } from './code-attachments';
import { checkImages } from '../files/images';
import { clientMessage, newThread } from './rows';
import type { ModifyThreadBody, ThreadInput, ThreadMessageInput } from './schemas';
import {
  deleteIdleThread,
  findThread,
  getThread,
  insertMessageWhileIdle,
  insertThread,
  messageWritten,
  openRunOf,
  setToolResources,
  threadHeld,
  threadNotFound,
  updateThread,
  type HoldingRun,
  type MessageRow,
  type OpenRun,
  type ThreadKey,
  type ThreadRow,
} from './queries';
import type { Actor, RequestContext } from '../../actor';
import type { RawStatement } from '../../db/client';
import type { Settings } from '../../db/settings-cache';
import { guardedWrite } from '../identities/middleware/api-key-auth';
import { wakeIngestion } from '../vector-stores/commands';
import { knownHistories } from './known-histories';
import { attachedFiles, NO_STORE_WRITES, threadStoreWrites } from './thread-stores';
import { checkToolResources, storedToolResources } from '../vector-stores/tool-resources';

/**
 * The thread and message use-cases that involve more than one query: creating a thread with its
 * messages, and the two writes a run holding the thread forbids (adding a message, deleting the
 * thread). The routes (resources/threads/routes.ts) validate, call one of these or one service, and answer.
 */

/**
 * What these use-cases use of the deps: a run left behind is settled on the way (ReconcileRun);
 * image parts are checked against the files (blobs); files for file_search go to the thread's
 * vector store (resources/vector-stores/thread-stores.ts).
 */
export type ThreadCommandDeps = Pick<
  Deps,
  'db' | 'now' | 'log' | 'counters' | 'config' | 'ingestion' | 'blobs' | 'sandbox' | 'metrics' | 'libraries'
>;

/**
 * The run that holds a thread as it really stands: settled first if it was left behind (its
 * executor gone, or waiting for tool outputs past its expiry). resources/runs/execution/recovery.ts's
 * reconcileRun, handed in by app.ts (through threadRoutes), since runs use threads and not the
 * other way round.
 */
export type ReconcileRun = (deps: ThreadCommandDeps, run: OpenRun) => Promise<NonNullable<HoldingRun>>;

/**
 * POST /v1/threads: the thread and its messages, with the vector store its tool_resources create
 * and its messages' file_search attachments fill, in one transaction.
 */
export async function createThread(
  deps: ThreadCommandDeps,
  settings: Settings,
  actor: Actor,
  body: ThreadInput,
  context: RequestContext,
): Promise<ThreadRow> {
  const at = deps.now();
  const thread = newThread(
    actor.workspaceId,
    { metadata: body.metadata, tool_resources: storedToolResources(body.tool_resources) },
    at,
  );
  await checkToolResources(deps.db, actor.workspaceId, thread.toolResources, 'tool_resources');
  const messages = (body.messages ?? []).map((message, index) =>
    clientMessage(thread, message, `messages[${index}]`, at),
  );
  await checkImages(deps, actor.workspaceId, body.messages ?? [], (index) => `messages[${index}].`);
  await checkCodeAttachments(deps, actor.workspaceId, body.messages ?? [], (index) => `messages[${index}].`);
  const stores = await threadStoreWrites(deps, actor, thread, {
    inline: body.tool_resources?.file_search?.vector_stores?.[0],
    attached: attachedFiles(body.messages ?? [], (index) => `messages[${index}].`),
  });
  if (stores.toolResources) thread.toolResources = stores.toolResources;
  await guardedWrite(settings, (guard) => insertThread(deps.db, thread, messages, stores.statements, guard));
  knownHistories(deps.db)?.wrote(thread, messages, true);
  if (stores.queued) wakeIngestion(deps, context);
  return thread;
}

/**
 * POST /v1/threads/{thread_id}: the fields sent replace the stored ones; the vector stores and files
 * that tool_resources name are the workspace's (404 naming the field otherwise; an unknown thread
 * is the answer first).
 */
export async function modifyThread(
  deps: ThreadCommandDeps,
  settings: Settings,
  workspaceId: string,
  threadId: string,
  body: ModifyThreadBody,
): Promise<ThreadRow> {
  if (body.tool_resources) {
    await getThread(deps.db, workspaceId, threadId);
    await checkToolResources(deps.db, workspaceId, body.tool_resources, 'tool_resources');
  }
  return guardedWrite(settings, (guard) => updateThread(deps.db, workspaceId, threadId, body, guard));
}

/**
 * POST /v1/threads/{thread_id}/messages: refused with 400 `thread_has_active_run` while a run holds the
 * thread, in OpenAI's words.
 */
export async function createMessage(
  deps: ThreadCommandDeps,
  reconcileRun: ReconcileRun,
  settings: Settings,
  actor: Actor,
  threadId: string,
  body: ThreadMessageInput,
  context: RequestContext,
): Promise<MessageRow> {
  const attached = attachedFiles([body], () => '');
  // A message with no file for file_search needs nothing of its thread but its name: the insert's
  // condition checks that the thread is the workspace's and idle, so the message is written in one
  // round trip to the database; whileIdle tells a missing thread (404) from a held one.
  const thread = attached.length > 0 ? await getThread(deps.db, actor.workspaceId, threadId) : null;
  const message = clientMessage(thread ?? { id: threadId, workspaceId: actor.workspaceId }, body, '', deps.now());
  await checkImages(deps, actor.workspaceId, [body], () => '');
  await checkCodeAttachments(deps, actor.workspaceId, [body], () => '');
  // Its file_search attachments go to the thread's store (created if it has none), only if it is written.
  const written = messageWritten(message.id);
  const stores = thread ? await threadStoreWrites(deps, actor, thread, { attached }, written) : NO_STORE_WRITES;
  const extra = [
    ...stores.statements,
    ...(stores.toolResources ? [setToolResources(deps.db, message.threadId, stores.toolResources, written)] : []),
  ];
  const insert = (guard: RawStatement | null) =>
    whileIdle(
      deps,
      reconcileRun,
      { id: message.threadId, workspaceId: message.workspaceId },
      () => insertMessageWhileIdle(deps.db, message, extra, guard),
      (run) => `Can't add messages to ${message.threadId} while a run${run ? ` ${run.id}` : ''} is active.`,
    );
  // On settings assumed unchanged, the insert is led by their guard: one round trip when they hold.
  const row = await guardedWrite(settings, insert);
  knownHistories(deps.db)?.wrote({ id: message.threadId, workspaceId: message.workspaceId }, [row], false);
  if (stores.queued) wakeIngestion(deps, context);
  return row;
}

/**
 * DELETE /v1/threads/{thread_id}: the thread with its messages, runs and run steps, in one
 * transaction led by the settings' guard (nothing read first). Refused with 400
 * `thread_has_active_run` while a run holds the thread, as a message is: deleting the thread under a
 * run would leave it executing into rows that are gone. Cancel the run first. A missing thread is
 * `notFound`'s 404 (a conversation's names it so).
 */
export async function deleteThread(
  deps: ThreadCommandDeps,
  reconcileRun: ReconcileRun,
  settings: Settings,
  thread: ThreadKey,
  notFound: (id: string) => ApiError = threadNotFound,
): Promise<void> {
  await guardedWrite(settings, (guard) =>
    whileIdle(
      deps,
      reconcileRun,
      thread,
      async () => ((await deleteIdleThread(deps.db, thread, guard)) ? true : null),
      (run) => `Can't delete ${thread.id} while a run${run ? ` ${run.id}` : ''} is active.`,
      notFound,
    ),
  );
  knownHistories(deps.db)?.forget(thread.id);
}

/** How often a write refused for a run that then turned out to have ended is tried again. */
const ATTEMPTS = 3;

/**
 * Runs `write`, a single statement that writes nothing while a run holds the thread (answering
 * null then), so that the check and the write cannot be separated by a run's admission. When it
 * wrote nothing: a run left behind (its executor gone, or waiting for tool outputs past its
 * expiry) is settled first, as any read of it would, and the write tried again, so such a run
 * never blocks its thread for ever; a run really active refuses the write, named in the 400; a
 * thread missing or deleted in the meantime is a 404 (`notFound`'s: a conversation's names it so).
 */
export async function whileIdle<T>(
  deps: ThreadCommandDeps,
  reconcileRun: ReconcileRun,
  thread: ThreadKey,
  write: () => Promise<T | null>,
  refusal: (run: HoldingRun) => string,
  notFound: (id: string) => ApiError = threadNotFound,
): Promise<T> {
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    const written = await write();
    if (written !== null) return written;
    // The thread is not the workspace's, or is gone: 404, before anything of its runs is looked at.
    if (!(await findThread(deps.db, thread.workspaceId, thread.id))) throw notFound(thread.id);
    const run = await openRunOf(deps.db, thread.id);
    // The run that held it ended between the two statements.
    if (run === null) continue;
    const current = await reconcileRun(deps, run);
    if (holdsThread(current.status)) throw threadHeld(refusal(current), thread.id, current);
  }
  // Runs kept starting and ending between each write and its check: refuse, as OpenAI would.
  throw threadHeld(refusal(null), thread.id, null);
}
