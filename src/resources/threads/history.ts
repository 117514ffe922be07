import { and, asc, eq, ne, or, sql } from 'drizzle-orm';
import { preparedQueries, preparedQuery, type Db } from '../../db/client';
import { messages, runs, runSteps } from '../../db/schema';
import type { MessageRow } from './queries';

/**
 * What a run reads of its thread to build its prompt (resources/runs/execution/prompt.ts): the thread's messages and
 * the steps of its runs, the newest first up to a number of bytes (GATEWAY_MAX_HISTORY_BYTES), so
 * that however long a thread grows, a turn reads and holds a bounded part of it. The bound is
 * applied in SQL, by a running sum over the rows' stored JSON, newest first: rows past it are
 * never sent to the gateway.
 */

/** A step of one of the thread's runs, with the time its run was created. */
export type HistoryStep = Pick<typeof runSteps.$inferSelect, 'runId' | 'type' | 'status' | 'stepDetails'> & {
  runCreatedAt: number;
};

export interface History {
  /** The thread's messages, oldest first. */
  messages: MessageRow[];
  /** Steps of the thread's runs, each run's in the order they happened, runs oldest first. */
  steps: HistoryStep[];
}

/** Whose history: a thread of a workspace, for a turn of run `runId` (null: a run not created yet). */
export interface HistoryOf {
  workspaceId: string;
  threadId: string;
  runId: string | null;
}

/**
 * The thread's history as a turn of a run sends it: its newest
 * messages whose stored content adds up to at most `maxBytes` (the newest one whatever its size),
 * and the steps of its other runs that place tool calls among them (message creations, and tool
 * calls whose outputs were all submitted), newest first up to `maxBytes` as well. The run's own
 * steps are read apart (listSteps): they are never left out.
 */
export async function readHistory(db: Db, of: HistoryOf, maxBytes: number): Promise<History> {
  const [threadMessages, steps] = await Promise.all([
    historyMessages(db, of, maxBytes),
    historySteps(db, of, maxBytes),
  ]);
  return { messages: threadMessages, steps };
}

function historyMessages(db: Db, { workspaceId, threadId }: HistoryOf, maxBytes: number): Promise<MessageRow[]> {
  return messagesKept(db).all({ workspaceId, threadId, maxBytes });
}

// Prepared (db/client.ts): every turn of every run reads its thread's history.
const messagesKept = preparedQuery((db) => {
  const inThread = and(
    eq(messages.threadId, sql.placeholder('threadId')),
    eq(messages.workspaceId, sql.placeholder('workspaceId')),
  );
  const size = sql`length(CAST(${messages.content} AS BLOB))`;
  // `newer`: the bytes of the messages after this one. A message is kept while they leave room.
  const kept = sql`SELECT seq FROM (
      SELECT ${messages.seq} AS seq, sum(${size}) OVER (ORDER BY ${messages.seq} DESC) - ${size} AS newer
      FROM ${messages} WHERE ${inThread}
    ) WHERE newer < ${sql.placeholder('maxBytes')}`;
  return db
    .select()
    .from(messages)
    .where(and(inThread, sql`${messages.seq} IN (${kept})`))
    .orderBy(asc(messages.seq))
    .prepare();
});

function historySteps(db: Db, { workspaceId, threadId, runId }: HistoryOf, maxBytes: number): Promise<HistoryStep[]> {
  return stepsKept(db, runId !== null).all({ workspaceId, threadId, runId, maxBytes });
}

const stepsKept = preparedQueries(
  (db, ofOtherRuns: boolean) => {
    const size = sql`length(CAST(${runSteps.stepDetails} AS BLOB))`;
    const inThread = and(
      eq(runs.threadId, sql.placeholder('threadId')),
      eq(runs.workspaceId, sql.placeholder('workspaceId')),
    );
    const shown = and(
      inThread,
      ofOtherRuns ? ne(runs.id, sql.placeholder('runId')) : undefined,
      or(eq(runSteps.type, 'message_creation'), eq(runSteps.status, 'completed')),
    );
    const kept = sql`SELECT seq FROM (
      SELECT ${runSteps.seq} AS seq, sum(${size}) OVER (ORDER BY ${runs.seq} DESC, ${runSteps.seq} DESC) - ${size} AS newer
      FROM ${runSteps} INNER JOIN ${runs} ON ${runs.id} = ${runSteps.runId} WHERE ${shown}
    ) WHERE newer < ${sql.placeholder('maxBytes')}`;
    return db
      .select({
        runId: runSteps.runId,
        type: runSteps.type,
        status: runSteps.status,
        stepDetails: runSteps.stepDetails,
        runCreatedAt: runs.createdAt,
      })
      .from(runSteps)
      .innerJoin(runs, eq(runs.id, runSteps.runId))
      .where(and(inThread, sql`${runSteps.seq} IN (${kept})`))
      .orderBy(asc(runs.seq), asc(runSteps.seq))
      .prepare();
  },
  (ofOtherRuns) => (ofOtherRuns ? 'without a run' : 'all'),
);
