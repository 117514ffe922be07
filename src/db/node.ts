import { chmodSync, closeSync, existsSync, openSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@libsql/client';
import { CoalescingClient } from './coalescing-client';
import { BusyRetryingClient } from './busy-retry';
// drizzle-orm/libsql/sqlite3, not drizzle-orm/libsql: given a client, both only wrap it (Drizzle's
// driver-core), but the latter imports @libsql/client's HTTP and WebSocket clients at start, about
// 10 MB of resident memory the embedded file never uses. A server's client is imported when
// LIBSQL_URL asks for one.
import { drizzle } from 'drizzle-orm/libsql/sqlite3';
import { migrate } from 'drizzle-orm/libsql/migrator';
import { ConfigurationError, type Config } from '../config';
import { innermostMessage } from '../lib/network-errors';
import { makeDirectory } from '../lib/make-directory';
import type { Db } from './client';
import { openEmbeddedClients } from './embedded-client';
import * as schema from './schema';
import { TimingsRelay } from './timings';

/**
 * Opening the database on Node: the server, the CLI, the tests and the benchmarks all come here.
 * The embedded default is a libSQL file under DATA_DIR in WAL mode; LIBSQL_URL points the same
 * code at a libSQL server or Turso instead.
 */

/**
 * drizzle/ of this package, found from this module's file upward: the module is src/db/node.ts
 * under tsx and vitest, and part of dist/node.js or dist/cli.js once built (scripts/build-node.mjs).
 */
export const MIGRATIONS_FOLDER = join(
  findUpward(dirname(fileURLToPath(import.meta.url)), join('drizzle', 'meta', '_journal.json')),
  'drizzle',
);

/** The nearest directory at or above `from` that holds `marker` (a path relative to it). */
export function findUpward(from: string, marker: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, marker))) return dir;
    if (dirname(dir) === dir) throw new Error(`no ${marker} above ${from}: the package is incomplete`);
  }
}

export interface NodeDatabase {
  db: Db;
  client: Client;
  /**
   * The client rate-limit counters use. On the embedded file, the immediate client of the file
   * (embedded-client.ts): its writes commit at once on the event loop's thread, without waiting
   * for the disk (synchronous = NORMAL) and without joining the app's groups on the writer thread,
   * where an admission would wait for another group's commit and fsync, and for its own, before
   * a run could be created. An admitted run is answered only after its own commit, which does wait
   * for the disk and, the WAL being one append-only file, makes the admission before it durable
   * too. A kill loses nothing; a power loss can lose the token charges of runs that ended just
   * before it. On a server: the same client.
   */
  countersClient: Client;
  /** Where the data lives, for start-up messages: a file path or a URL without credentials. */
  location: string;
  embedded: boolean;
  /** Data files or a data directory found open to other users, for the caller to report. */
  warnings: string[];
  /** Where statements' and commits' durations go: nowhere until pointed at the metrics (runtime/node/deps.ts). */
  timings: TimingsRelay;
  close(): void;
}

type DatabaseConfig = Pick<Config, 'DATA_DIR' | 'LIBSQL_URL' | 'LIBSQL_AUTH_TOKEN'> &
  Partial<Pick<Config, 'GATEWAY_DATABASE_TIMEOUT_MS' | 'GATEWAY_DATABASE_WRITERS'>>;

export async function openDatabase(config: DatabaseConfig): Promise<NodeDatabase> {
  const embedded = !config.LIBSQL_URL;
  let client: Client;
  let countersClient: Client;
  let location: string;
  let warnings: string[] = [];
  const timings = new TimingsRelay();
  if (config.LIBSQL_URL) {
    const { createClient } = await import('@libsql/client');
    // Reads issued together go as one batch (coalescing-client.ts); what is refused as busy is sent again.
    client = new CoalescingClient(
      new BusyRetryingClient(
        createClient({ url: config.LIBSQL_URL, authToken: config.LIBSQL_AUTH_TOKEN, fetch: uncompressedFetch }),
        {
          answerMs: config.GATEWAY_DATABASE_TIMEOUT_MS,
          writers: config.GATEWAY_DATABASE_WRITERS,
          timings,
        },
      ),
    );
    const url = new URL(config.LIBSQL_URL);
    location = `${url.protocol}//${url.host}${url.pathname === '/' ? '' : url.pathname}`;
    countersClient = client;
    await reach(client, location);
  } else {
    location = resolve(config.DATA_DIR, 'gateway.db');
    warnings = keepDataPrivate(config.DATA_DIR, location);
    // Reads run on the event loop's thread, the app's writes commit on a thread of their own
    // (embedded-client.ts says why). Other processes on the same file wait up to this many ms
    // for its write lock; the two clients never wait for each other's.
    ({ client, immediateClient: countersClient } = openEmbeddedClients(location, { timeoutMs: 5000, timings }));
    // WAL lets readers (this thread's, the CLI's, a second gateway's) proceed during writes.
    await client.execute('PRAGMA journal_mode = WAL');
    // The connection of the event loop's thread: its only commits are the counters' (and
    // migrations'). Checkpoints, which copy the WAL into the file and wait for the disk, are left
    // to the writer thread's commits.
    await countersClient.execute('PRAGMA synchronous = NORMAL');
    await countersClient.execute('PRAGMA wal_autocheckpoint = 0');
  }
  const db = drizzle(client, { schema });
  const close = () => {
    if (countersClient !== client) countersClient.close();
    client.close();
  };
  return { db, client, countersClient, location, embedded, warnings, timings, close };
}

/**
 * `fetch` for a libSQL server's answers, asked for as they are: sqld gzips every answer to a client
 * that accepts it, as Node's fetch does by default, and Node then runs a zlib stream for each one
 * (its own buffers, set up and torn down per answer). That was 18% of the Node server's CPU on a
 * local sqld, about 2 ms a run of its 10. An answer holds the rows of one request, a page of a list
 * at most; the bandwidth that costs a server in the same network is cheaper than the CPU.
 */
function uncompressedFetch(request: Request): Promise<Response> {
  request.headers.set('accept-encoding', 'identity');
  return fetch(request);
}

/** How long a remote database has to answer its first statement before the start gives up. */
const REACH_TIMEOUT_MS = 15_000;

/**
 * A remote database answers a first statement, or the start stops here naming the database and
 * the cause (a refused connection, a name that does not resolve, a refused token), rather than at
 * the first migration's statement with none.
 */
async function reach(client: Client, location: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${REACH_TIMEOUT_MS / 1000} s`)), REACH_TIMEOUT_MS);
  });
  try {
    await Promise.race([client.execute('SELECT 1'), timeout]);
  } catch (error) {
    client.close();
    throw new ConfigurationError(`Cannot reach the database at LIBSQL_URL (${location}): ${innermostMessage(error)}.`);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The embedded database holds every tenant's threads: its files are the owner's alone. DATA_DIR
 * is created 0700, and the database file 0600 before SQLite opens it, since SQLite gives the -wal
 * and -shm files it creates the database file's mode. Existing database files that others can
 * read are tightened to 0600 (they are the gateway's own, and an upgrade from a looser version
 * should not stop the start) with a warning, since their data may already have been read. An
 * existing directory that others can enter only gets a warning: it may be shared on purpose, and
 * the files inside are what matter. Windows has no such permission bits.
 */
export function keepDataPrivate(dataDir: string, databaseFile: string): string[] {
  const warnings: string[] = [];
  const created = makeDirectory(dataDir, 0o700);
  if (process.platform === 'win32') return warnings;
  const modeOf = (path: string) => statSync(path, { throwIfNoEntry: false })?.mode;
  const directoryMode = statSync(dataDir).mode & 0o777;
  if (!created && (directoryMode & 0o077) !== 0) {
    warnings.push(
      `The data directory ${dataDir} is open to other users (mode ${directoryMode.toString(8)}); ` +
        `its database files are kept 600, but consider \`chmod 700 ${dataDir}\`.`,
    );
  }
  closeSync(openSync(databaseFile, 'a', 0o600));
  for (const path of [databaseFile, `${databaseFile}-wal`, `${databaseFile}-shm`]) {
    const mode = (modeOf(path) ?? 0) & 0o777;
    if ((mode & 0o077) === 0) continue;
    chmodSync(path, 0o600);
    warnings.push(
      `${path} was open to other users (mode ${mode.toString(8)}): changed to 600. ` +
        'Consider its data (threads, messages, runs) seen by whoever could read it.',
    );
  }
  return warnings;
}

/**
 * Applies the migrations in drizzle/. Two processes starting together on one database may race to
 * apply the same migration; the loser's batch fails as a whole, so it checks once more and finds
 * the work done.
 */
export async function migrateDatabase(db: Db): Promise<void> {
  try {
    await migrate(db, { migrationsFolder: MIGRATIONS_FOLDER });
  } catch (error) {
    await migrate(db, { migrationsFolder: MIGRATIONS_FOLDER }).catch(() => {
      throw error;
    });
  }
}
