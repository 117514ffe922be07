import { and, eq, inArray, lt, sql } from 'drizzle-orm';
import {
  batchRaw,
  batchRawResults,
  insertWhereStatement,
  rowOf,
  updateStatement,
  type Db,
  type RawCondition,
  type RawStatement,
} from '../../db/client';
import { ACTIVE_STATUSES, EXECUTING_STATUSES, type RunStatus } from '../../db/run-statuses';
import { messages, runs, runSteps, type MessageContent } from '../../db/schema';
import { TextParts, type TextBuilder } from '../../lib/text';
import type { Usage } from '../../providers/types';
import { runIn, type MessageInsert, type NewRun, type NewStep } from './queries';
import type { RunRow } from '../../db/schema';
import type { RunTrace } from '../../db/json-columns';
/**
 * The writes of a run's executor and of whoever settles a run: a turn's rows, each made only while
 * the executor still owns the run; the turn's end; the lease; the runs the recovery sweep finds;
 * the statements that end a run without its answer. Returned unexecuted where a caller needs
 * several in one batch (one transaction), as in queries.ts.
 */

/**
 * The condition of every write that a run's executor makes to the run's steps and message: the run
 * is still its executor's (EXECUTING_STATUSES) when the statement runs. A run settled meanwhile
 * (failed by recovery because its lease ran out while its executor was held up, cancelled while
 * waiting, expired) takes nothing more from an executor that carries on until it notices (at its
 * next lease renewal): no step or message is added or changed under a run that has ended, nor in a
 * thread that has gone on to its next run.
 */
function whileExecuting(runId: string): RawCondition {
  const run = runIn(runId, EXECUTING_STATUSES);
  return { sql: `exists (select 1 from "runs" where ${run.sql})`, args: run.args };
}

/** `"id" = ?` of a turn's row, while its run's executor owns the run (whileExecuting). */
function turnRow(runId: string, id: string): RawCondition {
  const fence = whileExecuting(runId);
  return { sql: `"id" = ? and ${fence.sql}`, args: [id, ...fence.args] };
}

/** A run's new steps and message, written in one transaction while its executor owns it (raw statements: on every streamed run's path). */
export function insertTurnRows(db: Db, runId: string, rows: TurnRows): Promise<void> {
  return batchRaw(db, turnRowsInsert(runId, rows));
}

/** A turn's steps and its message, with the message's answer when the turn writes them as they end. */
export interface TurnRows {
  steps: NewStep[];
  message?: MessageInsert;
  answer?: Answer;
}

/**
 * The inserts of a turn's rows (insertTurnRows), or, for a turn that ended before their inserts
 * started (resources/runs/execution/outbox.ts, take), of the rows as they end, for its closing commit: the message's
 * content is then `answer`, as messageUpdate writes it. Each is made only while the run's executor
 * owns it (whileExecuting).
 */
export function turnRowsInsert(runId: string, rows: TurnRows): RawStatement[] {
  const fence = whileExecuting(runId);
  const statements = rows.steps.map((step) => insertWhereStatement(runSteps, step, fence, { returning: false }));
  if (!rows.message) return statements;
  const encoded = rows.answer && answerContent(rows.answer);
  return [...statements, insertWhereStatement(messages, rows.message, fence, { encoded, returning: false })];
}

/** A step's change while its run's executor owns it, as a raw statement for a turn's writes (endTurn, batchRaw). */
export function stepUpdate(runId: string, stepId: string, patch: Partial<NewStep>): RawStatement {
  return updateStatement(runSteps, patch, turnRow(runId, stepId));
}

/**
 * A message's change while its run's executor owns it, as a raw statement for a turn's writes
 * (endTurn, batchRaw). `answer`, when given, is the message's content: its figures and one text part, its value as
 * the answer was streamed in, written as the JSON Drizzle would write from the escaped chunks the
 * builder holds, without being joined here (TextParts).
 */
export function messageUpdate(
  runId: string,
  messageId: string,
  patch: Partial<MessageInsert>,
  answer?: Answer,
): RawStatement {
  return updateStatement(messages, patch, turnRow(runId, messageId), { encoded: answer && answerContent(answer) });
}

/** A figure the run's code showed, as a part of its answer (turn-answer.ts). */
export type ImageFileContent = Extract<MessageContent, { type: 'image_file' }>;

/** A message's answer as the turn streamed it: the figures before its text, its text, and its annotations. */
interface Answer {
  lead?: ImageFileContent[];
  value: TextBuilder;
  annotations: unknown[];
}

function answerContent(answer: Answer): { content: TextParts } {
  const lead = (answer.lead ?? []).map((part) => `${JSON.stringify(part)},`).join('');
  return {
    content: new TextParts([
      `[${lead}{"type":"text","text":{"value":"`,
      ...answer.value.jsonParts(),
      `","annotations":${JSON.stringify(answer.annotations)}}}]`,
    ]),
  };
}

/**
 * Ends a turn in one transaction: `statements` (the turn's rows, each written only while the run's
 * executor owns it: turnRowsInsert, stepUpdate, messageUpdate), then the run's change, made only
 * while it is still `in_progress`. A run that ended meanwhile takes none of it; a run being
 * cancelled takes the rows, which its cancellation then settles. Answers the run as the database
 * holds it after the change, or null when the run was no longer in progress.
 */
export async function endTurn(
  db: Db,
  runId: string,
  patch: Partial<NewRun>,
  statements: RawStatement[],
): Promise<RunRow | null> {
  const change = updateStatement(runs, patch, runIn(runId, ['in_progress']), { returning: true });
  const results = await batchRawResults(db, [...statements, change]);
  const row = results.at(-1)?.rows[0];
  return row ? rowOf(runs, row) : null;
}

/** Extends the lease of a run being executed; answers its status, so a cancel from elsewhere is seen. */
export async function renewLease(db: Db, runId: string, until: number): Promise<RunStatus | null> {
  const [row] = await db
    .update(runs)
    .set({ leaseExpiresAt: until })
    .where(and(eq(runs.id, runId), inArray(runs.status, [...ACTIVE_STATUSES])))
    .returning({ status: runs.status });
  return row?.status ?? null;
}

/**
 * Runs whose executor is gone: active, with a lease that ran out (the process that held it crashed
 * or was killed). Bounded, so a sweep never becomes a long transaction.
 */
export async function orphanedRuns(db: Db, now: number, limit: number): Promise<RunRow[]> {
  return db
    .select()
    .from(runs)
    .where(and(inArray(runs.status, [...ACTIVE_STATUSES]), lt(runs.leaseExpiresAt, now)))
    .limit(limit);
}

/** Runs in requires_action past their expiry: nobody will submit outputs any more. */
export async function overdueRuns(db: Db, now: number, limit: number): Promise<RunRow[]> {
  return db
    .select()
    .from(runs)
    .where(and(eq(runs.status, 'requires_action'), lt(runs.expiresAt, now)))
    .limit(limit);
}

/** The message a run left in progress, with the figures it opened with and the text streamed so far. */
export interface PartialAnswer {
  messageId: string;
  lead: ImageFileContent[];
  text: string;
}

export type Settlement =
  | { status: 'cancelled' }
  | { status: 'expired' }
  /** `cause`: why, in a word, for the run's log line (`dns`, `refused`, `http_401`, …; resources/runs/execution/settle.ts). */
  | { status: 'failed'; lastError: { code: string; message: string }; cause?: string };

const MESSAGE_REASON = { cancelled: 'run_cancelled', expired: 'run_expired', failed: 'run_failed' } as const;

/**
 * The statements that end a run without an answer: its open steps take the run's fate, its open
 * message becomes incomplete (keeping `partialText`, the text streamed so far, when given), and
 * the run's usage is the sum of its steps' usage — computed in SQL so that it is exact whoever
 * settles. Only a run still in one of `from` changes, taking `trace` (with the settlement's cause
 * when it failed). The statements, in their order: the steps,
 * the message (returned), the run (returned, if it changed).
 */
export function settleRunStatements(
  db: Db,
  runId: string,
  from: readonly RunStatus[],
  settlement: Settlement,
  at: number,
  trace: RunTrace,
  partial?: PartialAnswer,
) {
  const lastError = settlement.status === 'failed' ? settlement.lastError : null;
  const stepStamp = {
    cancelled: { cancelledAt: at },
    expired: { expiredAt: at },
    failed: { failedAt: at },
  }[settlement.status];
  const runStamp = {
    cancelled: { cancelledAt: at },
    expired: {},
    failed: { failedAt: at },
  }[settlement.status];
  const usage = sql`(SELECT json_object(
      'prompt_tokens', coalesce(sum(json_extract(${runSteps.usage}, '$.prompt_tokens')), 0),
      'completion_tokens', coalesce(sum(json_extract(${runSteps.usage}, '$.completion_tokens')), 0),
      'total_tokens', coalesce(sum(json_extract(${runSteps.usage}, '$.total_tokens')), 0))
    FROM ${runSteps} WHERE ${runSteps.runId} = ${runId})`;
  // The text streamed so far is kept in the message it left incomplete (only that one: a run
  // has at most one message in progress).
  const content = partial
    ? sql`CASE WHEN ${messages.id} = ${partial.messageId} THEN ${JSON.stringify(partialContent(partial))} ELSE ${messages.content} END`
    : undefined;
  return [
    db
      .update(runSteps)
      .set({ status: settlement.status, ...stepStamp, ...(lastError ? { lastError } : {}) })
      .where(and(eq(runSteps.runId, runId), eq(runSteps.status, 'in_progress'))),
    db
      .update(messages)
      .set({
        status: 'incomplete',
        incompleteAt: at,
        incompleteDetails: { reason: MESSAGE_REASON[settlement.status] },
        ...(content ? { content } : {}),
      })
      // Found through the thread's index: messages has none on run_id, and a scan of the table
      // would read through every large answer stored before the run_id column.
      .where(
        and(
          eq(messages.threadId, sql`(SELECT ${runs.threadId} FROM ${runs} WHERE ${runs.id} = ${runId})`),
          eq(messages.runId, runId),
          eq(messages.status, 'in_progress'),
        ),
      )
      .returning(),
    db
      .update(runs)
      .set({
        status: settlement.status,
        ...runStamp,
        lastError,
        requiredAction: null,
        leaseExpiresAt: null,
        usage: sql<Usage>`${usage}`,
        trace: settlement.status === 'failed' && settlement.cause ? { ...trace, cause: settlement.cause } : trace,
      })
      .where(and(eq(runs.id, runId), inArray(runs.status, [...from])))
      .returning(),
  ] as const;
}

const partialContent = (partial: PartialAnswer): MessageContent[] => [
  ...partial.lead,
  { type: 'text', text: { value: partial.text, annotations: [] } },
];
