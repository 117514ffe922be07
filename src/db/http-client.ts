import type { Client, InArgs, InStatement, InValue, ResultSet, TransactionMode } from '@libsql/client';
import { LibsqlBatchError, LibsqlError } from '@libsql/core/api';
import { readAtMost } from '../lib/bounded-read';
import { Result, rowShape, toRow, type RowShape } from './result-set';

/**
 * A libSQL server's client over HTTP (sqld, Turso: Hrana 3 over HTTP, one `POST /v3/pipeline` a
 * call), for the Worker: the part of @libsql/client's `Client` that Drizzle, the coalescing and
 * busy-retrying clients and the counter store use (execute, batch), each one request whose pipeline
 * holds the statement or batch and the stream's close, as @libsql/client's HTTP client sends it.
 *
 * On workerd each statement's round trip cost about 0.57 ms of CPU, most of it in @libsql/client's
 * layers above the fetch: a stream object and its queue per call, a microtask per step, an `Error`
 * with its stack each time a stream closed, its own JSON writer and a class per message read
 * (bench:worker, docs/workers.md). Here a call builds its body with JSON.stringify and reads the
 * answer with `Response.json()`.
 *
 * Semantics kept from @libsql/client: a batch runs between BEGIN (its mode) and COMMIT, each
 * statement only if the one before it succeeded and the connection is still in the transaction
 * (`is_autocommit`), a ROLLBACK unless the COMMIT succeeded, so it is atomic; integers come back as
 * numbers (a RangeError past 2^53, as its `intMode: "number"`), blobs as ArrayBuffers; JavaScript
 * numbers go as floats, bigints and booleans as integers; errors are its LibsqlError (the server's
 * code, `SERVER_ERROR` with the HTTP status as the `cause`'s `status` for an answer that is not
 * 200) and a batch's LibsqlBatchError naming the statement. Interactive transactions, migrations and
 * multi-statement scripts are not offered: the app writes with batches (client.ts), and migrations
 * are applied from Node.
 */
export class HttpClient implements Client {
  readonly protocol = 'http';
  closed = false;
  readonly #pipeline: string;
  readonly #headers: Record<string, string>;
  readonly #fetch: typeof fetch;
  /** Row shapes by their column names, joined: the app's queries have a few dozen. */
  readonly #shapes = new Map<string, RowShape>();

  constructor(options: { url: string; authToken?: string; fetch?: typeof fetch }) {
    const { base, authToken } = serverOf(options.url);
    this.#pipeline = `${base}/v3/pipeline`;
    this.#headers = { 'content-type': 'application/json' };
    const token = authToken ?? options.authToken;
    if (token) this.#headers.authorization = `Bearer ${token}`;
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  async execute(stmt: InStatement | string, args?: InArgs): Promise<ResultSet> {
    const statement = typeof stmt === 'string' ? { sql: stmt, args } : stmt;
    const [result] = await this.#send([{ type: 'execute', stmt: toHrana(statement) }]);
    const response = responseOf(result);
    if (response.type !== 'execute') throw unexpected();
    return this.#result(response.result);
  }

  async batch(stmts: (InStatement | [string, InArgs?])[], mode: TransactionMode = 'deferred'): Promise<ResultSet[]> {
    const statements = stmts.map((stmt) =>
      typeof stmt === 'string' ? { sql: stmt } : Array.isArray(stmt) ? { sql: stmt[0], args: stmt[1] } : stmt,
    );
    const last = statements.length + 1;
    const inTransaction = { type: 'not', cond: { type: 'is_autocommit' } };
    const steps = [
      { stmt: { sql: BEGIN[mode], want_rows: false } },
      ...statements.map((statement, i) => ({
        condition: { type: 'and', conds: [{ type: 'ok', step: i }, inTransaction] },
        stmt: toHrana(statement),
      })),
      {
        condition: { type: 'and', conds: [{ type: 'ok', step: last - 1 }, inTransaction] },
        stmt: { sql: 'COMMIT', want_rows: false },
      },
      { condition: { type: 'not', cond: { type: 'ok', step: last } }, stmt: { sql: 'ROLLBACK', want_rows: false } },
    ];
    const [result] = await this.#send([{ type: 'batch', batch: { steps } }]);
    const response = responseOf(result);
    if (response.type !== 'batch') throw unexpected();
    const { step_results: results, step_errors: errors } = response.result;
    const begun = errors[0];
    if (begun) throw libsqlError(begun);
    const answers: ResultSet[] = [];
    for (let i = 0; i < statements.length; i++) {
      const error = errors[i + 1];
      // As @libsql/client words it: the server's error as a LibsqlError, its message (code and all) in the batch's.
      if (error) throw new LibsqlBatchError(libsqlError(error).message, i, error.code ?? 'UNKNOWN');
      const result = results[i + 1];
      if (!result) {
        throw new LibsqlBatchError(
          'Statement in a batch was not executed, probably because the transaction has been rolled back',
          i,
          'TRANSACTION_CLOSED',
        );
      }
      answers.push(this.#result(result));
    }
    const committed = errors[last];
    if (committed) throw libsqlError(committed);
    return answers;
  }

  async migrate(): Promise<never> {
    throw unsupported('migrations (apply them from Node: npm run db:migrate)');
  }

  async transaction(): Promise<never> {
    throw unsupported('interactive transactions (use db.batch: see src/db/client.ts)');
  }

  async executeMultiple(): Promise<never> {
    throw unsupported('multi-statement scripts');
  }

  async sync(): Promise<never> {
    throw unsupported('sync');
  }

  reconnect(): void {}

  close(): void {
    this.closed = true;
  }

  /** One pipeline: `requests`, then the stream's close; their answers in order. */
  async #send(requests: object[]): Promise<StreamResult[]> {
    if (this.closed) throw new LibsqlError('The client is closed', 'CLIENT_CLOSED');
    const response = await this.#fetch(this.#pipeline, {
      method: 'POST',
      headers: this.#headers,
      body: JSON.stringify({ baton: null, requests: [...requests, { type: 'close' }] }),
    });
    if (!response.ok) throw await serverError(response);
    const body: unknown = await response.json();
    const results = isObject(body) ? body.results : undefined;
    if (!isStreamResults(results) || results.length !== requests.length + 1) {
      throw protoError('Server returned unexpected number of pipeline results');
    }
    return results;
  }

  #result(result: StmtResult): Result {
    const names = result.cols.map((col) => col.name ?? '');
    const key = names.join('\0');
    let shape = this.#shapes.get(key);
    if (shape === undefined) {
      shape = rowShape(names);
      if (this.#shapes.size < MAX_SHAPES) this.#shapes.set(key, shape);
    }
    const rows = result.rows.map((row) => toRow(shape, row.map(fromHrana)));
    const lastInsertRowid = result.last_insert_rowid == null ? undefined : BigInt(result.last_insert_rowid);
    return new Result(
      names,
      result.cols.map((col) => col.decltype ?? ''),
      rows,
      result.affected_row_count,
      lastInsertRowid,
    );
  }
}

/** Row shapes kept: the app's queries have a few dozen column lists; the bound only guards misuse. */
const MAX_SHAPES = 500;

const BEGIN: Record<TransactionMode, string> = {
  write: 'BEGIN IMMEDIATE',
  read: 'BEGIN TRANSACTION READONLY',
  deferred: 'BEGIN DEFERRED',
};

// Hrana's messages, as read (only what is used; anything else fails as a protocol error).
interface HranaError {
  message: string;
  code?: string | null;
}
interface StmtResult {
  cols: { name?: string | null; decltype?: string | null }[];
  rows: HranaValue[][];
  affected_row_count: number;
  last_insert_rowid?: string | null;
}
type OkResponse = { type: 'execute'; result: StmtResult } | { type: 'batch'; result: BatchResult };
type StreamResult = { type: 'ok'; response: OkResponse } | { type: 'error'; error: HranaError };
interface BatchResult {
  step_results: (StmtResult | null)[];
  step_errors: (HranaError | null)[];
}
type HranaValue =
  | { type: 'null' }
  | { type: 'integer'; value: string }
  | { type: 'float'; value: number }
  | { type: 'text'; value: string }
  | { type: 'blob'; base64: string };

/** A pipeline request's response; its error is thrown as @libsql/client throws it. */
function responseOf(result: StreamResult | undefined): OkResponse {
  if (result?.type === 'error') throw libsqlError(result.error);
  if (result?.type !== 'ok') throw unexpected();
  return result.response;
}

const unexpected = () => protoError('Received unexpected type of response');

function toHrana(statement: { sql: string; args?: InArgs }) {
  const { sql, args } = statement;
  if (args === undefined) return { sql, want_rows: true };
  if (Array.isArray(args)) return { sql, args: args.map(toValue), want_rows: true };
  return {
    sql,
    named_args: Object.entries(args).map(([name, value]) => ({ name, value: toValue(value) })),
    want_rows: true,
  };
}

/** A value as @libsql/client sends it: numbers as floats, bigints and booleans as integers, dates as their time. */
function toValue(value: InValue | undefined): HranaValue {
  if (value === null) return { type: 'null' };
  if (typeof value === 'string') return { type: 'text', value };
  if (typeof value === 'number') {
    if (!Number.isFinite(value))
      throw new RangeError('Only finite numbers (not Infinity or NaN) can be passed as arguments');
    return { type: 'float', value };
  }
  if (typeof value === 'bigint') {
    if (value < MIN_INTEGER || value > MAX_INTEGER) {
      throw new RangeError(
        'This bigint value is too large to be represented as a 64-bit integer and passed as argument',
      );
    }
    return { type: 'integer', value: String(value) };
  }
  if (typeof value === 'boolean') return { type: 'integer', value: value ? '1' : '0' };
  if (value === undefined) throw new TypeError('undefined cannot be passed as an argument');
  if (value instanceof ArrayBuffer) return { type: 'blob', base64: toBase64(new Uint8Array(value)) };
  if (value instanceof Uint8Array) return { type: 'blob', base64: toBase64(value) };
  if (value instanceof Date) return { type: 'float', value: value.valueOf() };
  throw new TypeError('Unsupported type of value');
}

const MIN_INTEGER = -9223372036854775808n;
const MAX_INTEGER = 9223372036854775807n;

/** A value as @libsql/client answers it with `intMode: "number"`. */
function fromHrana(value: HranaValue): unknown {
  switch (value.type) {
    case 'null':
      return null;
    case 'integer': {
      const number = Number(value.value);
      if (!Number.isSafeInteger(number)) {
        throw new RangeError('Received integer which is too large to be safely represented as a JavaScript number');
      }
      return number;
    }
    case 'float':
    case 'text':
      return value.value;
    case 'blob':
      return fromBase64(value.base64).buffer;
    default:
      throw protoError('Received unrecognized type of Value');
  }
}

function toBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function fromBase64(text: string): Uint8Array<ArrayBuffer> {
  // Hrana's JSON may leave out the padding.
  const binary = atob(text.padEnd(Math.ceil(text.length / 4) * 4, '='));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** The server's error, as @libsql/client throws it. */
function libsqlError(error: HranaError): LibsqlError {
  return new LibsqlError(error.message, error.code ?? 'UNKNOWN');
}

function protoError(message: string): LibsqlError {
  return new LibsqlError(message, 'HRANA_PROTO_ERROR');
}

/** Of a server's error page, this many bytes are read at most. */
const MAX_ERROR_PAGE_BYTES = 1024;

/** A server that did not answer 200: its own error (JSON with a message), or SERVER_ERROR caused by the status. */
async function serverError(response: Response): Promise<LibsqlError> {
  const type = response.headers.get('content-type') ?? 'text/plain';
  const status = `Server returned HTTP status ${response.status}`;
  // An error page is short; a server that sends more is cut off, unread (the message is for a log line).
  const text = new TextDecoder().decode((await readAtMost(response.body, MAX_ERROR_PAGE_BYTES)).bytes);
  if (type === 'application/json') {
    try {
      const body: unknown = JSON.parse(text);
      if (isObject(body) && typeof body.message === 'string') {
        return libsqlError({ message: body.message, code: typeof body.code === 'string' ? body.code : null });
      }
    } catch {
      // not JSON after all: reported by its status
    }
  }
  const message = type === 'text/plain' && text.trim() !== '' ? `${status}: ${text.trim()}` : status;
  return new LibsqlError(message, 'SERVER_ERROR', undefined, undefined, new HttpStatusError(message, response.status));
}

/** The cause of a SERVER_ERROR: the answer's status (busy-retry.ts sends again on 429). */
export class HttpStatusError extends Error {
  override name = 'HttpServerError';

  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

function unsupported(what: string): LibsqlError {
  return new LibsqlError(`The HTTP client of the Worker does not offer ${what}.`, 'NOT_SUPPORTED');
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;

/** A pipeline's results, each an answer or an error (their insides are the server's, as the statements asked). */
function isStreamResults(value: unknown): value is StreamResult[] {
  return (
    Array.isArray(value) &&
    value.every(
      (result) =>
        isObject(result) &&
        ((result.type === 'ok' && isObject(result.response)) || (result.type === 'error' && isObject(result.error))),
    )
  );
}

/**
 * The server's base URL, as @libsql/client reads it: libsql: is https: (http: with `?tls=0`), and
 * `?authToken=` is the token (over the one given apart, as there); any other query is refused.
 */
function serverOf(url: string): { base: string; authToken?: string } {
  const parsed = new URL(url);
  let tls: boolean | undefined;
  let authToken: string | undefined;
  for (const [key, value] of parsed.searchParams) {
    if (key === 'authToken') authToken = value;
    else if (key === 'tls' && (value === '0' || value === '1')) tls = value === '1';
    else if (key === 'tls') {
      throw new LibsqlError(
        `Unknown value for the "tls" query argument: ${JSON.stringify(value)}. Supported values are: ["0", "1"]`,
        'URL_INVALID',
      );
    } else throw new LibsqlError(`Unsupported URL query parameter ${JSON.stringify(key)}`, 'URL_PARAM_NOT_SUPPORTED');
  }
  let protocol = parsed.protocol;
  if (protocol === 'libsql:') protocol = tls === false ? 'http:' : 'https:';
  if (protocol !== 'http:' && protocol !== 'https:') {
    throw new LibsqlError(
      `The HTTP client supports only "libsql:", "https:" and "http:" URLs, got "${parsed.protocol}".`,
      'URL_SCHEME_NOT_SUPPORTED',
    );
  }
  const path = parsed.pathname.replace(/\/+$/, '');
  return { base: `${protocol}//${parsed.host}${path}`, authToken };
}

/** The client of the server at `url` (`fetch`: how it is reached, the global fetch by default). */
export function openHttpClient(options: { url: string; authToken?: string; fetch?: typeof fetch }): Client {
  return new HttpClient(options);
}
