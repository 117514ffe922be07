import type { Config } from '../config';
import { migrateDatabase, openDatabase, type NodeDatabase } from '../db/node';
import type { Deps } from '../deps';
import { maintainVectorIndexes } from '../retrieval/vector-index';
import { sweepRuns } from '../runs/recovery';
import { initialise, type InitResult } from '../services/organisations';
import { leaseMs } from '../services/runs';
import { createNodeApp } from './app';
import { createNodeDeps } from './deps';
import { loadSecretBox } from './key-file';
import { listen } from './server';

/**
 * The gateway on Node, started: what node.ts (the entry), the demo and the reliability suites run.
 * Nothing here runs on import.
 */

const INDEX_PASS_MS = 500;
const INDEX_IDLE_MS = 30_000;

export interface RunningGateway {
  url: string;
  deps: Deps;
  database: NodeDatabase;
  /** Keys created by this start, when the database was empty. */
  initialised: InitResult | null;
  /** Stops listening, waits for background work (up to `drainMs`), closes the database. */
  close(drainMs?: number): Promise<void>;
}

/**
 * Opens and migrates the database, initialises an empty one, listens on HOST:PORT, and settles
 * runs left behind by a crash of this or another process, now and periodically.
 */
export async function startGateway(config: Config, overrides: Partial<Deps> = {}): Promise<RunningGateway> {
  // The key first: a missing one stops the start before the database is touched.
  const secrets = overrides.secrets ?? (await loadSecretBox(config));
  const database = await openDatabase(config);
  await migrateDatabase(database.db);
  const deps = await createNodeDeps(config, database, { ...overrides, secrets });
  const initialised = await initialise(database.db, deps.now());
  for (const warning of database.warnings) deps.log.warn(warning);
  const { fetch, tasks } = createNodeApp(deps);
  const { server, url } = await listen(fetch, config);
  deps.log.info('listening', { url, database: database.location });

  const sweep = () =>
    tasks.track(
      sweepRuns(deps).then(
        (settled) => settled > 0 && deps.log.warn('settled runs left behind', { count: settled }),
        (error: unknown) => deps.log.error('run recovery sweep failed', { error }),
      ),
    );
  sweep();
  // Twice per lease: a run whose executor died is settled at most 1.5 leases after its last renewal.
  const sweeper = setInterval(sweep, leaseMs(config) / 2);
  sweeper.unref();

  // Vector indexes of large stores (retrieval/vector-index.ts): while one is back-filled, a pass of
  // INDEX_PASS_MS every other INDEX_PASS_MS, so the writer is free half the time; otherwise a look
  // for stores past the threshold (and deleted ones) every INDEX_IDLE_MS.
  let indexer: NodeJS.Timeout | undefined;
  let closing = false;
  const index = () =>
    tasks.track(
      maintainVectorIndexes(deps, { budgetMs: INDEX_PASS_MS }).then(
        (building) => {
          if (!closing) indexer = setTimeout(index, building ? INDEX_PASS_MS : INDEX_IDLE_MS).unref();
        },
        (error: unknown) => {
          deps.log.error('vector index maintenance failed', { error });
          if (!closing) indexer = setTimeout(index, INDEX_IDLE_MS).unref();
        },
      ),
    );
  index();

  return {
    url,
    deps,
    database,
    initialised,
    async close(drainMs = 10_000) {
      clearInterval(sweeper);
      closing = true;
      clearTimeout(indexer);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Idle keep-alive connections would hold close() open; streams in flight end on their own.
        if ('closeIdleConnections' in server) server.closeIdleConnections();
      });
      if (!(await tasks.drain(drainMs))) {
        deps.log.warn('background tasks still running at exit', { count: tasks.size });
      }
      database.close();
    },
  };
}
