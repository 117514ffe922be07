import type { Client, InStatement, InValue, ResultSet } from '@libsql/client';
import {
  fillPlaceholders,
  getTableColumns,
  getTableName,
  sql,
  type Column,
  type InferInsertModel,
  type InferSelectModel,
  type SQL,
  type Table,
} from 'drizzle-orm';
import type { BatchItem } from 'drizzle-orm/batch';
import type { LibSQLDatabase } from 'drizzle-orm/libsql';
import { SQLiteAsyncDialect, type SQLiteTable } from 'drizzle-orm/sqlite-core';
import { TextParts } from '../lib/text';
import type * as schema from './schema';

type Driver = LibSQLDatabase<typeof schema>;
type Transaction = Parameters<Driver['transaction']>[0] extends (tx: infer Tx) => unknown ? Tx : never;

/**
 * The database as the app sees it: Drizzle over libSQL, whichever driver the entry chose
 * (`drizzle-orm/libsql/sqlite3` on Node, `drizzle-orm/libsql/http` over the Worker's own client,
 * http-client.ts, on Workers). Type-only on purpose.
 *
 * Atomic writes go through `db.batch([...])`, never `db.transaction()`: a batch runs as one
 * transaction in one call on every driver, while an interactive transaction on the embedded file
 * holds SQLite's write lock across awaits, and a second one in the same process would then wait
 * for it synchronously, blocking the very event loop that has to finish the first. So
 * `transaction` is typed here so that no call compiles (its `this` would have to be `never`),
 * while the type stays interchangeable with what the drivers return and Drizzle's migrator takes.
 */
export interface Db extends Driver {
  /**
   * The libSQL client under Drizzle (what both drivers return): `batchRaw` hands it statements
   * directly, with their TextParts as they are to a client that takes them (PartsClient).
   */
  readonly $client: Client & Partial<PartsClient> & Partial<ReadsCarrier>;
  /** Not for this app: use `db.batch`. */
  transaction<T>(this: never, transaction: (tx: Transaction) => Promise<T>): Promise<T>;
}

/** One statement of a batch. */
export type Statement = BatchItem<'sqlite'>;

/**
 * Whether a statement only reads. SQLite knows (sqlite3_stmt_readonly), but neither the libsql
 * binding nor a server's client says, so the text tells: a SELECT or VALUES, or a WITH whose
 * statement is one (not an INSERT, UPDATE, DELETE or REPLACE … RETURNING). What it calls a read the
 * embedded client runs on the event loop's connection, and a server's clients send without a write
 * turn, together with other reads (busy-retry.ts, coalescing-client.ts).
 */
export function readsOnly(sql: string): boolean {
  if (/^\s*(SELECT|VALUES)\b/i.test(sql)) return true;
  return /^\s*WITH\b/i.test(sql) && !/\b(INSERT|UPDATE|DELETE|REPLACE)\b/i.test(sql);
}

/** A statement of Drizzle's query builder (an insert, an update, a delete, a select), which tells its SQL. */
export type BuiltStatement = Statement & { toSQL(): { sql: string; params: unknown[] } };

/**
 * A builder's statement as a raw one (its SQL and arguments, as Drizzle makes them), so that it can
 * join a batch of raw statements: the hot inserts (insertStatement) and what a caller adds to them.
 */
export function rawOf(statement: BuiltStatement): RawStatement {
  const { sql, params } = statement.toSQL();
  return { sql, args: params.map(driverValue) };
}

/** A value as Drizzle hands it to the driver: what the libSQL client takes. */
function driverValue(value: unknown): InValue {
  if (
    value === null ||
    typeof value === 'string' ||
    typeof value === 'number' ||
    typeof value === 'bigint' ||
    typeof value === 'boolean' ||
    value instanceof Uint8Array ||
    value instanceof ArrayBuffer ||
    value instanceof Date
  ) {
    return value;
  }
  throw new TypeError(`a statement's argument the database cannot take: ${typeof value}`);
}

/**
 * `db.batch` over a list built at run time, for writes whose results nobody reads. (A batch of a
 * tuple written out, `db.batch([a, b])`, types each result: read results from one of those.)
 */
export async function batchWrites(db: Db, statements: Statement[]): Promise<void> {
  const [first, ...rest] = statements;
  if (first) await db.batch([first, ...rest]);
}

/**
 * A query prepared once per database (Drizzle builds its SQL once, not on every call), for the
 * queries on every request's path. `build` receives the database and returns `.prepare()`d query.
 */
export function preparedQuery<T>(build: (db: Db) => T): (db: Db) => T {
  return preparedQueries(build, () => '');
}

/**
 * preparedQuery for a query whose SQL takes a few shapes (an order, a filter present or not): one
 * prepared per database and shape, `shapeOf` naming the shape of the arguments `build` takes. The
 * shapes must be few (they are kept), and everything `build` puts in the SQL must be in the name.
 */
export function preparedQueries<Args extends unknown[], T>(
  build: (db: Db, ...args: Args) => T,
  shapeOf: (...args: Args) => string,
): (db: Db, ...args: Args) => T {
  const prepared = new WeakMap<Db, Map<string, T>>();
  return (db, ...args) => {
    let shapes = prepared.get(db);
    if (shapes === undefined) prepared.set(db, (shapes = new Map()));
    const shape = shapeOf(...args);
    let query = shapes.get(shape);
    if (query === undefined) {
      query = build(db, ...args);
      shapes.set(shape, query);
    }
    return query;
  };
}

/**
 * Whether `error` is SQLite refusing a write for a duplicate in a unique index on `columns`
 * (`runs.thread_id`), as each driver reports it: the embedded client's SqliteError (code
 * SQLITE_CONSTRAINT_UNIQUE), @libsql/client's LibsqlError or LibsqlBatchError over HTTP (code
 * SQLITE_CONSTRAINT), either of them wrapped by Drizzle as the `cause` of a DrizzleQueryError. All
 * carry SQLite's own message, which names the index's columns.
 */
export function isUniqueViolation(error: unknown, columns: string): boolean {
  const needle = `UNIQUE constraint failed: ${columns}`;
  for (let cause = error, depth = 0; cause instanceof Error && depth < 8; cause = cause.cause, depth++) {
    const code = 'code' in cause ? cause.code : undefined;
    if (typeof code === 'string' && code.startsWith('SQLITE_CONSTRAINT') && cause.message.includes(needle)) return true;
  }
  return false;
}

/**
 * A long text argument may come as TextParts (lib/text.ts): a run's answer of up to
 * GATEWAY_MAX_ANSWER_BYTES, streamed in pieces of a few KiB. Joined, escaped as JSON and copied to
 * the embedded database's writer thread whole, a 4 MiB answer cost the event loop three fresh
 * copies of 4 MiB, 35 to 90 ms on a machine where first touching memory is slow (page faults of
 * about 14 µs a page), while every other request waited. The embedded client hands the pieces over
 * as they are and its writer thread joins them; other clients are given the joined text.
 */

/** A value of a raw statement: what the libSQL client takes, or a long text in parts. */
export type RawValue = InValue | TextParts;

/** A statement as SQL text and its arguments, as the libSQL client takes it (TextParts aside). */
export interface RawStatement {
  sql: string;
  args: RawValue[];
}

/** A client that takes TextParts arguments without their being joined first (the embedded client). */
export interface PartsClient {
  /** `batch` of raw statements: one transaction, their results in order. */
  batchWithParts(statements: RawStatement[]): Promise<ResultSet[]>;
}

/** A client that sends a write with the reads issued beside it, in one round trip (coalescing-client.ts). */
export interface ReadsCarrier {
  /** Writes `statements` in one transaction after the reads issued within the same few turns. */
  batchWithReads(statements: InStatement[]): Promise<ResultSet[]>;
}

/** Per table: its columns with a `$defaultFn`, and for each set of fields written, the insert's head and `?`s. */
const insertShapes = new WeakMap<
  Table,
  { generated: [string, () => unknown][]; shapes: Map<string, { head: string; marks: string; columns: Column[] }> }
>();

/**
 * The insert of one row into `table`, as a raw statement: the same SQL and arguments Drizzle's
 * builder makes (each value through its column's mapping: JSON, timestamps, booleans), without
 * building it anew for every row: on the hot path of a run (its thread, messages, run and steps)
 * the builder cost about 40 µs a row. A field left undefined takes its column's `$defaultFn`, or else
 * is left out, so that the database's default applies. `encoded` sets columns to values already in
 * their stored form, as text in parts (a JSON column's JSON), as updateStatement's does.
 */
export function insertStatement<T extends Table>(
  table: T,
  row: InferInsertModel<T>,
  options: { encoded?: Encoded<T> } = {},
): RawStatement {
  const { head, marks, args } = insertParts(table, row, options.encoded);
  return { sql: `${head} values (${marks})`, args };
}

/** Columns given in their stored form, as text in parts (insertStatement, updateStatement). */
export type Encoded<T extends Table> = Partial<Record<keyof InferInsertModel<T>, TextParts>>;

/**
 * `INSERT INTO table (every column) SELECT <values> WHERE <condition>`, as Drizzle's builder: the
 * row is written only if the condition holds when the statement runs, for a condition written in
 * Drizzle (a quota's count, a subquery) and a statement batched with other builders. Values left
 * out take the column's default (or NULL, which an integer primary key turns into the next rowid).
 * Chain `.returning()`: no row back means the condition did not hold (or, with
 * `.onConflictDoNothing()`, a conflict). The hot path's raw form is insertWhereStatement.
 */
export function insertWhere<T extends SQLiteTable>(db: Db, table: T, values: T['$inferInsert'], condition: SQL) {
  const given = new Map(Object.entries(values));
  const selected = Object.entries(getTableColumns(table)).map(([key, column]) => {
    const value: unknown = given.has(key) ? given.get(key) : column.default;
    return value === undefined ? sql`NULL` : sql.param(value, column);
  });
  return db.insert(table).select(sql`SELECT ${sql.join(selected, sql`, `)} WHERE ${condition}`);
}

/**
 * The insert of one row, as insertStatement, made only while `condition` holds (`INSERT … SELECT
 * … WHERE`), answering the row written (read it with rowOf) or none, unless `returning` is false:
 * a write and its check in one statement, which nothing can come between.
 */
export function insertWhereStatement<T extends Table>(
  table: T,
  row: InferInsertModel<T>,
  condition: RawCondition,
  options: { encoded?: Encoded<T>; returning?: boolean } = {},
): RawStatement {
  const { head, marks, args } = insertParts(table, row, options.encoded);
  return {
    sql: `${head} select ${marks} where ${condition.sql}${options.returning === false ? '' : ' returning *'}`,
    args: [...args, ...condition.args],
  };
}

function insertParts<T extends Table>(
  table: T,
  row: InferInsertModel<T>,
  encoded?: Encoded<T>,
): { head: string; marks: string; args: RawValue[] } {
  let known = insertShapes.get(table);
  if (!known) {
    const generated = Object.entries(getTableColumns(table)).flatMap(([key, column]): [string, () => unknown][] =>
      column.defaultFn ? [[key, column.defaultFn]] : [],
    );
    insertShapes.set(table, (known = { generated, shapes: new Map() }));
  }
  // A copy only when there is something to add: the row is read, not kept.
  const values: Record<string, unknown> = known.generated.length > 0 || encoded ? { ...row, ...encoded } : row;
  for (const [key, generate] of known.generated) {
    if (values[key] === undefined) values[key] = generate();
  }
  const keys = Object.keys(values).filter((key) => values[key] !== undefined);
  const signature = keys.join(',');
  let shape = known.shapes.get(signature);
  if (!shape) {
    const columns = columnsOf(table, keys);
    const names = columns.map((column) => `"${column.name}"`).join(', ');
    shape = {
      head: `insert into "${getTableName(table)}" (${names})`,
      marks: columns.map(() => '?').join(', '),
      columns,
    };
    known.shapes.set(signature, shape);
  }
  const { head, marks, columns } = shape;
  return { head, marks, args: driverValues(keys, values, columns, encoded) };
}

/** The arguments for `keys`' columns: each value through its column's mapping, but those given `encoded`, as they are. */
function driverValues(
  keys: string[],
  values: Record<string, unknown>,
  columns: Column[],
  encoded: Partial<Record<string, TextParts>> = {},
): RawValue[] {
  return keys.map((key, i) => {
    const value = values[key];
    if (value === null) return null;
    const column = columns[i];
    if (!column) throw new Error(`no column for the value of ${key}`);
    return encoded[key] ?? (column.mapToDriverValue(value) as InValue);
  });
}

/** The columns of `table` that `keys` (its fields' names) name, in their order; an unknown name throws. */
function columnsOf(table: Table, keys: string[]): Column[] {
  const all = getTableColumns(table);
  return keys.map((key) => {
    const column = all[key];
    if (!column) throw new Error(`${getTableName(table)} has no column ${key}`);
    return column;
  });
}

/**
 * Writes `statements` in one transaction, as `db.batch` does (it hands the client such a list):
 * for the hot writes, whose results nobody reads.
 */
export async function batchRaw(db: Db, statements: RawStatement[]): Promise<void> {
  if (statements.length > 0) await rawBatch(db, statements);
}

/** A condition of a raw statement: SQL text with `?` for each of its arguments. */
export interface RawCondition {
  sql: string;
  args: InValue[];
}

/**
 * A raw condition as Drizzle SQL, for a builder's `where`: its text with each `?` bound to the
 * argument in its place. So a condition that both kinds of statement use is written once. Its text
 * has no `?` but those marks (no string literal holds one).
 */
export function sqlOf(condition: RawCondition): SQL {
  const parts = condition.sql.split('?');
  if (parts.length !== condition.args.length + 1)
    throw new Error(`a raw condition with ${parts.length - 1} marks and ${condition.args.length} arguments`);
  return sql.join(
    parts.flatMap((part, i) => (i === 0 ? [sql.raw(part)] : [sql`${condition.args[i - 1]}`, sql.raw(part)])),
  );
}

/**
 * Drizzle SQL as a raw one, the other way round from sqlOf: its text, compiled once (on first use),
 * with each `sql.placeholder` filled from `values` on every call. So a piece of SQL that prepared
 * queries take with placeholders and a raw statement takes too is written once.
 */
export function rawQueryOf(fragment: SQL): (values: Record<string, unknown>) => RawCondition {
  let compiled: { sql: string; params: unknown[] } | undefined;
  return (values) => {
    compiled ??= dialect.sqlToQuery(fragment);
    return { sql: compiled.sql, args: fillPlaceholders(compiled.params, values).map(driverValue) };
  };
}
/** What compiles rawQueryOf's SQL: SQLite's, as the drivers' (no casing option: the schema names every column). */
const dialect = new SQLiteAsyncDialect();

const updateShapes = new WeakMap<Table, Map<string, { set: string; columns: Column[] }>>();

/**
 * `update <table> set <patch> where <condition>` as a raw statement (see insertStatement): the set
 * clause is built once per table and set of fields; each value goes through its column's mapping.
 * Fields left undefined are not changed. `encoded` sets columns to values already in their stored
 * form, as text in parts (a JSON column's JSON). `returning` adds `returning *`: read it with rowOf.
 */
export function updateStatement<T extends Table>(
  table: T,
  patch: Partial<InferInsertModel<T>>,
  where: RawCondition,
  options: { returning?: boolean; encoded?: Encoded<T> } = {},
): RawStatement {
  const { encoded } = options;
  // A copy only when there is something to add: the patch is read, not kept.
  const values: Record<string, unknown> = encoded ? { ...patch, ...encoded } : patch;
  const keys = Object.keys(values).filter((key) => values[key] !== undefined);
  if (keys.length === 0) throw new Error(`an update of ${getTableName(table)} that changes nothing`);
  let shapes = updateShapes.get(table);
  if (!shapes) updateShapes.set(table, (shapes = new Map()));
  const signature = keys.join(',');
  let shape = shapes.get(signature);
  if (!shape) {
    const columns = columnsOf(table, keys);
    shape = {
      set: `update "${getTableName(table)}" set ${columns.map((column) => `"${column.name}" = ?`).join(', ')} where `,
      columns,
    };
    shapes.set(signature, shape);
  }
  const args = driverValues(keys, values, shape.columns, encoded);
  return { sql: `${shape.set}${where.sql}${options.returning ? ' returning *' : ''}`, args: [...args, ...where.args] };
}

/** A row the client returned (columns by their SQL names), as Drizzle maps it: each value through its column's mapping. */
export function rowOf<T extends Table>(table: T, row: Record<string, unknown>): InferSelectModel<T> {
  const mapped: Record<string, unknown> = {};
  for (const [key, column] of Object.entries(getTableColumns(table))) {
    const value = row[column.name];
    mapped[key] = value === null || value === undefined ? null : column.mapFromDriverValue(value);
  }
  // Every column of the table, mapped as Drizzle maps them: the model's shape, which a loop over the
  // columns cannot show the compiler.
  return mapped as InferSelectModel<T>;
}

/**
 * The rows a write returns (a builder's statement with RETURNING on `table`), led by `guard` when
 * there is one (the settings', ProvisionalSettings.guard): both in one transaction, one round trip
 * to a database server. Without a guard, the statement alone.
 */
export async function returnedRows<T extends Table>(
  db: Db,
  table: T,
  statement: BuiltStatement & PromiseLike<InferSelectModel<T>[]>,
  guard: RawStatement | null,
): Promise<InferSelectModel<T>[]> {
  if (!guard) return statement;
  const [, written] = await rawBatch(db, [guard, rawOf(statement)]);
  return (written?.rows ?? []).map((row) => rowOf(table, row));
}

/**
 * The row a request's path names, and what was read beside it by the path's ids, all issued
 * together (one round trip to a database server: coalescing-client.ts). They are awaited in the
 * order given, so the row's error (a 404) is the answer whatever was read beside it found: what was
 * read beside is looked at only once the row is found, and so the caller's to read.
 */
export async function besideRow<T extends readonly [Promise<unknown>, ...Promise<unknown>[]]>(
  ...reads: T
): Promise<{ -readonly [K in keyof T]: Awaited<T[K]> }> {
  for (const read of reads) read.catch(() => undefined);
  for (const read of reads) await read;
  return Promise.all(reads);
}

/** Runs `statements` in one transaction, as batchRaw does, and answers the client's results. */
export async function batchRawResults(db: Db, statements: RawStatement[]): Promise<ResultSet[]> {
  return rawBatch(db, statements);
}

/**
 * batchRawResults, taking along to a database server the reads issued beside it (in the same few
 * turns of the microtask queue), before its statements in the same transaction: one round trip for
 * both (ReadsCarrier). Elsewhere a plain batch, the reads going their own way.
 */
export function batchWithReads(db: Db, statements: RawStatement[]): Promise<ResultSet[]> {
  const client = db.$client;
  if (client.batchWithReads) return client.batchWithReads(plain(statements));
  return rawBatch(db, statements);
}

function rawBatch(db: Db, statements: RawStatement[]): Promise<ResultSet[]> {
  const client = db.$client;
  if (client.batchWithParts) return client.batchWithParts(statements);
  return client.batch(plain(statements));
}

/** Statements as any client takes them: their TextParts joined. */
const plain = (statements: RawStatement[]): InStatement[] =>
  statements.map(({ sql, args }) => ({ sql, args: args.map(joined) }));

const joined = (value: RawValue): InValue => (value instanceof TextParts ? value.toString() : value);
