import { and, asc, eq, sql } from 'drizzle-orm';
import type { Config } from '../../config';
import {
  batchRaw,
  batchRawResults,
  batchWithReads,
  insertStatement,
  insertWhereStatement,
  isUniqueViolation,
  preparedQueries,
  preparedQuery,
  rawOf,
  returnedRows,
  sqlOf,
  updateStatement,
  type BuiltStatement,
  type Db,
  type RawCondition,
  type RawStatement,
} from '../../db/client';
import { messages, responses, runs, runSteps } from '../../db/schema';
import type { RunStatus } from '../../db/run-statuses';
import { ApiError } from '../../errors';
import type { CursorListQuery } from '../../http/schemas';
import type { ListWorkspaceRunsQuery } from './schemas';
import type { ResponseRow, RunRow, StepRow } from '../../db/schema';
import type { ToolCallsDetails } from '../../db/json-columns';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';
import { GENERATION_MOVED } from '../../db/settings-cache';
import {
  threadHeld,
  threadIdle,
  threadRows,
  type HoldingRun,
  type MessageRow,
  type ThreadRow,
} from '../threads/queries';

/**
 * Runs and run steps: their queries (their JSON is resources/runs/wire.ts). The engine (resources/runs/execution/engine.ts)
 * decides the transitions; the statements of the use-cases live here, those of a run's executor in
 * executor-writes.ts; they are returned unexecuted (by a function whose name ends in Statements,
 * or one that builds a single statement) where a caller needs several in one batch (one transaction).
 */

/**
 * Rows as the app holds them (RunRow and StepRow are in db/schema.ts, below the run host): every column but `seq`,
 * which orders a table's rows, is assigned by the database on insert and is never read back
 * (resources/runs/execution/rows.ts builds rows without it).
 */
export type NewRun = typeof runs.$inferInsert;
export type { StepRow };
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

/** The 400 for a run created on a thread that `run` holds: OpenAI's words, then what frees the thread. */
export function activeRunError(threadId: string, run: HoldingRun): ApiError {
  return threadHeld(
    `Thread ${threadId} already has ${run === null ? 'an active run' : `an active run ${run.id}`}.`,
    threadId,
    run,
  );
}

/**
 * A new run on an existing thread, with the messages it adds to the thread, in one transaction:
 * false, and nothing written, when the thread has an open run (the unique index refused it).
 */
export async function insertRunOnThread(
  db: Db,
  threadMessages: MessageRow[],
  run: RunRow,
  extra: (BuiltStatement | RawStatement)[] = [],
): Promise<boolean> {
  try {
    await insertThreadAndRun(db, null, threadMessages, run, extra);
    return true;
  } catch (error) {
    if (isUniqueViolation(error, 'runs.thread_id')) return false;
    throw error;
  }
}

/**
 * A new run on a thread not read first, with the messages it adds, in one transaction that also
 * carries the reads issued beside it (batchWithReads: one round trip to a database server), led by
 * `guards` (the settings', ProvisionalSettings.guard; the known history's, historyGuard). Every row is inserted only while the thread is
 * the workspace's and no run holds it (threadIdle, checked by each statement in the one
 * transaction): false, and nothing written, when it is not, or when the guard failed the batch.
 * `response`: the row of a response executed as the run (resources/responses/), written with it,
 * and `idleWrites`, more statements, made to write only under the same condition (the outputs its
 * input gives earlier calls).
 */
export async function insertRunWhileIdle(
  db: Db,
  guards: RawStatement[],
  threadMessages: MessageRow[],
  run: RunRow,
  response?: ResponseRow,
  idleWrites: (idle: RawCondition) => RawStatement[] = () => [],
): Promise<boolean> {
  const idle = threadIdle({ id: run.threadId, workspaceId: run.workspaceId });
  try {
    const results = await batchWithReads(db, [
      ...guards,
      ...threadMessages.map((message) => insertWhereStatement(messages, message, idle, { returning: false })),
      ...(response ? [insertWhereStatement(responses, response, idle, { returning: false })] : []),
      ...idleWrites(idle),
      insertWhereStatement(runs, run, idle),
    ]);
    return results.at(-1)?.rows.length === 1;
  } catch (error) {
    if (isUniqueViolation(error, GENERATION_MOVED) || isUniqueViolation(error, 'runs.thread_id')) return false;
    throw error;
  }
}

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
    db
      .select()
      .from(runs)
      .where(and(eq(runs.threadId, sql.placeholder('threadId')), page.where))
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page) => page.shape,
);

/** One page of a workspace's runs across its threads (see cursorPage), filtered as asked. */
export function listWorkspaceRuns(db: Db, workspaceId: string, query: ListWorkspaceRunsQuery) {
  const filters: RunFilters = {
    status: query.status !== undefined,
    assistantId: query.assistant_id !== undefined,
    threadId: query.thread_id !== undefined,
  };
  return cursorPage(query, {
    db,
    cursors: workspaceRunCursors,
    scope: workspaceId,
    noun: 'run in this workspace',
    select: (page) =>
      workspaceRunPage(db, page, filters).all({
        ...page.values,
        workspaceId,
        status: query.status,
        assistantId: query.assistant_id,
        threadId: query.thread_id,
      }),
  });
}

/** Which filters a page of a workspace's runs has: a prepared query for each set. */
type RunFilters = Record<'status' | 'assistantId' | 'threadId', boolean>;

const workspaceRunCursors = cursorsOf(runs, { seq: runs.seq, id: runs.id, scope: runs.workspaceId });

const workspaceRunPage = preparedQueries(
  (db, page: PageQuery, filters: RunFilters) =>
    db
      .select()
      .from(runs)
      .where(
        and(
          eq(runs.workspaceId, sql.placeholder('workspaceId')),
          // Responses are runs too (runs.kind): they are listed by the Responses API.
          eq(runs.kind, 'run'),
          filters.status ? eq(runs.status, sql.placeholder('status')) : undefined,
          filters.assistantId ? eq(runs.assistantId, sql.placeholder('assistantId')) : undefined,
          filters.threadId ? eq(runs.threadId, sql.placeholder('threadId')) : undefined,
          page.where,
        ),
      )
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page, filters) =>
    `${page.shape}${Object.entries(filters)
      .filter(([, on]) => on)
      .map(([name]) => ` ${name}`)
      .join('')}`,
);

/** A run's metadata, replaced whatever the run's status, led by `guard` when there is one (returnedRows); 404 as getRun. */
export async function setRunMetadata(
  db: Db,
  workspaceId: string,
  threadId: string,
  runId: string,
  metadata: Record<string, string>,
  guard: RawStatement | null = null,
): Promise<RunRow> {
  const update = db
    .update(runs)
    .set({ metadata })
    .where(and(eq(runs.id, runId), eq(runs.threadId, threadId), eq(runs.workspaceId, workspaceId)))
    .returning();
  const [row] = await returnedRows(db, runs, update, guard);
  if (!row) throw new ApiError('run_not_found', `No run found with id '${runId}'.`);
  return row;
}

/** A new run, with its new thread (null: the thread exists) and new messages, in one transaction. */
export async function insertThreadAndRun(
  db: Db,
  thread: ThreadRow | null,
  threadMessages: MessageRow[],
  run: RunRow,
  extra: (BuiltStatement | RawStatement)[] = [],
): Promise<void> {
  // On every run's path: the rows as raw statements, without building queries.
  const more = extra.map((statement) => ('toSQL' in statement ? rawOf(statement) : statement));
  await batchRaw(db, [...threadRows(thread, threadMessages), insertStatement(runs, run), ...more]);
}

/**
 * A new thread, its messages and a run on it, as insertThreadAndRun, in a transaction that `guards`
 * fail (the settings', ProvisionalSettings.guard, when the generation moved; a response's chain's,
 * chainGuard or chainReadGuard): false then, and nothing written. The transaction also carries the
 * reads issued beside it (batchWithReads: a response's chain read with its write, one round trip).
 * `extra`: more rows written with them (a response's).
 */
export async function insertThreadAndRunGuarded(
  db: Db,
  guards: RawStatement[],
  thread: ThreadRow,
  threadMessages: MessageRow[],
  run: RunRow,
  extra: RawStatement[] = [],
): Promise<boolean> {
  try {
    await batchWithReads(db, [...guards, ...threadRows(thread, threadMessages), insertStatement(runs, run), ...extra]);
    return true;
  } catch (error) {
    if (isUniqueViolation(error, GENERATION_MOVED)) return false;
    throw error;
  }
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

const runById = preparedQuery((db) =>
  db
    .select()
    .from(runs)
    .where(eq(runs.id, sql.placeholder('runId')))
    .limit(1)
    .prepare(),
);

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
  return db
    .update(runs)
    .set(patch)
    .where(sqlOf(runIn(runId, from)))
    .returning();
}

/**
 * The run `runId` while its status is one of `from`: the condition of every change a run makes
 * only from some statuses (updateRun; endTurn and acceptToolOutputs, raw). Raw; sqlOf gives it to Drizzle.
 */
export function runIn(runId: string, from: readonly RunStatus[]): RawCondition {
  return { sql: `"runs"."id" = ? AND "runs"."status" IN (${from.map(() => '?').join(', ')})`, args: [runId, ...from] };
}

export async function listSteps(db: Db, runId: string): Promise<StepRow[]> {
  return stepsOfRun(db).all({ runId });
}

// Prepared: every later turn of a run (after tool outputs, or a file search) reads its steps.
const stepsOfRun = preparedQuery((db) =>
  db
    .select()
    .from(runSteps)
    .where(eq(runSteps.runId, sql.placeholder('runId')))
    .orderBy(asc(runSteps.seq))
    .prepare(),
);

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
    db
      .select()
      .from(runSteps)
      .where(and(eq(runSteps.runId, sql.placeholder('runId')), page.where))
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
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

/** A tool-calls step, with its details narrowed to say so. */
export type ToolCallsStep = StepRow & { stepDetails: ToolCallsDetails };

const isToolCallsStep = (step: StepRow): step is ToolCallsStep => step.stepDetails.type === 'tool_calls';

/**
 * The step of `steps` (a run's, in order) whose tool calls wait for their outputs: the last
 * tool-calls step in progress of a run in requires_action.
 */
export function toolCallsStepInProgress(steps: StepRow[], runId: string): ToolCallsStep {
  const step = steps.findLast((row) => row.type === 'tool_calls' && row.status === 'in_progress');
  if (!step || !isToolCallsStep(step))
    throw new Error(`run ${runId} requires action but has no tool-calls step in progress`);
  return step;
}

/** `step` as the outputs complete it (acceptToolOutputs writes it so). */
export function withToolOutputs(step: ToolCallsStep, outputs: Map<string, string>, at: number): ToolCallsStep {
  return {
    ...step,
    status: 'completed',
    completedAt: at,
    stepDetails: {
      ...step.stepDetails,
      // The file searches the gateway ran in the same turn keep their results.
      tool_calls: step.stepDetails.tool_calls.map((call) =>
        call.type === 'function'
          ? { ...call, function: { ...call.function, output: outputs.get(call.id) ?? null } }
          : call,
      ),
    },
  };
}

/**
 * Tool outputs in, run in progress again, in one transaction: the run takes `resumed`'s status,
 * lease and reservation only from requires_action (so a second submit finds nothing to do), and
 * the step (`completed`, withToolOutputs) takes the outputs only if the run moved. Answers whether
 * it did. The caller executes the run's next turn.
 */
export async function acceptToolOutputs(
  db: Db,
  resumed: Pick<RunRow, 'id' | 'status' | 'requiredAction' | 'leaseExpiresAt' | 'rateLimit'>,
  completed: ToolCallsStep,
): Promise<boolean> {
  const { status, requiredAction, leaseExpiresAt, rateLimit } = resumed;
  const { completedAt, stepDetails } = completed;
  // Raw statements (db/client.ts): on the path of every submission. The run goes back to
  // in_progress only from requires_action, and the step completes only if the run did.
  const [moved] = await batchRawResults(db, [
    updateStatement(
      runs,
      { status, requiredAction, leaseExpiresAt, rateLimit },
      runIn(resumed.id, ['requires_action']),
    ),
    updateStatement(
      runSteps,
      { status: completed.status, completedAt, stepDetails },
      {
        sql: `"id" = ? AND "status" = 'in_progress' AND (SELECT "status" FROM "runs" WHERE "runs"."id" = ?) = ?`,
        args: [completed.id, resumed.id, status],
      },
    ),
  ]);
  return (moved?.rowsAffected ?? 0) > 0;
}
