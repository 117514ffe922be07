import { serve } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { createApp } from './app';
import { parseConfig, type Config } from './config';
import { migrateDatabase, openDatabase, type NodeDatabase } from './db/node';
import type { Deps } from './deps';
import { TaskTracker } from './lib/tasks';
import { createLogger } from './logger';
import { initialise, type InitResult } from './services/organisations';

/**
 * How the gateway runs on Node: the runtime half that node.ts (the entry), the CLI, the tests, the
 * demo and the benchmarks share. Nothing here runs on import.
 */

export function nodeConfig(env: Record<string, string | undefined>): Config {
  return parseConfig({
    // Local model servers (Ollama, vLLM, llama.cpp) listen on loopback or the LAN.
    GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
    ...env,
  });
}

/** The Node deps around an open database. `overrides` lets tests swap the clock or the logger. */
export function createNodeDeps(config: Config, database: NodeDatabase, overrides: Partial<Deps> = {}) {
  const tasks = new TaskTracker();
  const deps: Deps = {
    db: database.db,
    config,
    log: createLogger(config.LOG_LEVEL),
    now: Date.now,
    background: (_c, task) => tasks.track(task),
    ...overrides,
  };
  return { deps, tasks };
}

export interface RunningGateway {
  url: string;
  deps: Deps;
  database: NodeDatabase;
  /** Keys created by this start, when the database was empty. */
  initialised: InitResult | null;
  /** Stops listening, waits for background work (up to `drainMs`), closes the database. */
  close(drainMs?: number): Promise<void>;
}

/** Opens and migrates the database, initialises an empty one, and listens on HOST:PORT. */
export async function startGateway(config: Config, overrides: Partial<Deps> = {}): Promise<RunningGateway> {
  const database = await openDatabase(config);
  await migrateDatabase(database.db);
  const { deps, tasks } = createNodeDeps(config, database, overrides);
  const initialised = await initialise(database.db, deps.now());
  const app = createApp(deps);
  const server = serve({ fetch: app.fetch, hostname: config.HOST, port: config.PORT });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  deps.log.info('listening', { url, database: database.location });

  return {
    url,
    deps,
    database,
    initialised,
    async close(drainMs = 10_000) {
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
