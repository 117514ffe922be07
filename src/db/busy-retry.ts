import type { Client, InArgs, InStatement, ResultSet, TransactionMode } from '@libsql/client';
import { WrappedClient } from './wrapped-client';
import { DEFAULT_ANSWER_MS } from '../config';
import { readsOnly } from './client';
import type { DatabaseTimings } from '../metrics/gateway';

/**
 * A libSQL server (sqld, Turso), seen from its HTTP clients: when writes from many connections
 * meet, it answers some of them SQLITE_BUSY ("database is locked") after a short wait of its own;
 * 32 runs at once on Workers saw about one batch in a hundred refused. Such a statement took no
 * effect (a statement commits alone, a batch is one transaction rolled back whole). Nor did one
 * the server answered HTTP 429, its load shedding, before running anything: in some benchmark
 * rounds of 32 runs at once on Workers, a local sqld turned most runs away so. Either is sent
 * again, after a random wait that doubles each time, up to BUSY_ATTEMPTS sends in all: a refusal
 * then reaches the caller as before, and the client as HTTP 503 with Retry-After (databaseRefusal).
 * Interactive transactions (which the app does not use) are not retried. The embedded file needs
 * none of this: its writes take turns (embedded-client.ts).
 *
 * A server can also stop answering: under the load above, a local sqld left some requests
 * unanswered for five minutes, until the HTTP client gave up, and every run waiting on one hung
 * with its client. So each send of a statement or batch has `answerMs` (GATEWAY_DATABASE_TIMEOUT_MS)
 * to be answered; past it the caller gets DatabaseTimeoutError, and the client HTTP 503 with
 * Retry-After. The send itself is left to end on its own: whether it took effect is not known (a
 * batch is still all or nothing). Migrations, which may rightly take long, have no deadline.
 *
 * What tipped that server over was many writes at once: its connections waiting for the write lock
 * spin on the clock (sqld's `ManagedConnectionWalWrapper::acquire`), and on this 2-core machine 16
 * or more writers at once sooner or later left it with over a hundred runnable threads and the
 * lock's holder starved, for minutes (sqld-writers.test.ts). So a client given `writers` sends at
 * most that many writes (a batch that is not a read, a statement that is not a SELECT) at once; the
 * others wait their turn, in order (DEFAULT_SERVER_WRITERS: what that bought). A write whose
 * deadline passes while it waits is never sent. Reads take no turn: WAL serves them beside the
 * writer. The Node server's client takes turns (GATEWAY_DATABASE_WRITERS). The Workers' cannot:
 * workerd runs a promise's continuation on behalf of the request that resolved it, so a turn handed
 * from one request to another would send the second's write as the first's I/O, which workerd
 * refuses (tried: "Cannot perform I/O on behalf of a different request").
 *
 * Given `timings`, each send's round trip is timed: a write's (a statement that is not a SELECT, a
 * batch that is not a read) as a commit on the `server` path, a read's as a statement.
 */
export class BusyRetryingClient extends WrappedClient {
  readonly #answerMs: number;
  readonly #writeTurns: Turns | null;
  readonly #timings: DatabaseTimings | undefined;

  constructor(inner: Client, options: { answerMs?: number; writers?: number; timings?: DatabaseTimings } = {}) {
    super(inner);
    this.#answerMs = options.answerMs ?? DEFAULT_ANSWER_MS;
    this.#writeTurns = options.writers ? new Turns(options.writers) : null;
    this.#timings = options.timings;
  }

  override execute(stmt: InStatement): Promise<ResultSet>;
  override execute(sql: string, args?: InArgs): Promise<ResultSet>;
  override execute(stmt: InStatement | string, args?: InArgs): Promise<ResultSet> {
    const sql = typeof stmt === 'string' ? stmt : stmt.sql;
    const write = !readsOnly(sql);
    const send = () =>
      this.#timed(write, () => (typeof stmt === 'string' ? this.inner.execute(stmt, args) : this.inner.execute(stmt)));
    return whileBusy(() => this.#answered(this.#writeTurns && write ? this.#writeTurns.take(send) : send));
  }

  override batch(stmts: Array<InStatement | [string, InArgs?]>, mode?: TransactionMode): Promise<ResultSet[]> {
    const write = mode !== 'read';
    const send = () => this.#timed(write, () => this.inner.batch(stmts, mode));
    return whileBusy(() => this.#answered(this.#writeTurns && write ? this.#writeTurns.take(send) : send));
  }

  /** `send`, its round trip timed when timings are kept. */
  async #timed<T>(write: boolean, send: () => Promise<T>): Promise<T> {
    const timings = this.#timings;
    if (!timings) return send();
    const started = performance.now();
    try {
      return await send();
    } finally {
      const seconds = (performance.now() - started) / 1000;
      if (write) timings.commit('server', seconds);
      else timings.statement(seconds);
    }
  }

  /** `send`'s answer, or DatabaseTimeoutError once answerMs have passed without it. */
  #answered<T>(send: (deadline: Deadline) => Promise<T>): Promise<T> {
    const ms = this.#answerMs;
    const deadline: Deadline = {};
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        deadline.onPass?.();
        reject(new DatabaseTimeoutError(ms));
      }, ms);
      void send(deadline)
        .then(resolve, reject)
        .finally(() => clearTimeout(timer));
    });
  }

  override migrate(stmts: InStatement[]): Promise<ResultSet[]> {
    return whileBusy(() => this.inner.migrate(stmts));
  }
}

/** A send the database server did not answer within its deadline (BusyRetryingClient): its effect is not known. */
export class DatabaseTimeoutError extends Error {
  override name = 'DatabaseTimeoutError';

  constructor(ms: number) {
    super(`The database did not answer within ${ms} ms.`);
  }
}

/** A send's deadline: what lets go of the send's turn, or its place in line, once it has passed. */
interface Deadline {
  onPass?: () => void;
}

/**
 * At most `count` sends at once; the others wait in order. A send whose deadline passes gives up
 * its place: one still waiting is never sent, one in flight stops counting (a server that leaves
 * a few sends unanswered does not hold every write behind them).
 */
class Turns {
  #free: number;
  /** Insertion-ordered: the first is next. */
  readonly #waiting = new Set<() => void>();

  constructor(count: number) {
    this.#free = count;
  }

  take<T>(send: () => Promise<T>): (deadline: Deadline) => Promise<T> {
    return async (deadline) => {
      if (this.#free > 0) this.#free--;
      else {
        await new Promise<void>((go) => {
          this.#waiting.add(go);
          deadline.onPass = () => this.#waiting.delete(go);
        });
      }
      let held = true;
      const release = (pass: () => void) => {
        if (!held) return;
        held = false;
        pass();
      };
      // Given up at the deadline, the turn is handed on a task later: sends asked for in the same
      // turn of the loop as this one have deadlines that pass with its own (their timers fire right
      // after), and those waiting are to leave the line first rather than be sent as they time out.
      deadline.onPass = () => release(() => setTimeout(() => this.#pass(), 0));
      try {
        return await send();
      } finally {
        release(() => this.#pass());
      }
    };
  }

  /** Hands a turn that ended to the first waiter, or frees it. */
  #pass(): void {
    const [next] = this.#waiting;
    if (!next) {
      this.#free++;
      return;
    }
    this.#waiting.delete(next);
    next();
  }
}

/** Sends in all, at most, the first included. */
export const BUSY_ATTEMPTS = 8;
/** The first wait's upper bound; each next one's doubles, up to MAX_WAIT_MS. */
const FIRST_WAIT_MS = 5;
const MAX_WAIT_MS = 250;

async function whileBusy<T>(send: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (error) {
      if (attempt >= BUSY_ATTEMPTS || !isBusy(error)) throw error;
      const bound = Math.min(MAX_WAIT_MS, FIRST_WAIT_MS * 2 ** (attempt - 1));
      await new Promise((resume) => setTimeout(resume, bound / 2 + Math.random() * (bound / 2)));
    }
  }
}

/** SQLite's busy refusal, or the server's HTTP 429 (the client's LibsqlError caused by an HttpServerError). */
function isBusy(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  if ('code' in error && error.code === 'SQLITE_BUSY') return true;
  if (!(error instanceof Error) || error.name !== 'LibsqlError') return false;
  const cause = error.cause;
  return typeof cause === 'object' && cause !== null && 'status' in cause && cause.status === 429;
}

/** How deep databaseRefusal looks: Drizzle's DrizzleQueryError wraps what the client threw, once. */
const CAUSE_DEPTH = 4;

/**
 * Whether a failure is the database not serving the request, at any depth of its causes, and how:
 * - `busy`: it turned the request away under load, past what was waited for (BUSY_ATTEMPTS sends
 *   to a server; an embedded file's busy timeout, another process holding its lock). Nothing of
 *   it was written: a refused statement or batch takes no effect.
 * - `timeout`: a server did not answer in time (DatabaseTimeoutError); a write may have been applied.
 * The client is told to come back (503, Retry-After) rather than that the gateway broke.
 */
export function databaseRefusal(error: unknown): 'busy' | 'timeout' | null {
  for (let depth = 0; depth < CAUSE_DEPTH && typeof error === 'object' && error !== null; depth++) {
    if (isBusy(error)) return 'busy';
    if (error instanceof DatabaseTimeoutError) return 'timeout';
    error = 'cause' in error ? error.cause : undefined;
  }
  return null;
}
