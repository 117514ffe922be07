import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client';
import { messages, threads, type MessageStatus } from '../db/schema';
import { ApiError } from '../errors';
import type { CursorListQuery } from '../schemas/common';
import { cursorPage } from './pagination';

/** Threads and their messages: their queries (their JSON is wire/threads.ts). */

/** Without `seq`, as services/runs.ts explains. */
export type ThreadRow = Omit<typeof threads.$inferSelect, 'seq'>;
export type MessageRow = Omit<typeof messages.$inferSelect, 'seq'>;

export async function getThread(db: Db, workspaceId: string, id: string): Promise<ThreadRow> {
  const [row] = await db
    .select()
    .from(threads)
    .where(and(eq(threads.id, id), eq(threads.workspaceId, workspaceId)))
    .limit(1);
  if (!row) throw new ApiError('thread_not_found', `No thread found with id '${id}'.`);
  return row;
}

/** One page of a thread's messages (see cursorPage), optionally those of one run. */
export function listMessages(db: Db, threadId: string, query: CursorListQuery & { run_id?: string }) {
  const inThread = and(eq(messages.threadId, threadId), query.run_id ? eq(messages.runId, query.run_id) : undefined);
  return cursorPage(query, {
    seq: messages.seq,
    noun: 'message in this thread',
    seqOf: async (id) => {
      const [row] = await db
        .select({ seq: messages.seq })
        .from(messages)
        .where(and(eq(messages.id, id), eq(messages.threadId, threadId)))
        .limit(1);
      return row?.seq;
    },
    select: (where, orderBy, limit) => db.select().from(messages).where(and(inThread, where)).orderBy(orderBy).limit(limit),
  });
}

export type { MessageStatus };
