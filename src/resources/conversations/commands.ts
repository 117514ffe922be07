import { batchRawResults, besideRow, insertWhereStatement, type Db, type RawStatement } from '../../db/client';
import type { Settings } from '../../db/settings-cache';
import { messages } from '../../db/schema';
import type { Actor } from '../../actor';
import { ApiError } from '../../errors';
import { deleteThread, whileIdle, type ReconcileRun, type ThreadCommandDeps } from '../threads/commands';
import {
  deleteMessage,
  insertThread,
  threadIdle,
  updateThread,
  type ThreadKey,
  type ThreadRow,
} from '../threads/queries';
import { newThread } from '../threads/rows';
import { textMessage, threadItemWrites, type ThreadItemWrites } from './items';
import type { ConversationItem, ConversationItemList } from './objects';
import { conversationNotFound, forgetReasoning, getConversation, outputStatements } from './queries';
import type { CreateConversationBody, InputItem, ItemInclude, UpdateConversationBody } from './schemas';
import { getItem, listItems, type ItemPageQuery } from './thread-items';
import { knownHistories } from '../threads/known-histories';
import { guardedWrite, liveBeside } from '../identities/middleware/api-key-auth';
import { toMessageItem, toolItemId, parseReasoningItemId, parseToolItemId } from './wire';

/**
 * The conversations' use-cases: a conversation is a thread (resources/threads/), created with the
 * `conv_` prefix, and any thread of the workspace is a conversation. Items are written as the
 * thread's messages and its tool steps' outputs (items.ts), refused while a run holds the thread,
 * as the thread's messages are (threads/commands.ts, whileIdle).
 */

/**
 * GET /v1/conversations/{id}/items: a page of its items (listItems), read beside the conversation,
 * by the path's id (one round trip less to a database server): looked at only once the
 * conversation is found the workspace's, whose 404 comes first.
 */
export async function listConversationItems(
  db: Db,
  workspaceId: string,
  id: string,
  query: ItemPageQuery,
  include: readonly ItemInclude[],
): Promise<ConversationItemList> {
  return besideConversation(db, workspaceId, id, listItems(db, { id, workspaceId }, query, include));
}

/** GET /v1/conversations/{id}/items/{item_id}: the item (getItem), read beside the conversation, as listConversationItems. */
export async function retrieveConversationItem(
  db: Db,
  workspaceId: string,
  id: string,
  itemId: string,
  include: readonly ItemInclude[],
): Promise<ConversationItem> {
  return besideConversation(db, workspaceId, id, getItem(db, { id, workspaceId }, itemId, include));
}

async function besideConversation<T>(db: Db, workspaceId: string, id: string, read: Promise<T>): Promise<T> {
  const [, found] = await besideRow(getConversation(db, workspaceId, id), read);
  return found;
}

/** POST /v1/conversations: the thread and its first items, in one transaction. */
export async function createConversation(
  deps: ThreadCommandDeps,
  settings: Settings,
  actor: Actor,
  body: CreateConversationBody,
): Promise<ThreadRow> {
  const at = deps.now();
  const thread = newThread(actor.workspaceId, { metadata: body.metadata }, at, 'conv');
  // A new thread has no calls: an output or a reference among the items is refused here.
  const writes = await threadItemWrites(deps, thread, body.items ?? [], 'items', at);
  await guardedWrite(settings, (guard) => insertThread(deps.db, thread, writes.messages, [], guard));
  // Its first response can be made without reading it (responses/commands.ts, responseInOneTrip).
  knownHistories(deps.db)?.wrote(thread, writes.messages, true);
  return thread;
}

/** POST /v1/conversations/{conversation_id}: the metadata replaces the stored one. */
export async function updateConversation(
  deps: Pick<ThreadCommandDeps, 'db'>,
  settings: Settings,
  workspaceId: string,
  id: string,
  body: UpdateConversationBody,
): Promise<ThreadRow> {
  return guardedWrite(settings, (guard) =>
    updateThread(deps.db, workspaceId, id, { metadata: body.metadata }, guard, conversationNotFound),
  );
}

/** DELETE /v1/conversations/{conversation_id}: the thread with what it holds, as DELETE /v1/threads/{id}. */
export async function deleteConversation(
  deps: ThreadCommandDeps,
  reconcileRun: ReconcileRun,
  settings: Settings,
  workspaceId: string,
  id: string,
): Promise<void> {
  await deleteThread(deps, reconcileRun, settings, { id, workspaceId }, conversationNotFound);
}

/**
 * POST /v1/conversations/{conversation_id}/items: the items, in one transaction, while no run holds
 * the thread (400 thread_has_active_run otherwise); answers those written, in order. Text messages
 * need nothing read: the write's condition finds the conversation (one round trip to a database
 * server). Other items are checked by reads made beside the conversation's, whose 404 comes first.
 */
export async function addItems(
  deps: ThreadCommandDeps,
  reconcileRun: ReconcileRun,
  settings: Settings,
  actor: Actor,
  id: string,
  items: readonly InputItem[],
): Promise<ConversationItem[]> {
  const thread = { id, workspaceId: actor.workspaceId };
  const checked = threadItemWrites(deps, thread, items, 'items', deps.now());
  const writes = items.every(textMessage)
    ? await checked
    : await besideConversation(deps.db, thread.workspaceId, id, checked);
  await guardedWrite(settings, (guard) =>
    whileIdle(
      deps,
      reconcileRun,
      thread,
      () => writeWhileIdle(deps.db, thread, writes, guard),
      (run) => `Can't add items to ${id} while a run${run ? ` ${run.id}` : ''} is active.`,
      conversationNotFound,
    ),
  );
  // Outputs fill in calls, which a history known here never has: such a thread is read again.
  if (writes.outputs.length > 0) knownHistories(deps.db)?.forget(thread.id);
  else knownHistories(deps.db)?.wrote(thread, writes.messages, false);
  const none = new Map<string, string>();
  return writes.added.map(({ message, output }): ConversationItem => {
    if (message) return toMessageItem(message, none);
    return {
      type: 'function_call_output',
      id: toolItemId('fco', output.stepId, output.index),
      call_id: output.callId,
      output: output.output,
      status: 'completed',
    };
  });
}

/**
 * The writes of items, each only while the thread exists and no run holds it (one transaction:
 * all or none); true once written, null when a run held the thread (whileIdle then finds out why).
 */
async function writeWhileIdle(
  db: Db,
  thread: ThreadKey,
  writes: ThreadItemWrites,
  guard: RawStatement | null,
): Promise<true | null> {
  const condition = threadIdle(thread);
  const statements = [
    ...writes.messages.map((message) => insertWhereStatement(messages, message, condition, { returning: false })),
    ...outputStatements(writes.outputs, condition),
  ];
  if (statements.length === 0) return true;
  // While a run holds the thread every statement writes nothing; otherwise each message is written
  // (an output filled by a concurrent request in the meantime is kept, and this one dropped). The
  // guard (the settings', led) writes nothing when it holds.
  const results = await batchRawResults(db, guard ? [guard, ...statements] : statements);
  return results.some((result) => result.rowsAffected > 0) ? true : null;
}

/**
 * DELETE /v1/conversations/{conversation_id}/items/{item_id}: a message is deleted from the thread,
 * as DELETE …/messages/{id} deletes it; a reasoning item is forgotten by its step. A tool call or output is refused: it is one entry of its
 * run step, the ids of the step's later calls are their indices, and a call left without its
 * output (or an output without its call) is a prompt providers refuse.
 */
export async function deleteItem(
  db: Db,
  settings: Settings,
  workspaceId: string,
  id: string,
  itemId: string,
): Promise<ThreadRow> {
  // The conversation and its item read side by side, and on settings assumed unchanged whether the
  // key is live with them (one round trip to a database server), asked before anything is told.
  const [thread] = await liveBeside(
    settings,
    besideRow(getConversation(db, workspaceId, id), getItem(db, { id, workspaceId }, itemId, [])),
  );
  if (parseToolItemId(itemId)) {
    throw new ApiError(
      'invalid_value',
      `Invalid 'item_id': '${itemId}' is a tool call or its output, which is part of a run step and cannot be deleted alone. Delete the conversation's messages, or the conversation.`,
      { param: 'item_id' },
    );
  }
  const reasoned = parseReasoningItemId(itemId);
  if (reasoned !== null) await forgetReasoning(db, thread, reasoned);
  else await deleteMessage(db, workspaceId, thread.id, itemId);
  return thread;
}
