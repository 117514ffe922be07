import { createClient } from '@libsql/client/web';
import { drizzle } from 'drizzle-orm/libsql/web';
import { ConfigurationError, parseConfig, type Config } from '../config';
import * as schema from '../db/schema';
import type { Deps } from '../deps';
import { DurableObjectCounterStore, type RateLimitCounter } from './counter-store';
import { r2BlobStore } from './blob-store';
import { workersRunHost, type RunExecutorRpc } from './run-host';
import { secretBoxFromEnv } from '../lib/secrets';
import { checkEncryptionKey } from '../services/encryption-check';
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
  RUN_EXECUTOR: DurableObjectNamespace<RunExecutorRpc>;
  /** Uploaded files' bytes (blob-store.ts). */
  FILES: R2Bucket;
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

/** What a Worker cannot serve without, and how to give it. */
const REQUIRED = {
  LIBSQL_URL: 'LIBSQL_URL (the URL of a Turso or libSQL server)',
  GATEWAY_ENCRYPTION_KEY:
    'GATEWAY_ENCRYPTION_KEY (`wrangler secret put GATEWAY_ENCRYPTION_KEY` with the 32-byte base64 key that every ' +
    'host of the database uses; `openssl rand -base64 32` makes one)',
} as const;

/** The required variables the bindings lack. Property reads only: worker.ts asks on every request. */
export function missingConfiguration(env: Partial<Record<keyof typeof REQUIRED, unknown>>): (keyof typeof REQUIRED)[] {
  return (Object.keys(REQUIRED) as (keyof typeof REQUIRED)[]).filter((name) => !env[name]);
}

/** What a Worker lacking `missing` answers (503) and logs. */
export function missingConfigurationError(missing: (keyof typeof REQUIRED)[]): ConfigurationError {
  return new ConfigurationError(`The Worker is missing required configuration: ${missing.map((name) => REQUIRED[name]).join('; ')}.`);
}

export async function createWorkerDeps(env: Env): Promise<Deps> {
  const config = parseConfig({ ...env });
  const { LIBSQL_URL: url, GATEWAY_ENCRYPTION_KEY: key } = config;
  if (!url || !key) throw missingConfigurationError(missingConfiguration(config));
  const secrets = await secretBoxFromEnv(key);
  const client = createClient({
    url,
    authToken: config.LIBSQL_AUTH_TOKEN,
    // The client is shared by every request of the isolate. Its default limit (20) queues a
    // statement behind another request's, and workerd refuses I/O started on behalf of one request
    // from another's; the per-request connection limit applies anyway.
    concurrency: Number.MAX_SAFE_INTEGER,
  });
  const db = drizzle(client, { schema });
  await checkEncryptionKey(db, secrets, { keySource: 'GATEWAY_ENCRYPTION_KEY', now: Date.now() });
  const log = createLogger(config.LOG_LEVEL);
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
    runHost: workersRunHost(env.RUN_EXECUTOR, log),
    fetch: (input, init) => fetch(input, init),
    slices: UNSLICED,
    blobs: r2BlobStore(env.FILES),
    // The ingestion libraries do not fit the gateway Worker's bundle: see retrieval/host.ts.
    ingestion: null,
  };
}
