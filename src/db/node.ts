import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient, type Client } from '@libsql/client';
import { drizzle } from 'drizzle-orm/libsql';
import { migrate } from 'drizzle-orm/libsql/migrator';
import type { Config } from '../config';
import type { Db } from './client';
import { openEmbeddedClient } from './embedded-client';
import * as schema from './schema';

/**
 * Opening the database on Node: the server, the CLI, the tests and the benchmarks all come here.
 * The embedded default is a libSQL file under DATA_DIR in WAL mode; LIBSQL_URL points the same
 * code at a libSQL server or Turso instead.
 */

export const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../drizzle', import.meta.url));

export interface NodeDatabase {
  db: Db;
  client: Client;
  /**
   * The connection rate-limit counters use. On the embedded file, a second connection whose commits
   * do not wait for the disk (synchronous = NORMAL), and which commits each write at once: an
   * admission would otherwise add a commit waiting for an fsync to every run creation (ms at p99),
   * and wait for the end of the event loop's turn, behind other requests' I/O, to join a group
   * that saves nothing without an fsync. An admitted run is answered only after its own commit,
   * which does wait for the disk and, the WAL being one append-only file, makes the admission
   * before it durable too. A kill loses nothing; a power loss can lose the token charges of runs
   * that ended just before it. On a server: the same client.
   */
  countersClient: Client;
  /** Where the data lives, for start-up messages: a file path or a URL without credentials. */
  location: string;
  embedded: boolean;
  close(): void;
}

type DatabaseConfig = Pick<Config, 'DATA_DIR' | 'LIBSQL_URL' | 'LIBSQL_AUTH_TOKEN'>;

export async function openDatabase(config: DatabaseConfig): Promise<NodeDatabase> {
  const embedded = !config.LIBSQL_URL;
  let client: Client;
  let countersClient: Client;
  let location: string;
  if (config.LIBSQL_URL) {
    client = createClient({ url: config.LIBSQL_URL, authToken: config.LIBSQL_AUTH_TOKEN });
    const url = new URL(config.LIBSQL_URL);
    location = `${url.protocol}//${url.host}${url.pathname === '/' ? '' : url.pathname}`;
    countersClient = client;
  } else {
    mkdirSync(config.DATA_DIR, { recursive: true });
    location = resolve(config.DATA_DIR, 'gateway.db');
    // One connection for the app: every statement on the embedded file is a synchronous call, so
    // more would not add parallelism. Other processes on the same file wait up to this many ms for
    // its write lock. The counters' connection never waits on this one either: neither holds a
    // transaction open across calls.
    client = openEmbeddedClient(location, { timeoutMs: 5000 });
    // WAL lets readers in other processes (the CLI, a second gateway) proceed during writes.
    await client.execute('PRAGMA journal_mode = WAL');
    countersClient = openEmbeddedClient(location, { timeoutMs: 5000, groupCommit: false });
    await countersClient.execute('PRAGMA synchronous = NORMAL');
    // Checkpoints (which copy the WAL into the file, and wait for the disk) are left to the app's
    // commits, which follow admissions and charges: an admission never waits for one.
    await countersClient.execute('PRAGMA wal_autocheckpoint = 0');
  }
  const db = drizzle(client, { schema });
  const close = () => {
    if (countersClient !== client) countersClient.close();
    client.close();
  };
  return { db, client, countersClient, location, embedded, close };
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
