import type { Client, InArgs, InStatement, Replicated, ResultSet, Transaction, TransactionMode } from '@libsql/client';

/**
 * A libSQL server (sqld, Turso), seen from its HTTP clients: when writes from many connections
 * meet, it answers some of them SQLITE_BUSY ("database is locked") after a short wait of its own;
 * 32 runs at once on Workers saw about one batch in a hundred refused. Such a statement took no
 * effect (a statement commits alone, a batch is one transaction rolled back whole). Nor did one
 * the server answered HTTP 429, its load shedding, before running anything: in some benchmark
 * rounds of 32 runs at once on Workers, a local sqld turned most runs away so. Either is sent
 * again, after a random wait that doubles each time, up to BUSY_ATTEMPTS sends in all: a refusal
 * then reaches the caller as before, and the client as HTTP 503 with Retry-After (isDatabaseBusy). Interactive transactions (which the app does not use) are
 * not retried. The embedded file needs none of this: its writes take turns (embedded-client.ts).
 */
export class BusyRetryingClient implements Client {
  readonly #inner: Client;

  constructor(inner: Client) {
    this.#inner = inner;
  }

  execute(stmt: InStatement): Promise<ResultSet>;
  execute(sql: string, args?: InArgs): Promise<ResultSet>;
  execute(stmt: InStatement | string, args?: InArgs): Promise<ResultSet> {
    return whileBusy(() => (typeof stmt === 'string' ? this.#inner.execute(stmt, args) : this.#inner.execute(stmt)));
  }

  batch(stmts: Array<InStatement | [string, InArgs?]>, mode?: TransactionMode): Promise<ResultSet[]> {
    return whileBusy(() => this.#inner.batch(stmts, mode));
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

/** How deep isDatabaseBusy looks: Drizzle's DrizzleQueryError wraps what the client threw, once. */
const CAUSE_DEPTH = 4;

/**
 * Whether a failure is the database turning the write away under load, past what was waited for
 * (BUSY_ATTEMPTS sends to a server; an embedded file's busy timeout, another process holding its
 * lock): the client is told to come back (503, Retry-After) rather than that the gateway broke.
 * Nothing of such a request was written: a refused statement or batch takes no effect.
 */
export function isDatabaseBusy(error: unknown): boolean {
  for (let depth = 0; depth < CAUSE_DEPTH && typeof error === 'object' && error !== null; depth++) {
    if (isBusy(error)) return true;
    error = 'cause' in error ? error.cause : undefined;
  }
  return false;
}
