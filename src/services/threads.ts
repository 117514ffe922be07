import { and, asc, desc, eq, gt, lt, ne, or, isNull, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client';
import { messages, threads, type MessageStatus } from '../db/schema';
import { ApiError } from '../errors';
import { toUnixSeconds } from '../lib/time';

/** Threads and their messages: queries and the wire shapes of OpenAI's Thread and Message objects. */

export type ThreadRow = typeof threads.$inferSelect;
export type MessageRow = typeof messages.$inferSelect;
export type NewMessage = typeof messages.$inferInsert;

/** Message content as stored and answered: OpenAI's content parts. */
export type MessageContent =
  | { type: 'text'; text: { value: string; annotations: unknown[] } }
  | { type: 'image_url'; image_url: { url: string; detail?: string } };

export function toThreadJson(row: ThreadRow) {
  return {
    id: row.id,
    object: 'thread' as const,
    created_at: toUnixSeconds(row.createdAt),
    metadata: row.metadata,
    tool_resources: row.toolResources ?? {},
  };
}

export function toMessageJson(row: MessageRow) {
  return {
    id: row.id,
    object: 'thread.message' as const,
    created_at: toUnixSeconds(row.createdAt),
    assistant_id: row.assistantId,
    thread_id: row.threadId,
    run_id: row.runId,
    status: row.status,
    incomplete_details: row.incompleteDetails ?? null,
    incomplete_at: row.incompleteAt === null ? null : toUnixSeconds(row.incompleteAt),
    completed_at: row.completedAt === null ? null : toUnixSeconds(row.completedAt),
    role: row.role,
    content: row.content,
    attachments: row.attachments,
    metadata: row.metadata,
  };
}

export async function getThread(db: Db, workspaceId: string, id: string): Promise<ThreadRow> {
  const [row] = await db
    .select()
    .from(threads)
    .where(and(eq(threads.id, id), eq(threads.workspaceId, workspaceId)))
    .limit(1);
  if (!row) throw new ApiError('thread_not_found', `No thread found with id '${id}'.`);
  return row;
}

/** The messages a run's conversation is built from: the thread's, except this run's own answers. */
export async function conversationMessages(db: Db, threadId: string, runId: string): Promise<MessageRow[]> {
  return db
    .select()
    .from(messages)
    .where(and(eq(messages.threadId, threadId), or(isNull(messages.runId), ne(messages.runId, runId))))
    .orderBy(asc(messages.seq));
}

export interface MessagePage {
  limit: number;
  order: 'asc' | 'desc';
  after?: string;
  before?: string;
  runId?: string;
}

/** OpenAI's cursor pagination over a thread's messages: one extra row tells whether more exist. */
export async function listMessages(db: Db, threadId: string, page: MessagePage) {
  const cursor = async (id: string, param: string) => {
    const [row] = await db
      .select({ seq: messages.seq })
      .from(messages)
      .where(and(eq(messages.id, id), eq(messages.threadId, threadId)));
    if (!row) throw new ApiError('invalid_value', `No message '${id}' in this thread to page from.`, { param });
    return row.seq;
  };
  const conditions: (SQL | undefined)[] = [eq(messages.threadId, threadId)];
  if (page.runId) conditions.push(eq(messages.runId, page.runId));
  const forward = page.order === 'asc';
  if (page.after) {
    const seq = await cursor(page.after, 'after');
    conditions.push(forward ? gt(messages.seq, seq) : lt(messages.seq, seq));
  }
  if (page.before) {
    const seq = await cursor(page.before, 'before');
    conditions.push(forward ? lt(messages.seq, seq) : gt(messages.seq, seq));
  }
  const rows = await db
    .select()
    .from(messages)
    .where(and(...conditions))
    .orderBy(forward ? asc(messages.seq) : desc(messages.seq))
    .limit(page.limit + 1);
  const data = rows.slice(0, page.limit).map(toMessageJson);
  return {
    object: 'list' as const,
    data,
    first_id: data[0]?.id ?? null,
    last_id: data[data.length - 1]?.id ?? null,
    has_more: rows.length > page.limit,
  };
}

export type { MessageStatus };
