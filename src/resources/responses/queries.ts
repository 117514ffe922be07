import { and, asc, eq, sql } from 'drizzle-orm';
import { preparedQuery, type Db } from '../../db/client';
import { messages, responses, threads, type ResponseRow } from '../../db/schema';
import { ApiError } from '../../errors';
import type { MessageRow, ThreadRow } from '../threads/queries';

/** A response's own row (schema.ts `responses`) and the messages its run wrote. */

export const responseNotFound = (id: string, param?: string) =>
  new ApiError('response_not_found', `Response with id '${id}' not found.`, param ? { param } : {});

const responseById = preparedQuery((db) =>
  db
    .select()
    .from(responses)
    .where(and(eq(responses.id, sql.placeholder('id')), eq(responses.workspaceId, sql.placeholder('workspaceId'))))
    .prepare(),
);

/** The workspace's response; 404 `response_not_found` when unknown or another workspace's. */
export async function getResponseRow(db: Db, workspaceId: string, id: string, param?: string): Promise<ResponseRow> {
  const [row] = await responseById(db).all({ id, workspaceId });
  if (!row) throw responseNotFound(id, param);
  return row;
}

const threadOfResponse = preparedQuery((db) =>
  db
    .select({ thread: threads })
    .from(responses)
    .innerJoin(threads, and(eq(threads.id, responses.threadId), eq(threads.workspaceId, responses.workspaceId)))
    .where(and(eq(responses.id, sql.placeholder('id')), eq(responses.workspaceId, sql.placeholder('workspaceId'))))
    .limit(1)
    .prepare(),
);

/**
 * The thread of the workspace's response `id` (its own, or its conversation's), read by the
 * response's id: beside the response's row rather than after it. Null when either is not found.
 */
export async function responseThread(db: Db, workspaceId: string, id: string): Promise<ThreadRow | null> {
  const [row] = await threadOfResponse(db).all({ id, workspaceId });
  return row?.thread ?? null;
}

export async function deleteResponseRow(db: Db, workspaceId: string, id: string): Promise<boolean> {
  const deleted = await db
    .delete(responses)
    .where(and(eq(responses.id, id), eq(responses.workspaceId, workspaceId)))
    .returning({ id: responses.id });
  return deleted.length > 0;
}

const messagesOfRun = preparedQuery((db) =>
  db
    .select()
    .from(messages)
    .where(eq(messages.runId, sql.placeholder('runId')))
    .orderBy(asc(messages.seq))
    .prepare(),
);

/** The messages a run wrote (its answers), oldest first. */
export async function runMessages(db: Db, runId: string): Promise<MessageRow[]> {
  return messagesOfRun(db).all({ runId });
}
