import { createClient } from '@libsql/client/web';
import { drizzle } from 'drizzle-orm/libsql/web';
import { parseConfig, type Config } from '../config';
import * as schema from '../db/schema';
import type { Context } from 'hono';
import type { AppEnv, Deps } from '../deps';
import { DurableObjectCounterStore, type RateLimitCounter } from './counter-store';
import type { RunExecutor } from './run-executor';
import { secretBoxFromEnv } from '../lib/secrets';
import { createLogger } from '../logger';
import { LibsqlCounterStore, PolicyCache } from '../ratelimit';
import { UNSLICED } from '../lib/slices';

/**
 * How the gateway runs on Workers: bindings -> config -> deps, built once per isolate and shared by
 * the fetch and scheduled handlers (worker.ts) and the Durable Objects (run-executor.ts). Data lives in
 * libSQL (Turso) at LIBSQL_URL; migrations are applied from Node with `npm run db:migrate`
 * (README: "Cloudflare Workers").
 */

/**
 * The bindings: [vars] in wrangler.toml, secrets from `wrangler secret put` (or .dev.vars), and the
 * Durable Object namespaces.
 */
export type Env = { [Name in keyof Config]?: string } & {
  /** Rate-limit counters, one object per counter (counter-store.ts). */
  RATE_LIMIT_COUNTER: DurableObjectNamespace<RateLimitCounter>;
  /** Where runs execute, one object per run (run-executor.ts). */
  RUN_EXECUTOR: DurableObjectNamespace<RunExecutor>;
};

let built: Promise<Deps> | undefined;

/** The isolate's deps, built on first use; a failed build is retried by the next caller. */
export function workerDeps(env: Env): Promise<Deps> {
  built ??= createWorkerDeps(env).catch((error: unknown) => {
    built = undefined;
    throw error;
  });
  return built;
}

export async function createWorkerDeps(env: Env): Promise<Deps> {
  const config = parseConfig({ ...env });
  if (!config.LIBSQL_URL) throw new Error('LIBSQL_URL is required on Workers (a Turso or libSQL server URL)');
  if (!config.GATEWAY_ENCRYPTION_KEY) {
    throw new Error(
      'GATEWAY_ENCRYPTION_KEY is required on Workers: `wrangler secret put GATEWAY_ENCRYPTION_KEY` with the ' +
        '32-byte base64 key that every host of this database uses (`openssl rand -base64 32` makes one).',
    );
  }
  const secrets = await secretBoxFromEnv(config.GATEWAY_ENCRYPTION_KEY);
  const client = createClient({
    url: config.LIBSQL_URL,
    authToken: config.LIBSQL_AUTH_TOKEN,
    // The client is shared by every request of the isolate. Its default limit (20) queues a
    // statement behind another request's, and workerd refuses I/O started on behalf of one request
    // from another's; the per-request connection limit applies anyway.
    concurrency: Number.MAX_SAFE_INTEGER,
  });
  const db = drizzle(client, { schema });
  const log = createLogger(config.LOG_LEVEL);
  const runs = env.RUN_EXECUTOR;
  return {
    db,
    config,
    log,
    secrets,
    counters:
      config.GATEWAY_RATE_LIMIT_STORE === 'libsql'
        ? new LibsqlCounterStore(client, { log })
        : new DurableObjectCounterStore(env.RATE_LIMIT_COUNTER, { log }),
    policyCache: new PolicyCache(db),
    now: Date.now,
    background: (c, task) => c.executionCtx.waitUntil(task),
    // Should the hand-over fail, the run is still leased: recovery fails it once the lease runs out.
    dispatchRun: (c, run, preloaded) =>
      handOver(c, runs, run.id, (executor) => executor.start(run, preloaded), (error) =>
        log.error('run could not be handed to its executor', { run_id: run.id, request_id: c.var.requestId, error }),
      ),
    streamRun: (_c, run, options) => runExecutor(runs, run.id).stream(run, options),
    // The run's lease renewal notices the cancel anyway, within a third of the lease.
    abortRun: (c, runId) =>
      handOver(c, runs, runId, (executor) => executor.cancel(runId), (error) =>
        log.warn('cancel could not reach the run executor', { run_id: runId, request_id: c.var.requestId, error }),
      ),
    fetch: (input, init) => fetch(input, init),
    slices: UNSLICED,
  };
}

/**
 * A call to a run's executor object that the request does not wait for (the object outlives the
 * request): kept going by the request's waitUntil, its failure reported by `failed`.
 */
function handOver(
  c: Context<AppEnv>,
  namespace: DurableObjectNamespace<RunExecutor>,
  runId: string,
  call: (executor: DurableObjectStub<RunExecutor>) => Promise<unknown>,
  failed: (error: unknown) => void,
) {
  c.var.deps.background(c, call(runExecutor(namespace, runId)).catch(failed));
}

/** The object where a run executes, one per run (a continued run comes back to the same one). */
function runExecutor(namespace: DurableObjectNamespace<RunExecutor>, runId: string) {
  return namespace.get(namespace.idFromName(runId));
}
