// @ts-check
/**
 * The embedded database's writer thread (embedded-client.ts starts it): a connection of its own to
 * the file, on which the app's writes commit in groups, so that neither a commit (writing the
 * pages, the fsync of `synchronous = FULL`, a checkpoint) nor a large write ever holds the event
 * loop. It runs one message at a time, in the order posted, and answers each once it is done.
 *
 * Plain JavaScript (checked by `// @ts-check`): Node starts a worker thread from a file itself,
 * without the loader of the process that starts it (Vitest's module runner in tests, tsx for the
 * scripts and benches), and `npm run build:node` copies it as it is beside the esbuild bundles that
 * `npm start` and bin/gateway.js run (dist/). The messages are typed in embedded-client.ts.
 *
 *   { type: 'group', id, writes: [[sql, args], …][] }  one transaction; each write (one caller's
 *     statements) is kept whole or not at all, a failed one alone, the others committed:
 *     answers { id, outcomes: ({ results } | { error })[] }, or { id, error } if BEGIN or COMMIT failed
 *   { type: 'close' }                                   closes the connection; the thread ends
 *
 * An argument `{ utf8: Uint8Array[] }` is a text sent in parts (TextParts in client.ts), each
 * part whole characters: it is bound as their concatenation, joined here rather than on the
 * event loop's thread. A result is { rows (arrays, or null for a statement that returns none),
 * rowsAffected, lastInsertRowid }; an error is { message, code, rawCode }, SQLite's as the binding
 * reports it.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'libsql';

/** Statements kept prepared: the app has a few dozen distinct ones; the bound only guards misuse. */
const MAX_CACHED_STATEMENTS = 500;

const port = parentPort;
if (!port) throw new Error('embedded-writer.js runs as a worker thread of embedded-client.ts');

/** @type {{ path: string, timeoutMs: number }} */
const { path, timeoutMs } = workerData;
const db = new Database(path, { timeout: timeoutMs });
// Said, not left to the build's default: a commit is answered only once the disk has the WAL.
db.exec('PRAGMA synchronous = FULL');
/** @type {Map<string, import('libsql').Statement>} */
const statements = new Map();

/** @param {string} sql */
function prepare(sql) {
  const cached = statements.get(sql);
  if (cached) return cached;
  const statement = db.prepare(sql);
  if (statement.reader) statement.raw(true);
  if (statements.size >= MAX_CACHED_STATEMENTS)
    statements.delete(/** @type {string} */ (statements.keys().next().value));
  statements.set(sql, statement);
  return statement;
}

/**
 * @param {string} sql
 * @param {unknown[] | Record<string, unknown>} [args]
 */
function run(sql, args = []) {
  const statement = prepare(sql);
  if (statement.reader)
    return { rows: /** @type {unknown[][]} */ (statement.all(args)), rowsAffected: 0, lastInsertRowid: 0 };
  const info = statement.run(args);
  return { rows: null, rowsAffected: info.changes, lastInsertRowid: info.lastInsertRowid };
}

/** @param {unknown} error */
function describe(error) {
  if (!(error instanceof Error)) return { message: String(error), code: undefined, rawCode: undefined };
  const { code, rawCode } = /** @type {{ code?: unknown, rawCode?: unknown }} */ (error);
  return {
    message: error.message,
    code: typeof code === 'string' ? code : undefined,
    rawCode: typeof rawCode === 'number' ? rawCode : undefined,
  };
}

/**
 * @typedef {[string, (unknown[] | Record<string, unknown>)?][]} Write
 * @typedef {{ results: ReturnType<typeof run>[] } | { error: ReturnType<typeof describe> }} Outcome
 */

/**
 * Commits a group. Writes rarely fail, so the group is first written whole, without a savepoint
 * around each write (two statements a write spared); if a write fails, that transaction is rolled
 * back and the group written again with each write in a savepoint of its own, rolled back alone.
 * Either way nothing of a failed write is kept and every other write of the group is.
 *
 * @param {Write[]} writes
 */
function commitGroup(writes) {
  let failedWrite = false;
  try {
    const outcomes = inTransaction(() =>
      writes.map((write) => {
        try {
          return { results: write.map(([sql, args]) => run(sql, args)) };
        } catch (error) {
          failedWrite = true;
          throw error;
        }
      }),
    );
    return { outcomes };
  } catch (error) {
    // BEGIN or COMMIT failed (a lock held too long by another process, a full disk): nothing of
    // the group was written.
    if (!failedWrite) return { error: describe(error) };
  }
  try {
    return { outcomes: inTransaction(() => writes.map(savepointed)) };
  } catch (error) {
    return { error: describe(error) };
  }
}

/**
 * @template T
 * @param {() => T} work
 */
function inTransaction(work) {
  try {
    run('BEGIN IMMEDIATE');
    const result = work();
    run('COMMIT');
    return result;
  } catch (error) {
    if (db.inTransaction) run('ROLLBACK');
    throw error;
  }
}

/**
 * @param {Write} write
 * @returns {Outcome}
 */
function savepointed(write) {
  run('SAVEPOINT caller');
  try {
    const results = write.map(([sql, args]) => run(sql, args));
    run('RELEASE caller');
    return { results };
  } catch (error) {
    run('ROLLBACK TO caller');
    run('RELEASE caller');
    return { error: describe(error) };
  }
}

/**
 * @param {unknown} value
 * @returns {value is { utf8: Uint8Array[] }}
 */
const isTextInParts = (value) =>
  value !== null && typeof value === 'object' && 'utf8' in value && Array.isArray(value.utf8);

/** @param {unknown} value */
const bound = (value) => (isTextInParts(value) ? Buffer.concat(value.utf8).toString('utf8') : value);

/**
 * The writes with their texts in parts joined; a statement without one (nearly all) as it came.
 *
 * @param {Write[]} writes
 * @returns {Write[]}
 */
const withTexts = (writes) =>
  writes.map((write) =>
    write.map((statement) =>
      Array.isArray(statement[1]) && statement[1].some(isTextInParts)
        ? [statement[0], statement[1].map(bound)]
        : statement,
    ),
  );

port.on('message', (message) => {
  if (message.type === 'close') {
    db.close();
    port.close();
    return;
  }
  port.postMessage({ id: message.id, ...commitGroup(withTexts(message.writes)) });
});
