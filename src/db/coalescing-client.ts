import type { InArgs, InStatement, ResultSet, TransactionMode } from '@libsql/client';
import { WrappedClient } from './wrapped-client';
import { readsOnly, type ReadsCarrier } from './client';

/**
 * A libSQL server's client (sqld, Turso over HTTP) whose reads issued together travel together. On
 * Workers every statement is a round trip to the database, 30 to 80 ms from an edge location to a
 * Turso primary; a request reading its thread, its messages, its steps and its open run side by side
 * (Promise.all) made four requests, and workerd lets a request hold six connections at once. Here,
 * reads (statements that only read: readsOnly) asked for within the same few turns of the microtask
 * queue are sent as one batch, in one transaction of mode `read`: one round trip, one snapshot of
 * the database (stricter than separate requests, never looser). A lone read goes as it is. Writes,
 * a batch whose statements all read (a page and its count, read as one snapshot) joins the window
 * the same way, its statements kept together. Writes, other batches and everything else pass
 * straight through, in the order they were asked for relative to each other (a read waiting for its
 * companions never delays a write).
 *
 * The window is microtasks, not a timer, for Workers' sake: workerd runs a promise's continuation on
 * behalf of the request whose I/O resolved it, and refuses I/O started on behalf of one request from
 * another's (busy-retry.ts). A timer would let another request's reads join a batch sent on behalf
 * of the first; the microtasks that follow one event all run for the request of that event.
 *
 * A write that depends on nothing those reads answer but must not travel apart from them (a run's
 * rows, inserted under conditions the database checks, beside the thread's history it reads: runs/
 * commands.ts) asks `batchWithReads`: it joins the window, and its statements go after the reads in
 * the same batch, in one write transaction: still one round trip.
 *
 * When a batch fails, each of its reads (a batch of reads: as one batch) is sent again on its own,
 * so that each caller gets its own answer or error (one bad statement must not fail its
 * neighbours); nothing was written. A write
 * that travelled with them gets the batch's error, unless a read was what failed: then it is sent
 * again on its own too.
 */
export class CoalescingClient extends WrappedClient implements ReadsCarrier {
  #pending: PendingRead[] = [];
  /** The write sent with the pending reads (batchWithReads): one a window. */
  #carrier: PendingWrite | null = null;
  #scheduled = false;

  override execute(stmt: InStatement): Promise<ResultSet>;
  override execute(sql: string, args?: InArgs): Promise<ResultSet>;
  override execute(stmt: InStatement | string, args?: InArgs): Promise<ResultSet> {
    const statement: InStatement = typeof stmt === 'string' ? (args === undefined ? stmt : { sql: stmt, args }) : stmt;
    if (!readsOnly(sqlText(statement))) return this.inner.execute(statement);
    return this.#joined([statement]).then(([result]) => result ?? Promise.reject(noAnswer(1, 0)));
  }

  override batch(stmts: Array<InStatement | [string, InArgs?]>, mode?: TransactionMode): Promise<ResultSet[]> {
    const statements = stmts.map((stmt): InStatement =>
      Array.isArray(stmt) ? { sql: stmt[0], args: stmt[1] ?? [] } : stmt,
    );
    if (mode === 'write' || statements.length === 0 || !statements.every((statement) => readsOnly(sqlText(statement))))
      return this.inner.batch(stmts, mode);
    return this.#joined(statements);
  }

  /** `statements`, all reads, sent with the others of the window, their results in order. */
  #joined(statements: InStatement[]): Promise<ResultSet[]> {
    return new Promise<ResultSet[]>((resolve, reject) => {
      this.#pending.push({ statements, resolve, reject });
      this.#schedule();
    });
  }

  /**
   * Writes `statements` in one write transaction, after the reads issued within the same window
   * (those before this call and those within the few turns after it), answering the statements'
   * own results. A second call in the same window goes on its own.
   */
  batchWithReads(statements: InStatement[]): Promise<ResultSet[]> {
    if (this.#carrier) return this.inner.batch(statements, 'write');
    return new Promise<ResultSet[]>((resolve, reject) => {
      this.#carrier = { statements, resolve, reject };
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    void this.#flushSoon();
  }

  /** Sends what is pending once the microtasks queued by its first caller have run. */
  async #flushSoon(): Promise<void> {
    // Reads started side by side reach execute within a few turns of the queue (an async function's
    // own awaits before its query, a route's validators after the API-key middleware started the
    // settings' generation read: 16 turns were enough for a run on a thread); WINDOW_TURNS covers
    // them twice over, at a cost of microseconds.
    for (let turn = 0; turn < WINDOW_TURNS; turn++) await Promise.resolve();
    this.#scheduled = false;
    const reads = this.#pending;
    const carrier = this.#carrier;
    this.#pending = [];
    this.#carrier = null;
    if (carrier) return this.#carry(reads, carrier);
    const [only] = reads;
    if (reads.length === 1 && only) return this.#sendAlone(only);
    let results: ResultSet[];
    try {
      results = await this.inner.batch(
        reads.flatMap((read) => read.statements),
        'read',
      );
    } catch {
      await Promise.all(reads.map((read) => this.#sendAlone(read)));
      return;
    }
    answer(reads, results);
  }

  /** The reads and, after them, the carrier's statements: one batch, one write transaction. */
  async #carry(reads: PendingRead[], carrier: PendingWrite): Promise<void> {
    let results: ResultSet[];
    try {
      const statements = reads.flatMap((read) => read.statements);
      results = await this.inner.batch([...statements, ...carrier.statements], 'write');
    } catch (error) {
      // A read's failure is not the write's: the write goes again alone (nothing of it was written).
      const failed = error instanceof Error && 'statementIndex' in error ? error.statementIndex : undefined;
      if (typeof failed === 'number' && failed < readCount(reads))
        this.inner.batch(carrier.statements, 'write').then(carrier.resolve, carrier.reject);
      else carrier.reject(error);
      await Promise.all(reads.map((read) => this.#sendAlone(read)));
      return;
    }
    answer(reads, results);
    const own = results.slice(readCount(reads));
    if (own.length === carrier.statements.length) carrier.resolve(own);
    else
      carrier.reject(new Error(`the database answered ${own.length} results to ${carrier.statements.length} writes`));
  }

  async #sendAlone(read: PendingRead): Promise<void> {
    const [only] = read.statements;
    try {
      read.resolve(
        read.statements.length === 1 && only
          ? [await this.inner.execute(only)]
          : await this.inner.batch(read.statements, 'read'),
      );
    } catch (error) {
      read.reject(error);
    }
  }
}

/** Each read its results, in order from the first of a batch's. */
function answer(reads: PendingRead[], results: ResultSet[]): void {
  const expected = readCount(reads);
  let next = 0;
  for (const read of reads) {
    const own = results.slice(next, next + read.statements.length);
    next += read.statements.length;
    if (own.length === read.statements.length) read.resolve(own);
    else read.reject(noAnswer(expected, results.length));
  }
}

/** How many statements the reads hold. */
function readCount(reads: PendingRead[]): number {
  return reads.reduce((sum, read) => sum + read.statements.length, 0);
}

const sqlText = (statement: InStatement): string => (typeof statement === 'string' ? statement : statement.sql);

const noAnswer = (asked: number, answered: number) =>
  new Error(`the database answered ${answered} results to a batch of ${asked} reads`);

/** How many turns of the microtask queue a read waits for companions (see #flushSoon). */
const WINDOW_TURNS = 32;

interface PendingWrite {
  statements: InStatement[];
  resolve(results: ResultSet[]): void;
  reject(error: unknown): void;
}

/** A read, or a batch of reads that go together (`statements`). */
interface PendingRead {
  statements: InStatement[];
  resolve(results: ResultSet[]): void;
  reject(error: unknown): void;
}
