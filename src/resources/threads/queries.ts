import { and, eq, exists, inArray, sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import {
  batchRaw,
  batchRawResults,
  insertStatement,
  insertWhereStatement,
  preparedQueries,
  preparedQuery,
  rawOf,
  returnedRows,
  rowOf,
  sqlOf,
  type BuiltStatement,
  type Db,
  type RawCondition,
  type RawStatement,
} from '../../db/client';
import { messages, runs, runSteps, threads, type MessageRow } from '../../db/schema';
import { holdsThreadSql, THREAD_HOLDING_SQL } from '../../db/run-statuses';
import { ApiError } from '../../errors';
import type { CursorListQuery } from '../../http/schemas';
import type { ListThreadsQuery, ModifyMessageBody, ModifyThreadBody } from './schemas';
import type { ToolResources } from '../../db/json-columns';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';

/** Threads and their messages: their queries (their JSON is resources/threads/wire.ts). */

/** Without `seq`, as resources/runs/queries.ts explains. */
export type ThreadRow = Omit<typeof threads.$inferSelect, 'seq'>;

/** What names a thread: its id, and the workspace it belongs to. A message needs nothing else of it. */
export type ThreadKey = Pick<ThreadRow, 'id' | 'workspaceId'>;
export type { MessageRow };

/**
 * No run holds the thread (db/schema.ts, THREAD_HOLDING_STATUSES): the condition of the writes a
 * running thread refuses (a message added, the thread deleted). Raw, for raw statements; sqlOf
 * gives it to Drizzle's.
 */
const noRunHolds = (threadId: string): RawCondition => ({
  sql: `NOT EXISTS (SELECT 1 FROM "runs" WHERE "runs"."thread_id" = ? AND ${THREAD_HOLDING_SQL})`,
  args: [threadId],
});

// Prepared: every route under a thread reads it first (its messages, runs and steps).
const threadById = preparedQuery((db) =>
  db
    .select()
    .from(threads)
    .where(and(eq(threads.id, sql.placeholder('id')), eq(threads.workspaceId, sql.placeholder('workspaceId'))))
    .limit(1)
    .prepare(),
);

export async function getThread(db: Db, workspaceId: string, id: string): Promise<ThreadRow> {
  const row = await findThread(db, workspaceId, id);
  if (!row) throw threadNotFound(id);
  return row;
}

export const threadNotFound = (id: string) => new ApiError('thread_not_found', `No thread found with id '${id}'.`);

/** The thread, or null: for a resource that answers its own 404 (a conversation's). */
export async function findThread(db: Db, workspaceId: string, id: string): Promise<ThreadRow | null> {
  const [row] = await threadById(db).all({ id, workspaceId });
  return row ?? null;
}

/** A new thread and its first messages, in one transaction (with `extra`: its vector store, say). */
export async function insertThread(
  db: Db,
  thread: ThreadRow,
  threadMessages: MessageRow[],
  extra: BuiltStatement[] = [],
  guard: RawStatement | null = null,
): Promise<void> {
  // `guard` (the settings', ProvisionalSettings.guard) leads the transaction.
  await batchRaw(db, [...(guard ? [guard] : []), ...threadRows(thread, threadMessages), ...extra.map(rawOf)]);
}

/**
 * A new thread's rows (the thread, when new, and its messages) as raw statements: on the path of
 * every thread and run created, without building queries.
 */
export function threadRows(thread: ThreadRow | null, threadMessages: MessageRow[]): RawStatement[] {
  return [
    ...(thread ? [insertStatement(threads, thread)] : []),
    ...threadMessages.map((message) => insertStatement(messages, message)),
  ];
}

/** Sets the thread's tool resources (when `condition` holds: a statement of the caller's batch). */
export function setToolResources(
  db: Db,
  threadId: string,
  toolResources: ToolResources,
  condition?: SQL,
): BuiltStatement {
  return db
    .update(threads)
    .set({ toolResources })
    .where(and(eq(threads.id, threadId), condition));
}

/** Holds once `messageId` is written: the condition of writes that go with a message. */
export const messageWritten = (messageId: string): SQL =>
  sql`EXISTS (SELECT 1 FROM ${messages} WHERE ${messages.id} = ${messageId})`;

/**
 * Replaces the fields `body` sends (null metadata is no metadata), led by `guard` when there is one
 * (returnedRows); 404 as getThread, or `notFound`'s (a conversation's).
 */
export async function updateThread(
  db: Db,
  workspaceId: string,
  id: string,
  body: ModifyThreadBody,
  guard: RawStatement | null = null,
  notFound: (id: string) => ApiError = threadNotFound,
): Promise<ThreadRow> {
  const columns: Partial<ThreadRow> = {};
  if (body.metadata !== undefined) columns.metadata = body.metadata ?? {};
  if (body.tool_resources !== undefined) columns.toolResources = body.tool_resources;
  if (Object.keys(columns).length === 0) {
    const thread = await findThread(db, workspaceId, id);
    if (!thread) throw notFound(id);
    return thread;
  }
  const update = db
    .update(threads)
    .set(columns)
    .where(and(eq(threads.id, id), eq(threads.workspaceId, workspaceId)))
    .returning();
  const [row] = await returnedRows(db, threads, update, guard);
  if (!row) throw notFound(id);
  return row;
}

/** A run as the thread reads it in the runs table: the one that holds it (openRunOf). */
export type OpenRun = typeof runs.$inferSelect;

/**
 * The run that holds the thread (db/run-statuses.ts, THREAD_HOLDING_STATUSES), if one does: one
 * index probe. Read here rather than in resources/runs, since runs use threads and not the other
 * way round; the runs' own use-cases read it too.
 */
export async function openRunOf(db: Db, threadId: string): Promise<OpenRun | null> {
  const [row] = await openRun(db).all({ threadId });
  return row ?? null;
}

const openRun = preparedQuery((db) =>
  db
    .select()
    .from(runs)
    .where(and(eq(runs.threadId, sql.placeholder('threadId')), holdsThreadSql))
    .limit(1)
    .prepare(),
);

/** The run that holds a thread, as a refusal names it: null when it ended before it could be read. */
export type HoldingRun = Pick<OpenRun, 'id' | 'status'> | null;

/**
 * 400 `thread_has_active_run`: `refusal` (OpenAI's words for what was refused), then what frees
 * the thread, which OpenAI leaves the client to guess: the run's tool outputs when it waits for
 * them, its cancellation, or its end.
 */
export function threadHeld(refusal: string, threadId: string, run: HoldingRun): ApiError {
  const runs = `/v1/threads/${threadId}/runs`;
  const ways =
    run === null
      ? `cancel the thread's active run (GET ${runs} lists it) or wait for it to end`
      : run.status === 'cancelling'
        ? 'wait for its cancellation to end'
        : `${run.status === 'requires_action' ? `submit its tool outputs (POST ${runs}/${run.id}/submit_tool_outputs), ` : ''}` +
          `cancel it (POST ${runs}/${run.id}/cancel) or wait for it to end`;
  return new ApiError('thread_has_active_run', `${refusal} To free the thread, ${ways}.`);
}

/**
 * Deletes the thread with its messages, runs and run steps, in one transaction, unless a run
 * holds it: the thread's row goes first, in a statement that checks for such a run, and the rest
 * only goes once the row is gone. Answers whether the thread was deleted.
 */
export async function deleteIdleThread(db: Db, thread: ThreadKey, guard: RawStatement | null = null): Promise<boolean> {
  const gone = sql`NOT EXISTS (SELECT 1 FROM ${threads} WHERE ${threads.id} = ${thread.id})`;
  // `guard` (the settings', ProvisionalSettings.guard) leads the transaction.
  const results = await batchRawResults(db, [
    ...(guard ? [guard] : []),
    rawOf(
      db
        .delete(threads)
        .where(
          and(eq(threads.id, thread.id), eq(threads.workspaceId, thread.workspaceId), sqlOf(noRunHolds(thread.id))),
        ),
    ),
    // Through the thread's runs (runs_thread, then run_steps_run): run_steps has no index on thread_id.
    rawOf(
      db
        .delete(runSteps)
        .where(
          and(inArray(runSteps.runId, db.select({ id: runs.id }).from(runs).where(eq(runs.threadId, thread.id))), gone),
        ),
    ),
    rawOf(db.delete(messages).where(and(eq(messages.threadId, thread.id), gone))),
    rawOf(db.delete(runs).where(and(eq(runs.threadId, thread.id), gone))),
  ]);
  return (results[guard ? 1 : 0]?.rowsAffected ?? 0) > 0;
}

/**
 * Adds a message to its thread in one statement, `INSERT … SELECT … WHERE`, that writes it only
 * while no run holds the thread and the thread still exists: a run admitted at the same instant
 * is either before it (the message is refused) or after it (the run sees the message), never
 * both. Answers the message, or null when it was not written.
 */
export async function insertMessageWhileIdle(
  db: Db,
  message: MessageRow,
  extra: BuiltStatement[] = [],
  guard: RawStatement | null = null,
): Promise<MessageRow | null> {
  // `extra` (writes conditional on messageWritten) goes in the same transaction, after the message;
  // `guard` (the settings', ProvisionalSettings.guard) before it.
  const results = await batchRawResults(db, [
    ...(guard ? [guard] : []),
    insertWhereStatement(messages, message, threadIdle({ id: message.threadId, workspaceId: message.workspaceId })),
    ...extra.map(rawOf),
  ]);
  const row = results[guard ? 1 : 0]?.rows[0];
  return row ? rowOf(messages, row) : null;
}

/**
 * The thread exists in its workspace and no run holds it: insertMessageWhileIdle's condition, and that of any write
 * a running thread refuses (a conversation's items: resources/conversations/).
 */
export const threadIdle = (thread: ThreadKey): RawCondition => {
  const idle = noRunHolds(thread.id);
  return {
    sql: `EXISTS (SELECT 1 FROM "threads" WHERE "threads"."id" = ? AND "threads"."workspace_id" = ?) AND ${idle.sql}`,
    args: [thread.id, thread.workspaceId, ...idle.args],
  };
};

const messageNotFound = (id: string) => new ApiError('message_not_found', `No message found with id '${id}'.`);
/**
 * The message `id` of the thread `threadId` in the workspace `workspaceId` (values, or placeholders
 * for a query prepared once per database): what a message's reads and changes find it by.
 */
const messageOf = (id: Key, threadId: Key, workspaceId: Key) =>
  and(eq(messages.id, id), eq(messages.threadId, threadId), eq(messages.workspaceId, workspaceId));
type Key = string | SQLWrapper;
const messageById = preparedQuery((db) =>
  db
    .select()
    .from(messages)
    .where(messageOf(sql.placeholder('id'), sql.placeholder('threadId'), sql.placeholder('workspaceId')))
    .limit(1)
    .prepare(),
);

/**
 * A missing message's 404: the thread's when the thread is not there either (which getThread
 * throws), the message's otherwise.
 */
async function missingMessage(db: Db, workspaceId: string, threadId: string, id: string): Promise<never> {
  await getThread(db, workspaceId, threadId);
  throw messageNotFound(id);
}

export async function getMessage(db: Db, workspaceId: string, threadId: string, id: string): Promise<MessageRow> {
  const [row] = await messageById(db).all({ id, threadId, workspaceId });
  return row ?? missingMessage(db, workspaceId, threadId, id);
}

/**
 * Replaces the message's metadata when `body` sends it (null is no metadata), led by `guard` when
 * there is one (returnedRows); 404 as getMessage.
 */
export async function modifyMessage(
  db: Db,
  workspaceId: string,
  threadId: string,
  id: string,
  body: ModifyMessageBody,
  guard: RawStatement | null = null,
): Promise<MessageRow> {
  if (body.metadata === undefined) return getMessage(db, workspaceId, threadId, id);
  // Built per call (Drizzle's set takes no placeholder).
  const update = db
    .update(messages)
    .set({ metadata: body.metadata ?? {} })
    .where(messageOf(id, threadId, workspaceId))
    .returning();
  const [row] = await returnedRows(db, messages, update, guard);
  return row ?? missingMessage(db, workspaceId, threadId, id);
}

/** Deletes the message, led by `guard` when there is one; 404 as getMessage. */
export async function deleteMessage(
  db: Db,
  workspaceId: string,
  threadId: string,
  id: string,
  guard: RawStatement | null = null,
): Promise<void> {
  // `guard` (the settings', ProvisionalSettings.guard) leads the transaction.
  const results = await batchRawResults(db, [
    ...(guard ? [guard] : []),
    rawOf(db.delete(messages).where(messageOf(id, threadId, workspaceId))),
  ]);
  if (!results[guard ? 1 : 0]?.rowsAffected) await missingMessage(db, workspaceId, threadId, id);
}

/**
 * One page of a workspace's threads (see cursorPage), or of those with a run of one assistant (an
 * EXISTS probe of the index runs_thread per thread). Conversations are threads: they are listed too.
 */
export function listThreads(db: Db, workspaceId: string, query: ListThreadsQuery) {
  const assistantId = query.assistant_id;
  return cursorPage(query, {
    db,
    cursors: threadCursors,
    scope: workspaceId,
    noun: 'thread in this workspace',
    select: (page) => threadPage(db, page, assistantId !== undefined).all({ ...page.values, workspaceId, assistantId }),
  });
}

const threadCursors = cursorsOf(threads, { seq: threads.seq, id: threads.id, scope: threads.workspaceId });

const threadPage = preparedQueries(
  (db, page: PageQuery, ofAssistant: boolean) =>
    db
      .select()
      .from(threads)
      .where(
        and(
          eq(threads.workspaceId, sql.placeholder('workspaceId')),
          ofAssistant
            ? exists(
                db
                  .select({ one: sql`1` })
                  .from(runs)
                  .where(and(eq(runs.threadId, threads.id), eq(runs.assistantId, sql.placeholder('assistantId')))),
              )
            : undefined,
          page.where,
        ),
      )
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page, ofAssistant) => `${page.shape}${ofAssistant ? ' of an assistant' : ''}`,
);

/** One page of a thread's messages (see cursorPage), optionally those of one run. */
export function listMessages(db: Db, threadId: string, query: CursorListQuery & { run_id?: string }) {
  const runId = query.run_id;
  return cursorPage(query, {
    db,
    cursors: messageCursors,
    scope: threadId,
    noun: 'message in this thread',
    select: (page) => messagePage(db, page, runId !== undefined).all({ ...page.values, threadId, runId }),
  });
}

const messageCursors = cursorsOf(messages, { seq: messages.seq, id: messages.id, scope: messages.threadId });

const messagePage = preparedQueries(
  (db, page: PageQuery, ofRun: boolean) =>
    db
      .select()
      .from(messages)
      .where(
        and(
          eq(messages.threadId, sql.placeholder('threadId')),
          ofRun ? eq(messages.runId, sql.placeholder('runId')) : undefined,
          page.where,
        ),
      )
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page, ofRun) => `${page.shape}${ofRun ? ' of a run' : ''}`,
);

/**
 * The files the thread's messages attach for code_interpreter (file ids, oldest message first, each
 * once), at most `limit`: what a run puts in the thread's sandbox session.
 */
export async function codeAttachmentsOf(db: Db, threadId: string, limit: number): Promise<string[]> {
  const rows = await db
    .select({ attachments: messages.attachments })
    .from(messages)
    .where(and(eq(messages.threadId, threadId), sql`${messages.attachments} <> '[]'`))
    .orderBy(messages.seq)
    .limit(limit);
  const ids = rows.flatMap((row) =>
    row.attachments.flatMap((attachment) =>
      attachment.tools.some((tool) => tool.type === 'code_interpreter') ? [attachment.file_id] : [],
    ),
  );
  return [...new Set(ids)].slice(0, limit);
}
