import { sql } from 'drizzle-orm';
import type { RunStatus } from './run-status-list';

/**
 * The statuses of runs and run steps, and the sets the code decides by: one list each, read by
 * the tables (db/schema.ts, their partial indexes), the queries and the engine
 * (resources/runs/), and the answers' schemas (http/objects.ts).
 */

// The list alone, in a module that imports nothing: the console's script takes it from there.
export { RUN_STATUSES, type RunStatus } from './run-status-list';

export const STEP_STATUSES = ['in_progress', 'cancelled', 'failed', 'completed', 'expired'] as const;
export type StepStatus = (typeof STEP_STATUSES)[number];

/** The statuses a run ends in: it changes no more. */
export const TERMINAL_STATUSES = ['completed', 'failed', 'cancelled', 'expired', 'incomplete'] satisfies RunStatus[];

/**
 * The statuses in which a run has an executor working on it, under a lease (runs.lease_expires_at):
 * a run left in one of them after its lease ran out lost its executor.
 */
export const ACTIVE_STATUSES = ['queued', 'in_progress', 'cancelling'] satisfies RunStatus[];

/** The statuses in which a run's executor owns it: it ends the run from them, as it ends or when it stops. */
export const EXECUTING_STATUSES = ['in_progress', 'cancelling'] satisfies RunStatus[];

/**
 * The statuses in which a run holds its thread: until it leaves them, the thread takes no other
 * run, no new message, and is not deleted (OpenAI's rule: one active run per thread).
 */
export const THREAD_HOLDING_STATUSES = ['queued', 'in_progress', 'requires_action', 'cancelling'] satisfies RunStatus[];

const isIn = (statuses: readonly RunStatus[]) => (status: RunStatus) => statuses.includes(status);
export const isTerminal = isIn(TERMINAL_STATUSES);
export const isActive = isIn(ACTIVE_STATUSES);
export const holdsThread = isIn(THREAD_HOLDING_STATUSES);

/**
 * `status IN (…)`, written out rather than bound: it is the WHERE of a partial index, and SQLite
 * uses a partial index only for a query whose WHERE contains the index's own.
 */
const statusIn = (statuses: readonly RunStatus[]) =>
  `status IN (${statuses.map((status) => `'${status}'`).join(', ')})`;

/**
 * The WHERE of the partial index runs_one_active_per_thread, finding a thread's active run in one
 * index probe: as text for raw statements (THREAD_HOLDING_SQL), and as SQL for Drizzle's.
 */
export const THREAD_HOLDING_SQL = statusIn(THREAD_HOLDING_STATUSES);
export const holdsThreadSql = sql.raw(THREAD_HOLDING_SQL);

/** The WHERE of the partial index runs_active_lease: the runs the recovery sweep looks at. */
export const activeSql = sql.raw(statusIn(ACTIVE_STATUSES));
