import { getTableColumns, sql, type SQL } from 'drizzle-orm';
import type { SQLiteTable } from 'drizzle-orm/sqlite-core';
import type { Config } from '../config';
import type { Db } from '../db/client';
import { ApiError } from '../errors';

/**
 * Per-workspace budgets on the control plane: no tenant can grow the rows that every request of
 * its workspace reads (policies), or the gateway's storage, without bound. Each cap is checked in
 * the statement that writes (`insertWhere`): SQLite runs a statement as one write transaction and
 * writers take turns, so any number of concurrent creates at the cap admit exactly the cap.
 */

export interface WorkspaceCaps {
  policies: number;
  policyConditions: number;
  policyBytes: number;
  virtualKeys: number;
  assistants: number;
}

export function workspaceCaps(config: Config): WorkspaceCaps {
  return {
    policies: config.GATEWAY_MAX_POLICIES_PER_WORKSPACE,
    policyConditions: config.GATEWAY_MAX_POLICY_CONDITIONS,
    policyBytes: config.GATEWAY_MAX_POLICY_BYTES_PER_WORKSPACE,
    virtualKeys: config.GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE,
    assistants: config.GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE,
  };
}

/**
 * `INSERT INTO table (every column) SELECT <values> WHERE <condition>`: the row is written only if
 * the condition holds when the statement runs. Values left out take the column's default (or
 * NULL, which an integer primary key turns into the next rowid). Chain `.returning()`: no row back
 * means the condition did not hold (or, with `.onConflictDoNothing()`, a conflict).
 */
export function insertWhere<T extends SQLiteTable>(db: Db, table: T, values: T['$inferInsert'], condition: SQL) {
  const given = new Map(Object.entries(values));
  const selected = Object.entries(getTableColumns(table)).map(([key, column]) => {
    const value: unknown = given.has(key) ? given.get(key) : column.default;
    return value === undefined ? sql`NULL` : sql.param(value, column);
  });
  return db.insert(table).select(sql`SELECT ${sql.join(selected, sql`, `)} WHERE ${condition}`);
}

/** The 400 for a spent budget: which cap, and how much of it is used. */
export function quotaExceeded(message: string, param: string | null = null): ApiError {
  return new ApiError('quota_exceeded', message, { param });
}

/** UTF-8 bytes of a string: what SQLite's length(CAST(x AS BLOB)) counts. */
export function utf8Bytes(text: string): number {
  return new TextEncoder().encode(text).length;
}
