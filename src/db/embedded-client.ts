import type { Client, InArgs, InStatement, ResultSet, TransactionMode } from '@libsql/client';
import { setImmediate } from 'node:timers';
import { Worker } from 'node:worker_threads';
import Database from 'libsql';
import { BoundedMap } from '../lib/bounded-map';
import { TextParts } from '../lib/text';
import { readsOnly, type PartsClient, type RawStatement, type RawValue } from './client';
import { Result, rowShape, toRow, type RowShape } from './result-set';
import type { DatabaseTimings } from '../metrics/gateway';

/**
 * The embedded database's client: the part of @libsql/client's `Client` that Drizzle and the
 * counter store use (execute, batch, migrate), over the same `libsql` binding @libsql/client
 * uses, but with each SQL text prepared once and its columns described once.
 *
 * @libsql/client prepares every statement on every call, asks for its columns twice, and builds
 * each row cell by cell with Object.defineProperty; on the request path that was most of the
 * database's cost (about 0.2 ms a statement). Here a statement seen before costs its execution.
 *
 * Every call into SQLite holds the thread that makes it, so the file has two connections:
 *
 * - On this thread, the event loop's, one reads, at once: a read of a few rows takes microseconds.
 *   It also commits the writes of the immediate client (openEmbeddedClients), each at once in a
 *   transaction of its own, and migrations.
 * - On a thread of its own (embedded-writer.js), the other commits the app's writes. A commit is
 *   what takes long: writing the pages (10 to 30 ms for an answer of 4 MiB), the fsync, and every
 *   1000 pages a checkpoint copying the WAL into the database file (about 10 ms for 4 MiB, with
 *   two more fsyncs). On this thread each of them held every other request for its duration;
 *   committing without the fsync, or checkpointing elsewhere, would still leave the largest part,
 *   writing the pages, here.
 *
 * The app's writes commit in groups: the batches and write statements issued while the writer
 * thread commits (or in the same turn of the event loop, when it is idle) share its next
 * transaction, each kept whole or not at all: a failing caller's writes are rolled back alone (the
 * group is then written again with a SAVEPOINT per caller), the others commit together, and nobody
 * is answered before the commit is durable. The writer's
 * connection commits with `synchronous = FULL` (the WAL is flushed to the disk before COMMIT
 * returns) and checkpoints every 1000 pages of WAL, SQLite's default, so a group costs one fsync
 * however many writes it holds.
 *
 * The two connections take turns to write, since SQLite has one writer at a time and a connection
 * that finds the file locked waits for it, holding its thread: this thread writes only while no
 * group is on the writer thread, and a group is posted only between this thread's writes. Neither
 * ever waits for the other's lock; only another process (the CLI, a second gateway) can make one
 * wait, up to `timeoutMs`. Reads never wait for the writer in WAL mode, which the file must be in
 * (node.ts sets it): with a rollback journal, a read would wait for every commit on this thread.
 *
 * Semantics kept from @libsql/client: a batch is atomic, rolled back whole on any error; `migrate`
 * runs with foreign keys off; integers come back as numbers; rows answer by index and by column
 * name, and only the names are enumerable. Interactive transactions are not offered: the app
 * writes with batches only (see client.ts).
 */

/**
 * A group takes writes until their arguments reach this size; the rest wait for the next group.
 * A group's arguments are copied to the writer thread on this thread (about 1 ms per MiB), so
 * several large answers ending together go one per group, not all in one copy.
 */
const MAX_GROUP_BYTES = 1024 * 1024;

/** Statements kept prepared: the app has a few dozen distinct ones; the bound only guards misuse. */
const MAX_CACHED_STATEMENTS = 500;

/** The writer thread's young generation (resourceLimits.maxYoungGenerationSizeMb). */
const WRITER_YOUNG_GENERATION_MB = 4;

interface Prepared {
  statement: Database.Statement;
  /** Whether the statement only reads (an INSERT … RETURNING returns rows but is not read-only). */
  readonly: boolean;
  /** Null for statements that return no rows. */
  shape: RowShape | null;
  /** Whether the text limits its rows to one: `LIMIT 1`, or `LIMIT ?` when its argument (the last) is 1. */
  oneRow: 'always' | 'if the last argument is 1' | 'never';
  columns: string[];
  columnTypes: string[];
}

const PRAGMA = /^\s*PRAGMA\b/i;
/** A text that ends with a limit of one row, or of an argument (Drizzle's `.limit(1)` binds it). */
const LIMIT = /\blimit\s+(1|\?)\s*;?\s*$/i;

function oneRowOf(sql: string): Prepared['oneRow'] {
  const limit = LIMIT.exec(sql)?.[1];
  return limit === '1' ? 'always' : limit === '?' ? 'if the last argument is 1' : 'never';
}

/** Whether a statement returns one row at most: its limit says so. */
function atMostOneRow(prepared: Prepared, bound: unknown[] | Record<string, unknown>): boolean {
  if (prepared.oneRow === 'always') return true;
  return prepared.oneRow === 'if the last argument is 1' && Array.isArray(bound) && bound.at(-1) === 1;
}

function toSqlValue(value: RawValue | undefined): unknown {
  if (value === undefined) return null;
  if (value instanceof TextParts) return value.toString();
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Date) return value.valueOf();
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  return value;
}

function toArgs(args: Args | undefined): unknown[] | Record<string, unknown> {
  if (args === undefined) return [];
  if (Array.isArray(args)) return args.map(toSqlValue);
  const named: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(args)) {
    named[name[0] === '@' || name[0] === '$' || name[0] === ':' ? name.slice(1) : name] = toSqlValue(value);
  }
  return named;
}

/** A statement's arguments, as a caller gave them: libSQL's, or a raw statement's (TextParts among them). */
type Args = InArgs | RawValue[];

/** A statement and its arguments, as a caller gave them. */
interface Statement {
  sql: string;
  args?: Args;
}

/** A caller's writes waiting for the next group commit. */
interface PendingWrite {
  statements: Statement[];
  resolve(results: Result[]): void;
  reject(error: unknown): void;
}

// The writer thread's messages (embedded-writer.js). A text given in parts (TextParts) goes as
// `{ utf8: [...] }`, its parts encoded one by one and transferred, and is joined there.
type WriterRequest =
  { type: 'group'; id: number; writes: [string, unknown[] | Record<string, unknown>][][] } | { type: 'close' };
interface WriterResult {
  /** Null for a statement that returns no rows. */
  rows: unknown[][] | null;
  rowsAffected: number;
  lastInsertRowid: number | bigint;
}
interface WriterError {
  message: string;
  code: string | undefined;
  rawCode: number | undefined;
}
type WriterReply =
  | { id: number; outcomes: ({ results: WriterResult[] } | { error: WriterError })[] }
  | { id: number; error: WriterError };

/** An error SQLite raised on the writer thread, as the libsql binding raises it on this one. */
class SqliteError extends Error {
  override name = 'SqliteError';

  constructor(
    message: string,
    readonly code: string | undefined,
    readonly rawCode: number | undefined,
  ) {
    super(message);
  }
}

const toError = ({ message, code, rawCode }: WriterError) => new SqliteError(message, code, rawCode);

/** A reply that misses a write's outcome (the thread answers one per write): that write fails. */
const NO_OUTCOME = {
  error: { message: 'The writer thread answered no outcome for this write', code: undefined, rawCode: undefined },
};

/** The file: its two connections, the prepared statements of this thread's, and whose turn it is to write. */
class EmbeddedFile {
  readonly #db: Database.Database;
  readonly #path: string;
  readonly #timeoutMs: number;
  readonly #statements = new BoundedMap<string, Prepared>(MAX_CACHED_STATEMENTS);
  #writer: Worker | null = null;
  /** Why the writer thread stopped, if it failed. */
  #writerFailure: Error | null = null;
  /** The group the writer thread is committing, and when it was posted (performance.now()). */
  #flight: { id: number; writes: PendingWrite[]; postedAt: number } | null = null;
  readonly #timings: DatabaseTimings | undefined;
  #nextId = 0;
  #pending: PendingWrite[] = [];
  #scheduled = false;
  /** Work on this thread's connection waiting for the group on the writer thread to end. */
  #waiting: (() => void)[] = [];
  /** Clients still open on the file: it closes with the last. */
  #clients: number;
  #closed = false;

  constructor(path: string, timeoutMs: number, clients: number, timings?: DatabaseTimings) {
    this.#db = new Database(path, { timeout: timeoutMs });
    this.#timings = timings;
    this.#path = path;
    this.#timeoutMs = timeoutMs;
    this.#clients = clients;
    // Started now: the thread takes a few tens of ms to start, better spent before the first write.
    this.#startWriter();
  }

  /** Runs `work` (SQL on this thread's connection that may write) now, or once no group is on the writer thread. */
  here<T>(work: () => T): Promise<T> {
    if (this.#closed) return Promise.reject(closedError());
    if (!this.#flight) return new Promise((resolve) => resolve(work()));
    return new Promise<void>((resolve) => this.#waiting.push(resolve)).then(() => this.here(work));
  }

  /** Commits a caller's writes in the writer thread's next group. */
  group(statements: Statement[]): Promise<Result[]> {
    if (this.#closed) return Promise.reject(closedError());
    return new Promise((resolve, reject) => {
      this.#pending.push({ statements, resolve, reject });
      this.#schedule();
    });
  }

  /** Every statement of this thread's connection but a transaction's own (BEGIN, COMMIT), timed. */
  run(sql: string, args?: Args): Result {
    if (!this.#timings) return this.#run(sql, args);
    const started = performance.now();
    const result = this.#run(sql, args);
    this.#timings.statement((performance.now() - started) / 1000);
    return result;
  }

  #run(sql: string, args?: Args): Result {
    const prepared = this.prepare(sql);
    const bound = toArgs(args);
    if (prepared.shape) {
      // The binding's get() costs half its all(), which builds an iterator and a 100-row buffer.
      if (atMostOneRow(prepared, bound)) {
        const row = prepared.statement.get(bound) as unknown[] | undefined;
        return this.#rows(prepared, row === undefined ? [] : [row]);
      }
      return this.#rows(prepared, prepared.statement.all(bound) as unknown[][]);
    }
    const info = prepared.statement.run(bound);
    return new Result([], [], [], info.changes, BigInt(info.lastInsertRowid));
  }

  inTransaction<T>(begin: string, work: () => T): T {
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

  /** A write transaction on this thread (the immediate client's), its commit timed. */
  writeHere<T>(work: () => T): T {
    const started = performance.now();
    const result = this.inTransaction('BEGIN IMMEDIATE', work);
    this.#timings?.commit('immediate', (performance.now() - started) / 1000);
    return result;
  }

  exec(sql: string): void {
    this.#db.exec(sql);
  }

  prepare(sql: string): Prepared {
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
        oneRow: oneRowOf(sql),
        columns,
        columnTypes: described.map((column) => column.type ?? ''),
      };
    } else {
      prepared = { statement, readonly: false, shape: null, oneRow: 'never', columns: [], columnTypes: [] };
    }
    // Statements that change the schema invalidate prepared ones; they are rare (migrations) and
    // SQLite re-prepares transparently, so only the cache size needs a bound (the map's).
    this.#statements.set(sql, prepared);
    return prepared;
  }

  /**
   * A client closed: the file closes with the last one. A group being committed is still answered
   * (this thread's connection closes after it: its rows take their shape from prepared statements).
   */
  release(): void {
    if (--this.#clients > 0) return;
    this.#closed = true;
    for (const write of this.#pending.splice(0)) write.reject(closedError());
    this.#writer?.postMessage({ type: 'close' } satisfies WriterRequest);
    if (!this.#flight) this.#close();
  }

  #close(): void {
    this.#writer?.unref();
    this.#statements.clear();
    this.#db.close();
  }

  #rows(prepared: Prepared, values: unknown[][]): Result {
    const { shape } = prepared;
    if (!shape) throw new Error('The database answered rows for a statement that returns none');
    return new Result(
      prepared.columns,
      prepared.columnTypes,
      values.map((row) => toRow(shape, row)),
      0,
      undefined,
    );
  }

  #schedule(): void {
    if (this.#scheduled || this.#flight || this.#pending.length === 0) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#commitGroup();
    });
  }

  #commitGroup(): void {
    if (this.#flight || this.#pending.length === 0 || this.#closed) return;
    let taken = 0;
    let bytes = 0;
    for (const write of this.#pending) {
      if (taken > 0 && bytes >= MAX_GROUP_BYTES) break;
      bytes += argumentBytes(write);
      taken++;
    }
    const writes = this.#pending.splice(0, taken);
    const id = this.#nextId++;
    let writer: Worker;
    try {
      const transfer: ArrayBuffer[] = [];
      const request: WriterRequest = {
        type: 'group',
        id,
        writes: writes.map((write) => write.statements.map(({ sql, args }) => [sql, toWriterArgs(args, transfer)])),
      };
      writer = this.#writer ?? this.#startWriter();
      writer.postMessage(request, transfer);
    } catch (error) {
      // Arguments the writer thread cannot receive (a value a structured clone refuses).
      for (const write of writes) write.reject(error);
      this.#schedule();
      return;
    }
    this.#flight = { id, writes, postedAt: performance.now() };
    // The thread keeps the process alive while it commits: a caller waits for its answer.
    writer.ref();
  }

  #answered(reply: WriterReply): void {
    const flight = this.#flight;
    if (!flight || flight.id !== reply.id) return;
    this.#timings?.commit('group', (performance.now() - flight.postedAt) / 1000);
    flight.writes.forEach((write, i) => {
      const outcome = 'error' in reply ? reply : (reply.outcomes[i] ?? NO_OUTCOME);
      if ('error' in outcome) return write.reject(toError(outcome.error));
      try {
        write.resolve(
          outcome.results.map((result, j) => {
            const statement = write.statements[j];
            if (!statement) throw new Error('The writer thread answered more results than the write has statements');
            return this.#result(statement.sql, result);
          }),
        );
      } catch (error) {
        write.reject(error);
      }
    });
    this.#endFlight();
  }

  /** The writer thread is free again: this thread's waiting work goes first, then the next group. */
  #endFlight(): void {
    this.#flight = null;
    for (const resume of this.#waiting.splice(0)) resume();
    if (this.#closed) return this.#close();
    this.#writer?.unref();
    this.#schedule();
  }

  #result(sql: string, result: WriterResult): Result {
    // Rows come from statements that return them, which this thread has prepared (to tell
    // whether they only read): their shape is known here.
    if (result.rows) return this.#rows(this.prepare(sql), result.rows);
    return new Result([], [], [], result.rowsAffected, BigInt(result.lastInsertRowid));
  }

  #startWriter(): Worker {
    // No execArgv: the thread is plain JavaScript and needs none of this process's loaders.
    // A young generation of 4 MB, not V8's default that grows to semi-spaces of 16 MB: what the
    // thread keeps between messages is a few prepared statements, so scavenging it more often
    // costs nothing measurable, and under load the default held about 10 MB more, for good.
    const writer = new Worker(new URL('./embedded-writer.js', import.meta.url), {
      workerData: { path: this.#path, timeoutMs: this.#timeoutMs },
      execArgv: [],
      resourceLimits: { maxYoungGenerationSizeMb: WRITER_YOUNG_GENERATION_MB },
    });
    writer.unref();
    writer.on('message', (reply: WriterReply) => this.#answered(reply));
    writer.on('error', (error) => (this.#writerFailure = error));
    writer.on('exit', () => {
      if (this.#writer === writer) this.#writer = null;
      const flight = this.#flight;
      if (!flight) return;
      // The thread died with a group (a crash of its own: SQLite's errors it answers). The group
      // may have committed or not, as when a process dies in a commit; its callers get an error
      // and none is told that its writes were kept. The next group starts a new thread.
      const why = this.#writerFailure?.message ?? 'it exited';
      for (const write of flight.writes)
        write.reject(new Error(`The embedded database's writer thread stopped: ${why}`));
      this.#writerFailure = null;
      this.#endFlight();
    });
    this.#writer = writer;
    return writer;
  }
}

const closedError = () => new Error('The database client is closed');

/** A client of the file (see openEmbeddedClients): reads here; writes in groups, or at once here. */
class EmbeddedClient {
  readonly protocol = 'file';
  readonly #file: EmbeddedFile;
  readonly #immediate: boolean;
  closed = false;

  constructor(file: EmbeddedFile, immediate: boolean) {
    this.#file = file;
    this.#immediate = immediate;
  }

  async execute(statement: InStatement, args?: InArgs): Promise<ResultSet> {
    this.#checkOpen();
    const { sql, args: bound } = normalise(statement, args);
    if (this.#file.prepare(sql).readonly) return this.#file.run(sql, bound);
    // Pragmas run on this thread's connection (some cannot run inside a transaction, and a
    // checkpoint must not wait for the writer's lock).
    if (PRAGMA.test(sql)) return this.#file.here(() => this.#file.run(sql, bound));
    const [result] = await this.#write([{ sql, args: bound }]);
    if (!result) throw new Error('The writer thread answered no result for the statement');
    return result;
  }

  /** A batch is atomic; its mode does not matter here: every write takes the write lock. */
  async batch(statements: (InStatement | [string, InArgs?])[], _mode?: TransactionMode): Promise<ResultSet[]> {
    this.#checkOpen();
    return this.#batch(
      statements.map((statement) =>
        Array.isArray(statement) ? { sql: statement[0], args: statement[1] } : normalise(statement),
      ),
    );
  }

  /** PartsClient (client.ts): a batch whose TextParts reach the writer thread unjoined. */
  async batchWithParts(statements: RawStatement[]): Promise<ResultSet[]> {
    this.#checkOpen();
    return this.#batch(statements);
  }

  async #batch(normalised: Statement[]): Promise<Result[]> {
    const file = this.#file;
    if (normalised.every(({ sql }) => file.prepare(sql).readonly)) {
      return file.inTransaction('BEGIN DEFERRED', () => normalised.map(({ sql, args }) => file.run(sql, args)));
    }
    return this.#write(normalised);
  }

  async migrate(statements: InStatement[]): Promise<ResultSet[]> {
    this.#checkOpen();
    const file = this.#file;
    return file.here(() => {
      file.run('PRAGMA foreign_keys = off');
      try {
        return file.inTransaction('BEGIN DEFERRED', () =>
          statements.map((statement) => {
            const { sql, args } = normalise(statement);
            return file.run(sql, args);
          }),
        );
      } finally {
        file.run('PRAGMA foreign_keys = on');
      }
    });
  }

  async executeMultiple(sql: string): Promise<void> {
    this.#checkOpen();
    return this.#file.here(() => this.#file.exec(sql));
  }

  async transaction(): Promise<never> {
    throw new Error(
      'Interactive transactions are not supported on the embedded database: use db.batch (see src/db/client.ts).',
    );
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.#file.release();
  }

  #write(statements: Statement[]): Promise<Result[]> {
    const file = this.#file;
    if (!this.#immediate) return file.group(statements);
    return file.here(() => file.writeHere(() => statements.map(({ sql, args }) => file.run(sql, args))));
  }

  #checkOpen(): void {
    if (this.closed) throw closedError();
  }
}

/** About how many bytes a write's arguments hold (strings by their length). */
function argumentBytes(write: PendingWrite): number {
  let bytes = 0;
  for (const { args } of write.statements) {
    for (const value of args === undefined ? [] : Array.isArray(args) ? args : Object.values(args)) {
      if (typeof value === 'string' || value instanceof TextParts) bytes += value.length;
      else if (value instanceof ArrayBuffer || ArrayBuffer.isView(value)) bytes += value.byteLength;
    }
  }
  return bytes;
}

const encoder = new TextEncoder();

/** TextParts shorter than this (UTF-16 units) go to the writer thread joined: one short string clones for less than buffers transfer. */
const TEXT_PARTS_FROM = 64 * 1024;

/**
 * A statement's arguments as the writer thread takes them. Long TextParts go as `{ utf8 }`: each
 * part as bytes of its own (strings encoded, bytes copied), a few KiB of memory the allocator has
 * at hand where one buffer of the whole text would be fresh memory to fault in, and its buffer
 * added to `transfer`, so that the structured clone copies none of them.
 */
function toWriterArgs(args: Args | undefined, transfer: ArrayBuffer[]): unknown[] | Record<string, unknown> {
  if (!Array.isArray(args)) return toArgs(args);
  return args.map((value: RawValue) => {
    if (!(value instanceof TextParts)) return toSqlValue(value);
    if (value.length < TEXT_PARTS_FROM) return value.toString();
    const utf8: Uint8Array<ArrayBuffer>[] = [];
    // Strings next to each other are encoded together, so that no surrogate pair is cut.
    let strings = '';
    for (const part of value.parts) {
      if (typeof part === 'string') {
        strings += part;
        continue;
      }
      if (strings !== '') utf8.push(encoder.encode(strings));
      strings = '';
      // A copy: the caller keeps its bytes (a run's events read them after the commit).
      utf8.push(part.slice());
    }
    if (strings !== '') utf8.push(encoder.encode(strings));
    for (const bytes of utf8) transfer.push(bytes.buffer);
    return { utf8 };
  });
}

function normalise(statement: InStatement, args?: InArgs): Statement {
  return typeof statement === 'string' ? { sql: statement, args } : { sql: statement.sql, args: statement.args };
}

export interface EmbeddedClientOptions {
  /** How long to wait for another process's write lock (SQLite's busy timeout). */
  timeoutMs: number;
  /** Where statements' and commits' durations go (gateway_db_*_duration_seconds). */
  timings?: DatabaseTimings;
}

/**
 * Two clients of one embedded file, as @libsql/client's `Client`: `client`, whose writes commit in
 * groups on the writer thread and wait for the disk; and `immediateClient`, whose writes commit at
 * once on this thread, each in its own transaction (after the group being committed, if any), for
 * writes that a group would only delay (see NodeDatabase.countersClient). Both read on this thread,
 * through one connection: a PRAGMA through either sets it for both (and not for the writer's).
 */
export function openEmbeddedClients(
  path: string,
  options: EmbeddedClientOptions,
): { client: Client & PartsClient; immediateClient: Client & PartsClient } {
  const file = new EmbeddedFile(path, options.timeoutMs, 2, options.timings);
  return {
    client: asClient(new EmbeddedClient(file, false)),
    immediateClient: asClient(new EmbeddedClient(file, true)),
  };
}

/** The embedded file's group-committing client alone. */
export function openEmbeddedClient(path: string, options: EmbeddedClientOptions): Client & PartsClient {
  return asClient(new EmbeddedClient(new EmbeddedFile(path, options.timeoutMs, 1, options.timings), false));
}

/** The embedded client where code expects @libsql/client's `Client` (the part of it Drizzle and the counter store use). */
const asClient = (client: EmbeddedClient) => client as unknown as Client & PartsClient;
