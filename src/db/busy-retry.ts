import type { Client, InArgs, InStatement, Replicated, ResultSet, Transaction, TransactionMode } from '@libsql/client';

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
 */
export class BusyRetryingClient implements Client {
  readonly #inner: Client;
  readonly #answerMs: number;

  constructor(inner: Client, options: { answerMs?: number } = {}) {
    this.#inner = inner;
    this.#answerMs = options.answerMs ?? DEFAULT_ANSWER_MS;
  }

  execute(stmt: InStatement): Promise<ResultSet>;
  execute(sql: string, args?: InArgs): Promise<ResultSet>;
  execute(stmt: InStatement | string, args?: InArgs): Promise<ResultSet> {
    return whileBusy(() => answered(typeof stmt === 'string' ? this.#inner.execute(stmt, args) : this.#inner.execute(stmt), this.#answerMs));
  }

  batch(stmts: Array<InStatement | [string, InArgs?]>, mode?: TransactionMode): Promise<ResultSet[]> {
    return whileBusy(() => answered(this.#inner.batch(stmts, mode), this.#answerMs));
  }

  migrate(stmts: InStatement[]): Promise<ResultSet[]> {
    return whileBusy(() => this.#inner.migrate(stmts));
  }

  transaction(mode?: TransactionMode): Promise<Transaction> {
    return this.#inner.transaction(mode);
  }

  executeMultiple(sql: string): Promise<void> {
    return this.#inner.executeMultiple(sql);
  }

  sync(): Promise<Replicated> {
    return this.#inner.sync();
  }

  close(): void {
    this.#inner.close();
  }

  reconnect(): void {
    this.#inner.reconnect();
  }

  get closed(): boolean {
    return this.#inner.closed;
  }

  get protocol(): string {
    return this.#inner.protocol;
  }
}

/** GATEWAY_DATABASE_TIMEOUT_MS's default. */
export const DEFAULT_ANSWER_MS = 30_000;

/** A send the database server did not answer within its deadline (BusyRetryingClient): its effect is not known. */
export class DatabaseTimeoutError extends Error {
  override name = 'DatabaseTimeoutError';

  constructor(ms: number) {
    super(`The database did not answer within ${ms} ms.`);
  }
}

/** `sending`, or DatabaseTimeoutError once `ms` have passed without its answer. */
function answered<T>(sending: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new DatabaseTimeoutError(ms)), ms);
    void sending.then(resolve, reject).finally(() => clearTimeout(timer));
  });
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
