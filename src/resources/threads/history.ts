import { and, asc, eq, ne, or, sql } from 'drizzle-orm';
import { preparedQueries, rawQueryOf, type Db, type RawCondition } from '../../db/client';
import { messages, responses, runs, runSteps, type History, type HistoryStep, type StepRow } from '../../db/schema';
import type { MessageRow } from './queries';

/**
 * What a run reads of its thread to build its prompt (resources/runs/execution/prompt.ts): the thread's messages and
 * the steps of its runs, the newest first up to a number of bytes (GATEWAY_MAX_HISTORY_BYTES), so
 * that however long a thread grows, a turn reads and holds a bounded part of it. The bound is
 * applied in SQL, by a running sum over the rows' stored JSON, newest first: rows past it are
 * never sent to the gateway.
 *
 * A response of the Responses API made without a conversation has a thread of its own, holding its
 * input and its output; the responses its `previous_response_id` chain goes back through have
 * theirs. Its history is all of theirs together, in the order they were written (`seq` grows
 * across threads): a chain branches without a copy, and a response kept out of the store
 * (`store: false`) takes only its own thread with it.
 */

/** `step` of a run created at `runCreatedAt`, as a history holds it (what a read of it gives). */
export function historyStep(
  { id, runId, type, status, stepDetails }: Pick<StepRow, 'id' | 'runId' | 'type' | 'status' | 'stepDetails'>,
  runCreatedAt: number,
): HistoryStep {
  return { id, runId, type, status, stepDetails, runCreatedAt };
}

/** Whose history: a thread of a workspace, for a turn of run `runId` (null: a run not created yet). */
export interface HistoryOf {
  workspaceId: string;
  threadId: string;
  runId: string | null;
  /**
   * For a response on a thread of its own: the threads of its chain come first, back from
   * `previousResponseId` (a response not created yet) or from the previous response of `runId`.
   */
  chain?: { previousResponseId: string | null };
}

/** The most responses a chain is followed back through: far more than a history's bytes take. */
const MAX_CHAIN = 10_000;

/**
 * The ids of the threads a history with a chain reads: `threadId`, and the threads of the
 * responses the chain goes back through (responses.previous_response_id, within the workspace),
 * from `previousResponseId` (a response not created yet) or from `runId`'s previous response. Its
 * placeholders are HistoryOf's (placeholders()). The one definition of a chain's walk: the reads
 * here take it, and so do the guards of a response's write that checks a chain's history
 * (historyThreadIds: known-histories.ts's chainGuard, chainReadGuard), so that they always name
 * the same threads.
 */
const chainThreads = sql`WITH RECURSIVE chain(id, depth) AS (
    SELECT ${sql.placeholder('previousResponseId')}, 0
    UNION SELECT ${responses.previousResponseId}, 0 FROM ${responses} WHERE ${responses.id} = ${sql.placeholder('runId')}
    UNION ALL SELECT r.previous_response_id, chain.depth + 1 FROM ${responses} r JOIN chain ON r.id = chain.id
      WHERE chain.depth < ${MAX_CHAIN}
  )
  SELECT ${sql.placeholder('threadId')}
  UNION ALL SELECT ${responses.threadId} FROM ${responses}
  WHERE ${responses.id} IN (SELECT id FROM chain) AND ${responses.workspaceId} = ${sql.placeholder('workspaceId')}`;

/** The threads a history reads: `threadId`, or with a chain the chain's threads as well (chainThreads). */
function threadsOf(threadColumn: typeof messages.threadId | typeof runs.threadId, chain: boolean) {
  if (!chain) return eq(threadColumn, sql.placeholder('threadId'));
  // One IN over the thread and the chain's threads (not an OR beside it), so that the thread index serves it.
  return sql`${threadColumn} IN (${chainThreads})`;
}

/**
 * The ids of the threads `of`'s history reads (with or without a chain), as a raw query: the
 * reads' own SQL (chainThreads), for a statement that checks those threads (chainGuard, chainReadGuard).
 */
export function historyThreadIds(of: HistoryOf): RawCondition {
  return rawChainThreads(placeholders(of));
}
const rawChainThreads = rawQueryOf(chainThreads);

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

function historyMessages(db: Db, of: HistoryOf, maxBytes: number): Promise<MessageRow[]> {
  return messagesKept(db, of.chain !== undefined).all({ ...placeholders(of), maxBytes });
}

function placeholders({ workspaceId, threadId, runId, chain }: HistoryOf) {
  return { workspaceId, threadId, runId, previousResponseId: chain?.previousResponseId ?? null };
}

// Prepared (db/client.ts): every turn of every run reads its thread's history.
const messagesKept = preparedQueries((db, chain: boolean) => {
  const inThread = and(threadsOf(messages.threadId, chain), eq(messages.workspaceId, sql.placeholder('workspaceId')));
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
}, chainShape);

function chainShape(chain: boolean): string {
  return chain ? 'chain' : 'thread';
}

function historySteps(db: Db, of: HistoryOf, maxBytes: number): Promise<HistoryStep[]> {
  return stepsKept(db, of.runId !== null, of.chain !== undefined).all({ ...placeholders(of), maxBytes });
}

const stepsKept = preparedQueries(
  (db, ofOtherRuns: boolean, chain: boolean) => {
    const size = sql`length(CAST(${runSteps.stepDetails} AS BLOB))`;
    const inThread = and(threadsOf(runs.threadId, chain), eq(runs.workspaceId, sql.placeholder('workspaceId')));
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
        id: runSteps.id,
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
  (ofOtherRuns, chain) => `${ofOtherRuns ? 'without a run' : 'all'} ${chainShape(chain)}`,
);
