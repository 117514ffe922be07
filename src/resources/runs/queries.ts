import { and, asc, desc, eq, inArray, lt, sql } from 'drizzle-orm';
import type { Config } from '../../config';
import {
  batchRaw,
  batchRawResults,
  insertStatement,
  insertWhereStatement,
  isUniqueViolation,
  preparedQueries,
  preparedQuery,
  rawOf,
  rowOf,
  sqlOf,
  updateStatement,
  type BuiltStatement,
  type Db,
  type RawCondition,
  type RawStatement,
} from '../../db/client';
import { messages, runs, runSteps } from '../../db/schema';
import { ACTIVE_STATUSES, EXECUTING_STATUSES, holdsThreadSql, type RunStatus } from '../../db/run-statuses';
import { ApiError } from '../../errors';
import { TextParts, type TextBuilder } from '../../lib/text';
import type { Usage } from '../../providers/types';
import type { CursorListQuery } from '../../http/schemas';
import type { TokenTicket } from '../policies/schemas';
import type { ToolCallsDetails } from './schemas';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';
import { threadRows, type MessageRow, type ThreadRow } from '../threads/queries';

/**
 * Runs and run steps: their queries (their JSON is resources/runs/wire.ts). The engine (resources/runs/execution/engine.ts)
 * decides the transitions; the statements live here, and are returned unexecuted (by a function
 * whose name ends in Statements, or one that builds a single statement) where a caller needs
 * several in one batch (one transaction).
 */

/**
 * Rows as the app holds them: every column but `seq`, which orders a table's rows, is assigned by
 * the database on insert and is never read back (resources/runs/execution/rows.ts builds rows without it).
 */
export type RunRow = Omit<typeof runs.$inferSelect, 'seq'>;
export type NewRun = typeof runs.$inferInsert;
export type StepRow = Omit<typeof runSteps.$inferSelect, 'seq'>;
export type NewStep = typeof runSteps.$inferInsert;
export type MessageInsert = typeof messages.$inferInsert;

/**
 * How long a claim on a run lasts without renewal (GATEWAY_RUN_LEASE_SECONDS). Its executor renews
 * it while it works; a run whose lease ran out lost its executor and is settled by the recovery
 * sweep (resources/runs/execution/recovery.ts).
 */
export function leaseMs(config: Pick<Config, 'GATEWAY_RUN_LEASE_SECONDS'>): number {
  return config.GATEWAY_RUN_LEASE_SECONDS * 1000;
}

/** The run that holds a thread, as a refusal names it: null when it ended before it could be read. */
export type HoldingRun = Pick<RunRow, 'id' | 'status'> | null;

/** The 400 for a run created on a thread that `run` holds: OpenAI's words, then what frees the thread. */
export function activeRunError(threadId: string, run: HoldingRun): ApiError {
  return threadHeld(`Thread ${threadId} already has ${run === null ? 'an active run' : `an active run ${run.id}`}.`, threadId, run);
}

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
 * A new run on an existing thread, with the messages it adds to the thread, in one transaction:
 * false, and nothing written, when the thread has an open run (the unique index refused it).
 */
export async function insertRunOnThread(db: Db, threadMessages: MessageRow[], run: RunRow, extra: BuiltStatement[] = []): Promise<boolean> {
  try {
    await insertThreadAndRun(db, null, threadMessages, run, extra);
    return true;
  } catch (error) {
    if (isUniqueViolation(error, 'runs.thread_id')) return false;
    throw error;
  }
}

/** The run that holds the thread (db/schema.ts, THREAD_HOLDING_STATUSES), if one does: one index probe. */
export async function openRunOf(db: Db, threadId: string): Promise<RunRow | null> {
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

/** One page of a thread's runs (see cursorPage). */
export function listRuns(db: Db, threadId: string, query: CursorListQuery) {
  return cursorPage(query, {
    db,
    cursors: runCursors,
    scope: threadId,
    noun: 'run in this thread',
    select: (page) => runPage(db, page).all({ ...page.values, threadId }),
  });
}

const runCursors = cursorsOf(runs, { seq: runs.seq, id: runs.id, scope: runs.threadId });

const runPage = preparedQueries(
  (db, page: PageQuery) =>
    db.select().from(runs).where(and(eq(runs.threadId, sql.placeholder('threadId')), page.where)).orderBy(page.orderBy).limit(page.limit).prepare(),
  (page) => page.shape,
);

/** A run's metadata, replaced whatever the run's status; 404 as getRun. */
export async function setRunMetadata(db: Db, workspaceId: string, threadId: string, runId: string, metadata: Record<string, string>): Promise<RunRow> {
  const [row] = await db
    .update(runs)
    .set({ metadata })
    .where(and(eq(runs.id, runId), eq(runs.threadId, threadId), eq(runs.workspaceId, workspaceId)))
    .returning();
  if (!row) throw new ApiError('run_not_found', `No run found with id '${runId}'.`);
  return row;
}

/** A new run, with its new thread (null: the thread exists) and new messages, in one transaction. */
export async function insertThreadAndRun(
  db: Db,
  thread: ThreadRow | null,
  threadMessages: MessageRow[],
  run: RunRow,
  extra: BuiltStatement[] = [],
): Promise<void> {
  // On every run's path: the rows as raw statements, without building queries.
  await batchRaw(db, [...threadRows(thread, threadMessages), insertStatement(runs, run), ...extra.map(rawOf)]);
}

// Prepared: a run is read on every poll of it (GET …/runs/{run_id}), and Drizzle building the
// SQL of a select of every column cost more than the read itself.
const runInThread = preparedQuery((db) =>
  db
    .select()
    .from(runs)
    .where(
      and(
        eq(runs.id, sql.placeholder('runId')),
        eq(runs.threadId, sql.placeholder('threadId')),
        eq(runs.workspaceId, sql.placeholder('workspaceId')),
      ),
    )
    .limit(1)
    .prepare(),
);

const runById = preparedQuery((db) => db.select().from(runs).where(eq(runs.id, sql.placeholder('runId'))).limit(1).prepare());

export async function getRun(db: Db, workspaceId: string, threadId: string, runId: string): Promise<RunRow> {
  const [row] = await runInThread(db).all({ runId, threadId, workspaceId });
  if (!row) throw new ApiError('run_not_found', `No run found with id '${runId}'.`);
  return row;
}

export async function getRunById(db: Db, runId: string): Promise<RunRow | null> {
  const [row] = await runById(db).all({ runId });
  return row ?? null;
}

/** Changes a run only while it is in one of `from`; returns the new row, or null if it was not. */
export function updateRun(db: Db, runId: string, from: readonly RunStatus[], patch: Partial<NewRun>) {
  return db.update(runs).set(patch).where(sqlOf(runIn(runId, from))).returning();
}

/**
 * The run `runId` while its status is one of `from`: the condition of every change a run makes
 * only from some statuses (updateRun; endTurn and acceptToolOutputs, raw). Raw; sqlOf gives it to Drizzle.
 */
function runIn(runId: string, from: readonly RunStatus[]): RawCondition {
  return { sql: `"runs"."id" = ? AND "runs"."status" IN (${from.map(() => '?').join(', ')})`, args: [runId, ...from] };
}

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
 * (endTurn, batchRaw). `answer`, when given, is the message's content: one text part, its value as
 * the answer was streamed in, written as the JSON Drizzle would write from the escaped chunks the
 * builder holds, without being joined here (TextParts).
 */
export function messageUpdate(runId: string, messageId: string, patch: Partial<MessageInsert>, answer?: Answer): RawStatement {
  return updateStatement(messages, patch, turnRow(runId, messageId), { encoded: answer && answerContent(answer) });
}

/** A message's answer as the turn streamed it: its text, and its citations' annotations. */
interface Answer {
  value: TextBuilder;
  annotations: unknown[];
}

function answerContent(answer: Answer): { content: TextParts } {
  return {
    content: new TextParts([
      '[{"type":"text","text":{"value":"',
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
export async function endTurn(db: Db, runId: string, patch: Partial<NewRun>, statements: RawStatement[]): Promise<RunRow | null> {
  const change = updateStatement(runs, patch, runIn(runId, ['in_progress']), { returning: true });
  const results = await batchRawResults(db, [...statements, change]);
  const row = results.at(-1)?.rows[0];
  return row ? rowOf(runs, row) : null;
}

export async function listSteps(db: Db, runId: string): Promise<StepRow[]> {
  return stepsOfRun(db).all({ runId });
}

// Prepared: every later turn of a run (after tool outputs, or a file search) reads its steps.
const stepsOfRun = preparedQuery((db) => db.select().from(runSteps).where(eq(runSteps.runId, sql.placeholder('runId'))).orderBy(asc(runSteps.seq)).prepare());

/** One page of a run's steps (see cursorPage). */
export function listStepsPage(db: Db, runId: string, query: CursorListQuery) {
  return cursorPage(query, {
    db,
    cursors: stepCursors,
    scope: runId,
    noun: 'step in this run',
    select: (page) => stepPage(db, page).all({ ...page.values, runId }),
  });
}

const stepCursors = cursorsOf(runSteps, { seq: runSteps.seq, id: runSteps.id, scope: runSteps.runId });

const stepPage = preparedQueries(
  (db, page: PageQuery) =>
    db.select().from(runSteps).where(and(eq(runSteps.runId, sql.placeholder('runId')), page.where)).orderBy(page.orderBy).limit(page.limit).prepare(),
  (page) => page.shape,
);

export async function getStep(db: Db, runId: string, stepId: string): Promise<StepRow> {
  const [row] = await stepOfRun(db).all({ stepId, runId });
  if (!row) throw new ApiError('run_step_not_found', `No run step found with id '${stepId}'.`);
  return row;
}

const stepOfRun = preparedQuery((db) =>
  db
    .select()
    .from(runSteps)
    .where(and(eq(runSteps.id, sql.placeholder('stepId')), eq(runSteps.runId, sql.placeholder('runId'))))
    .limit(1)
    .prepare(),
);

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
 * settles. Only a run still in one of `from` changes. The statements, in their order: the steps,
 * the message (returned), the run (returned, if it changed).
 */
export function settleRunStatements(
  db: Db,
  runId: string,
  from: readonly RunStatus[],
  settlement: Settlement,
  at: number,
  partial?: { messageId: string; text: string },
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
    ? sql`CASE WHEN ${messages.id} = ${partial.messageId} THEN ${JSON.stringify(partialContent(partial.text))} ELSE ${messages.content} END`
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
      })
      .where(and(eq(runs.id, runId), inArray(runs.status, [...from])))
      .returning(),
  ] as const;
}

const partialContent = (text: string) => [{ type: 'text' as const, text: { value: text, annotations: [] } }];

/** A tool-calls step, with its details narrowed to say so. */
export type ToolCallsStep = StepRow & { stepDetails: ToolCallsDetails };

const isToolCallsStep = (step: StepRow): step is ToolCallsStep => step.stepDetails.type === 'tool_calls';

/** The tool-calls step a run in requires_action waits on. */
export async function toolCallsStepInProgress(db: Db, runId: string): Promise<ToolCallsStep> {
  const [step] = await toolCallsInProgress(db).all({ runId });
  if (!step || !isToolCallsStep(step)) throw new Error(`run ${runId} requires action but has no tool-calls step in progress`);
  return step;
}

// Prepared: read on every submission of tool outputs.
const toolCallsInProgress = preparedQuery((db) =>
  db
    .select()
    .from(runSteps)
    .where(and(eq(runSteps.runId, sql.placeholder('runId')), eq(runSteps.type, 'tool_calls'), eq(runSteps.status, 'in_progress')))
    .orderBy(desc(runSteps.seq))
    .limit(1)
    .prepare(),
);

/**
 * Tool outputs in, run in progress again, in one transaction: the run moves only from
 * requires_action (so a second submit finds nothing to do), and the step takes the outputs only if
 * the run moved. The caller executes the run's next turn at once.
 */
export async function acceptToolOutputs(
  db: Db,
  runId: string,
  step: ToolCallsStep,
  outputs: Map<string, string>,
  at: number,
  lease: number,
  rateLimit: TokenTicket | null,
): Promise<{ run: RunRow | null; step: StepRow }> {
  const stepDetails: ToolCallsDetails = {
    ...step.stepDetails,
    // The file searches the gateway ran in the same turn keep their results.
    tool_calls: step.stepDetails.tool_calls.map((call) =>
      call.type === 'function' ? { ...call, function: { ...call.function, output: outputs.get(call.id) ?? null } } : call,
    ),
  };
  const stepPatch = { status: 'completed' as const, completedAt: at, stepDetails };
  // Raw statements (db/client.ts): on the path of every submission. The run goes back to
  // in_progress only from requires_action, and the step completes only if the run did.
  const [resumed] = await batchRawResults(db, [
    updateStatement(
      runs,
      { status: 'in_progress', requiredAction: null, leaseExpiresAt: at + lease, rateLimit },
      runIn(runId, ['requires_action']),
      { returning: true },
    ),
    updateStatement(runSteps, stepPatch, {
      sql: `"id" = ? AND "status" = 'in_progress' AND (SELECT "status" FROM "runs" WHERE "runs"."id" = ?) = 'in_progress'`,
      args: [step.id, runId],
    }),
  ]);
  const row = resumed?.rows[0];
  return { run: row ? rowOf(runs, row) : null, step: { ...step, ...stepPatch } };
}
