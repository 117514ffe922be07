import type { Db } from '../../db/client';
import { ApiError } from '../../errors';
import type { ThreadKey } from '../threads/queries';
import { timeline } from '../threads/timeline';
import type { ConversationItem, ConversationItemList } from './objects';
import { itemOrderRows, itemRows, type ItemRows, type OrderStep } from './queries';
import type { ItemInclude } from './schemas';
import {
  parseReasoningItemId,
  parseToolItemId,
  reasoningItem,
  reasoningItemId,
  toItemList,
  toMessageItem,
  toolItem,
  toolItemId,
} from './wire';

/**
 * A thread as a conversation's items, in the order its runs' prompts give the model
 * (threads/timeline.ts): its messages, and its runs' tool calls (completed, or waiting for their
 * outputs) with the outputs given so far, each message or tool step after the model's reasoning
 * before it, when it was kept. The order is found from light rows (ids, times, which
 * message a step created, its calls' types), all of the thread's for every page, since an item's
 * place depends on steps anywhere in it; only a page's rows are then read whole.
 */

/** Where an item comes from: a message, call `index` of a tool step (the call, or its output), or a step's reasoning. */
type ItemRef =
  | { id: string; messageId: string }
  | { id: string; stepId: string; index: number; which: 'call' | 'output' }
  | { id: string; stepId: string; which: 'reasoning' };

/** Every item of the thread, oldest first, by reference. */
async function itemRefs(db: Db, thread: ThreadKey): Promise<ItemRef[]> {
  const order = await itemOrderRows(db, thread);
  const placed = order.steps.filter(
    (step) =>
      step.messageId !== null ||
      ((step.status === 'completed' || step.status === 'in_progress') && step.calls.length > 0),
  );
  // A message's reasoning is its step's: the steps that created messages are not placed themselves.
  const reasonedBefore = new Map<string, string>();
  for (const step of order.steps)
    if (step.messageId !== null && step.reasoning === 1) reasonedBefore.set(step.messageId, step.id);
  return timeline(order.messages, placed, (step) => step.messageId).flatMap((entry): ItemRef[] => {
    if (entry.step)
      return [...reasoningRefs(entry.step.reasoning === 1 ? entry.step.id : undefined), ...stepRefs(entry.step)];
    const { id } = entry.message;
    return [...reasoningRefs(reasonedBefore.get(id)), { id, messageId: id }];
  });
}

/** The reasoning item before the step `stepId`, if it has one. */
function reasoningRefs(stepId: string | undefined): ItemRef[] {
  return stepId === undefined ? [] : [{ id: reasoningItemId(stepId), stepId, which: 'reasoning' }];
}

/** A tool step's items: its calls, then the outputs given (wire.ts, toolStepItems, in the same order). */
function stepRefs(step: OrderStep): ItemRef[] {
  const calls = step.calls.map(([type], index): ItemRef => ({
    id: toolItemId(type === 'file_search' ? 'fs' : type === 'code_interpreter' ? 'ci' : 'fc', step.id, index),
    stepId: step.id,
    index,
    which: 'call',
  }));
  const outputs = step.calls.flatMap(([type, hasOutput], index): ItemRef[] =>
    type === 'function' && hasOutput === 1
      ? [{ id: toolItemId('fco', step.id, index), stepId: step.id, index, which: 'output' }]
      : [],
  );
  return [...calls, ...outputs];
}

/**
 * The items `refs` names, read whole, in the same order (one left out if it went in the meantime).
 * `read`: rows read already (beside the items' order), of which those named are not read again.
 */
async function itemsOf(
  db: Db,
  thread: ThreadKey,
  refs: readonly ItemRef[],
  include: readonly ItemInclude[],
  read?: ItemRows,
): Promise<ConversationItem[]> {
  const messageIds = refs.flatMap((ref) =>
    'messageId' in ref && !read?.messages.has(ref.messageId) ? [ref.messageId] : [],
  );
  const stepIds = [
    ...new Set(refs.flatMap((ref) => ('stepId' in ref && !read?.steps.has(ref.stepId) ? [ref.stepId] : []))),
  ];
  const rows =
    read && messageIds.length === 0 && stepIds.length === 0
      ? read
      : merged(read, await itemRows(db, thread, { messageIds, stepIds }));
  const { fileNames: names, containers } = rows;
  return refs.flatMap((ref): ConversationItem[] => {
    if ('messageId' in ref) {
      const message = rows.messages.get(ref.messageId);
      return message ? [toMessageItem(message, names, containers)] : [];
    }
    const step = rows.steps.get(ref.stepId);
    if (!step) return [];
    const item = ref.which === 'reasoning' ? reasoningItem(step) : toolItem(step, ref.which, ref.index, include);
    return item && item.id === ref.id ? [item] : [];
  });
}

/** Which page of a conversation's items: `after` an item's id, in `order`, at most `limit`. */
export interface ItemPageQuery {
  limit: number;
  order: 'asc' | 'desc';
  after?: string | undefined;
}

/** `more` over `read`. */
function merged(read: ItemRows | undefined, more: ItemRows): ItemRows {
  if (!read) return more;
  return {
    messages: new Map([...read.messages, ...more.messages]),
    steps: new Map([...read.steps, ...more.steps]),
    fileNames: new Map([...read.fileNames, ...more.fileNames]),
    containers: new Map([...read.containers, ...more.containers]),
  };
}

/**
 * One page of the conversation's items (ItemPageQuery). A first page (no `after`) is made of items
 * of the thread's first messages and steps in its order, at most `limit` of each, and a page after
 * an item mostly of those that follow its message or step (queries.ts, pageFrom): those are read
 * whole beside the order (one round trip to a database server), and what else the page names, if
 * anything (steps placed out of their runs' order), after it.
 */
export async function listItems(
  db: Db,
  thread: ThreadKey,
  query: ItemPageQuery,
  include: readonly ItemInclude[],
): Promise<ConversationItemList> {
  const after = query.after === undefined ? undefined : refOf(query.after);
  const ahead =
    after === null
      ? undefined
      : itemRows(db, thread, { first: query.limit, order: query.order, after: after && rowOf(after) });
  ahead?.catch(() => undefined);
  const refs = await itemRefs(db, thread);
  if (query.order === 'desc') refs.reverse();
  let start = 0;
  if (query.after !== undefined) {
    const after = query.after;
    const at = refs.findIndex((ref) => ref.id === after);
    if (at < 0) {
      throw new ApiError('invalid_value', `Invalid 'after': no item found with id '${after}' in this conversation.`, {
        param: 'after',
      });
    }
    start = at + 1;
  }
  const page = refs.slice(start, start + query.limit);
  return toItemList(await itemsOf(db, thread, page, include, await ahead), start + query.limit < refs.length);
}

/** The row an item comes from: its message, or its step. */
function rowOf(ref: ItemRef): { messageId: string } | { stepId: string } {
  return 'messageId' in ref ? { messageId: ref.messageId } : { stepId: ref.stepId };
}

/** A reference to the item `id` of the thread, as its id says (a message's, or fc_/fco_/fs_/rs_), unread. */
function refOf(id: string): ItemRef | null {
  const tool = parseToolItemId(id);
  if (tool) return { id, stepId: tool.stepId, index: tool.index, which: tool.kind === 'fco' ? 'output' : 'call' };
  const reasoned = parseReasoningItemId(id);
  if (reasoned !== null) return { id, stepId: reasoned, which: 'reasoning' };
  return id.startsWith('msg_') ? { id, messageId: id } : null;
}

export const itemNotFound = (id: string) => new ApiError('item_not_found', `No item found with id '${id}'.`);

/** The item `id` of the conversation; 404 when it has none. */
export async function getItem(
  db: Db,
  thread: ThreadKey,
  id: string,
  include: readonly ItemInclude[],
): Promise<ConversationItem> {
  const ref = refOf(id);
  const [item] = ref ? await itemsOf(db, thread, [ref], include) : [];
  if (!item) throw itemNotFound(id);
  return item;
}

/** Which of `ids` name items of the thread. */
export async function existingItemIds(db: Db, thread: ThreadKey, ids: readonly string[]): Promise<Set<string>> {
  const refs = ids.flatMap((id) => refOf(id) ?? []);
  return new Set((await itemsOf(db, thread, refs, [])).map((item) => item.id));
}
