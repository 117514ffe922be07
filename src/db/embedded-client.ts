import type { Client, InArgs, InStatement, InValue, ResultSet, Row, TransactionMode } from '@libsql/client';
import { setImmediate } from 'node:timers';
import Database from 'libsql';
import { nodeSlices } from '../node-slices';

/**
 * The embedded database's client: the part of @libsql/client's `Client` that Drizzle and the
 * counter store use (execute, batch, migrate), over the same `libsql` binding @libsql/client
 * uses, but with each SQL text prepared once and its columns described once.
 *
 * @libsql/client prepares every statement on every call, asks for its columns twice, and builds
 * each row cell by cell with Object.defineProperty; on the request path that was most of the
 * database's cost (about 0.2 ms a statement). Here a statement seen before costs its execution.
 *
 * Writes commit in groups. With `synchronous = FULL` every commit waits for the disk (an fsync,
 * ~0.25 ms here, several under load), and a run commits a few times; so the batches and write
 * statements issued in the same turn of the event loop share one transaction, each inside a
 * SAVEPOINT of its own: a failing caller's writes are rolled back alone, the others commit
 * together, and nobody is answered before the commit is durable. Reads run at once.
 *
 * Semantics kept from @libsql/client: one connection; a batch is atomic, rolled back whole on any
 * error; `migrate` runs with foreign keys off; integers come back as numbers; rows answer by index
 * and by column name, and only the names are enumerable. Interactive transactions are not offered:
 * the app writes with batches only (see client.ts).
 */

/**
 * A group commit takes writes until their arguments reach this size; the rest wait for the next
 * turn. Writing a large value holds the event loop (10 to 30 ms for 4 MiB), so a group this large
 * commits in a slice of the event loop of its own (lib/slices.ts), and several large answers
 * ending together commit one per turn, with requests served in between, not all at once.
 */
const MAX_GROUP_BYTES = 1024 * 1024;

/** Statements kept prepared: the app has a few dozen distinct ones; the bound only guards misuse. */
const MAX_CACHED_STATEMENTS = 500;

interface Prepared {
  statement: Database.Statement;
  /** Whether the statement only reads (an INSERT … RETURNING returns rows but is not read-only). */
  readonly: boolean;
  /** Null for statements that return no rows. */
  shape: RowShape | null;
  columns: string[];
  columnTypes: string[];
}

/** Rows of one column list share a prototype that answers by index and has the length. */
interface RowShape {
  names: string[];
  /** Whether a column name is the first of its name (a later duplicate answers by index only). */
  firstOfName: boolean[];
  prototype: object;
}

const VALUES = Symbol('values');

/**
 * Whether a statement that returns rows only reads. SQLite knows (sqlite3_stmt_readonly), but the
 * libsql binding does not say (its Statement has no `readonly`), so the text tells: a SELECT or
 * VALUES, or a WITH whose statement is one (not an INSERT, UPDATE, DELETE or REPLACE … RETURNING).
 */
function readsOnly(sql: string): boolean {
  if (/^\s*(SELECT|VALUES)\b/i.test(sql)) return true;
  return /^\s*WITH\b/i.test(sql) && !/\b(INSERT|UPDATE|DELETE|REPLACE)\b/i.test(sql);
}
const PRAGMA = /^\s*PRAGMA\b/i;

function rowShape(names: string[]): RowShape {
  const prototype = {};
  names.forEach((_name, index) => {
    Object.defineProperty(prototype, index, {
      get(this: { [VALUES]: unknown[] }) {
        return this[VALUES][index];
      },
    });
  });
  Object.defineProperty(prototype, 'length', { value: names.length });
  const seen = new Set<string>();
  const firstOfName = names.map((name) => {
    if (seen.has(name)) return false;
    seen.add(name);
    return true;
  });
  return { names, firstOfName, prototype };
}

function toRow(shape: RowShape, values: unknown[]): Row {
  const row = Object.create(shape.prototype) as Record<string | symbol, unknown>;
  Object.defineProperty(row, VALUES, { value: values });
  for (let i = 0; i < values.length; i++) if (shape.firstOfName[i]) row[shape.names[i]!] = values[i];
  return row as unknown as Row;
}

function toSqlValue(value: InValue | undefined): unknown {
  if (value === undefined) return null;
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Date) return value.valueOf();
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  return value;
}

function toArgs(args: InArgs | undefined): unknown[] | Record<string, unknown> {
  if (args === undefined) return [];
  if (Array.isArray(args)) return args.map(toSqlValue);
  const named: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(args)) {
    named[name[0] === '@' || name[0] === '$' || name[0] === ':' ? name.slice(1) : name] = toSqlValue(value);
  }
  return named;
}

class Result implements ResultSet {
  constructor(
    readonly columns: string[],
    readonly columnTypes: string[],
    readonly rows: Row[],
    readonly rowsAffected: number,
    readonly lastInsertRowid: bigint | undefined,
  ) {}

  toJSON() {
    return {
      columns: this.columns,
      columnTypes: this.columnTypes,
      rows: this.rows.map((row) => Array.prototype.slice.call(row)),
      rowsAffected: this.rowsAffected,
      lastInsertRowid: this.lastInsertRowid === undefined ? null : String(this.lastInsertRowid),
    };
  }
}

/** A caller's writes waiting for the next group commit. */
interface PendingWrite {
  statements: { sql: string; args?: InArgs }[];
  resolve(results: Result[]): void;
  reject(error: unknown): void;
}

export class EmbeddedClient {
  readonly protocol = 'file';
  readonly #db: Database.Database;
  readonly #statements = new Map<string, Prepared>();
  #pending: PendingWrite[] = [];
  readonly #groupCommit: boolean;
  closed = false;

  /**
   * @param options.timeoutMs how long to wait for another process's write lock (SQLite's busy timeout).
   * @param options.groupCommit false: each write commits at once, in its own transaction. For a
   *   connection whose commits do not wait for the disk, where a group saves nothing and waiting
   *   for the end of the event loop's turn would only add latency.
   */
  constructor(path: string, options: EmbeddedClientOptions) {
    this.#db = new Database(path, { timeout: options.timeoutMs });
    this.#groupCommit = options.groupCommit ?? true;
  }

  async execute(statement: InStatement, args?: InArgs): Promise<ResultSet> {
    this.#checkOpen();
    const { sql, args: bound } = normalise(statement, args);
    // Reads, and pragmas (some of which cannot run inside a transaction), run at once.
    if (this.#prepare(sql).readonly || PRAGMA.test(sql)) return this.#run(sql, bound);
    const [result] = await this.#write([{ sql, args: bound }]);
    return result!;
  }

  /** A batch is atomic; its mode does not matter here: every write group takes the write lock. */
  async batch(statements: (InStatement | [string, InArgs?])[], _mode?: TransactionMode): Promise<ResultSet[]> {
    this.#checkOpen();
    const normalised = statements.map((statement) =>
      Array.isArray(statement) ? { sql: statement[0], args: statement[1] } : normalise(statement),
    );
    if (normalised.every(({ sql }) => this.#prepare(sql).readonly)) {
      return this.#inTransaction('BEGIN DEFERRED', () => normalised.map(({ sql, args }) => this.#run(sql, args)));
    }
    return this.#write(normalised);
  }

  async migrate(statements: InStatement[]): Promise<ResultSet[]> {
    this.#checkOpen();
    this.#run('PRAGMA foreign_keys = off');
    try {
      return this.#inTransaction('BEGIN DEFERRED', () => statements.map((statement) => this.#runStatement(statement)));
    } finally {
      this.#run('PRAGMA foreign_keys = on');
    }
  }

  async executeMultiple(sql: string): Promise<void> {
    this.#checkOpen();
    this.#db.exec(sql);
  }

  async transaction(): Promise<never> {
    throw new Error('Interactive transactions are not supported on the embedded database: use db.batch (see src/db/client.ts).');
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.#statements.clear();
    this.#db.close();
  }

  /** Queues writes for the group commit that ends this turn of the event loop (or commits them now). */
  #write(statements: { sql: string; args?: InArgs }[]): Promise<Result[]> {
    return new Promise((resolve, reject) => {
      if (!this.#groupCommit) {
        resolve(this.#inTransaction('BEGIN IMMEDIATE', () => statements.map(({ sql, args }) => this.#run(sql, args))));
        return;
      }
      if (this.#pending.length === 0) setImmediate(() => this.#commitGroup());
      this.#pending.push({ statements, resolve, reject });
    });
  }

  #commitGroup(): void {
    let taken = 0;
    let bytes = 0;
    for (; taken < this.#pending.length && (taken === 0 || bytes < MAX_GROUP_BYTES); taken++) {
      bytes += argumentBytes(this.#pending[taken]!);
    }
    const group = this.#pending.slice(0, taken);
    this.#pending = this.#pending.slice(taken);
    if (this.#pending.length > 0) setImmediate(() => this.#commitGroup());
    if (bytes >= MAX_GROUP_BYTES) void nodeSlices.ownSlice(() => this.#commit(group));
    else this.#commit(group);
  }

  #commit(group: PendingWrite[]): void {
    if (this.closed) {
      for (const write of group) write.reject(new Error('The database client is closed'));
      return;
    }
    const outcomes: ({ results: Result[] } | { error: unknown })[] = [];
    try {
      this.#inTransaction('BEGIN IMMEDIATE', () => {
        for (const write of group) {
          this.#run('SAVEPOINT caller');
          try {
            outcomes.push({ results: write.statements.map(({ sql, args }) => this.#run(sql, args)) });
            this.#run('RELEASE caller');
          } catch (error) {
            this.#run('ROLLBACK TO caller');
            this.#run('RELEASE caller');
            outcomes.push({ error });
          }
        }
      });
    } catch (error) {
      // BEGIN or COMMIT failed (a lock held too long by another process, a full disk): nothing of
      // the group was written.
      for (const write of group) write.reject(error);
      return;
    }
    group.forEach((write, i) => {
      const outcome = outcomes[i]!;
      if ('error' in outcome) write.reject(outcome.error);
      else write.resolve(outcome.results);
    });
  }

  #inTransaction<T>(begin: string, work: () => T): T {
    this.#run(begin);
    try {
      const result = work();
      this.#run('COMMIT');
      return result;
    } catch (error) {
      if (this.#db.inTransaction) this.#run('ROLLBACK');
      throw error;
    }
  }

  #runStatement(statement: InStatement, args?: InArgs): Result {
    const { sql, args: bound } = normalise(statement, args);
    return this.#run(sql, bound);
  }

  #run(sql: string, args?: InArgs): Result {
    const prepared = this.#prepare(sql);
    const bound = toArgs(args);
    if (prepared.shape) {
      const shape = prepared.shape;
      const rows = (prepared.statement.all(bound) as unknown[][]).map((values) => toRow(shape, values));
      return new Result(prepared.columns, prepared.columnTypes, rows, 0, undefined);
    }
    const info = prepared.statement.run(bound);
    return new Result([], [], [], info.changes, BigInt(info.lastInsertRowid));
  }

  #prepare(sql: string): Prepared {
    const cached = this.#statements.get(sql);
    if (cached) return cached;
    const statement = this.#db.prepare(sql);
    let prepared: Prepared;
    if (statement.reader) {
      statement.raw(true);
      const described = statement.columns();
      const columns = described.map((column) => column.name);
      prepared = {
        statement,
        readonly: readsOnly(sql),
        shape: rowShape(columns),
        columns,
        columnTypes: described.map((column) => column.type ?? ''),
      };
    } else {
      prepared = { statement, readonly: false, shape: null, columns: [], columnTypes: [] };
    }
    // Statements that change the schema invalidate prepared ones; they are rare (migrations) and
    // SQLite re-prepares transparently, so only the cache size needs a bound.
    if (this.#statements.size >= MAX_CACHED_STATEMENTS) {
      this.#statements.delete(this.#statements.keys().next().value!);
    }
    this.#statements.set(sql, prepared);
    return prepared;
  }

  #checkOpen(): void {
    if (this.closed) throw new Error('The database client is closed');
  }
}

/** About how many bytes a write's arguments hold (strings by their length). */
function argumentBytes(write: PendingWrite): number {
  let bytes = 0;
  for (const { args } of write.statements) {
    for (const value of args === undefined ? [] : Array.isArray(args) ? args : Object.values(args)) {
      if (typeof value === 'string') bytes += value.length;
      else if (value instanceof ArrayBuffer || ArrayBuffer.isView(value)) bytes += value.byteLength;
    }
  }
  return bytes;
}

function normalise(statement: InStatement, args?: InArgs): { sql: string; args?: InArgs } {
  return typeof statement === 'string' ? { sql: statement, args } : { sql: statement.sql, args: statement.args };
}

export interface EmbeddedClientOptions {
  timeoutMs: number;
  groupCommit?: boolean;
}

/** The embedded client where code expects @libsql/client's `Client`. */
export function openEmbeddedClient(path: string, options: EmbeddedClientOptions): Client {
  return new EmbeddedClient(path, options) as unknown as Client;
}
