import { BusyRetryingClient } from '../../db/busy-retry';
import { CoalescingClient } from '../../db/coalescing-client';
import { openHttpClient } from '../../db/http-client';
import { drizzle } from 'drizzle-orm/libsql/http';
import { ConfigurationError, parseConfig, secretBoxFromEnv, upstreamShares, type Config } from '../../config';
import * as schema from '../../db/schema';
import type { Deps } from '../../deps';
import { DurableObjectCounterStore, type RateLimitCounter } from './counter-store';
import { r2BlobStore } from './blob-store';
import { queueIngestionHost, type IngestWake } from './ingest-queue';
import { workersRunHost, type RunExecutorRpc } from './run-host';
import { checkEncryptionKey } from '../../resources/identities/encryption-check';
import { createLogger, type Logger } from '../../logger';
import { LibsqlCounterStore, PolicyCache } from '../../ratelimit';
import { SettingsCache } from '../../db/settings-cache';
import { settingsLoaders } from '../settings-loaders';
import { UNSLICED } from '../../lib/slices';
import { UpstreamUrlJudgements } from '../../lib/upstream-url';
import { ModelLists } from '../../providers/models';
import { RunExecutions } from '../../resources/runs/execution/executions';
import { responseEvents } from '../../resources/responses/stream';
import { workersUpstreamFetch } from './upstream-fetch';
import { configuredSandbox } from '../../sandbox/configured';
import { withKeptAvailability } from '../../sandbox/kept-availability';
import type { Metrics } from '../../metrics/gateway';
import { isolateMetrics, type IsolateMetrics, type MetricsAggregate } from './metrics';
import { readIngestionQueue } from '../../retrieval/claims';
import { workerLibraries } from '../../worker-modules';

/**
 * How the gateway runs on Workers: bindings -> config -> deps, built once per isolate and shared by
 * the fetch and scheduled handlers (worker.ts) and the Durable Objects (run-executor.ts). Data lives in
 * libSQL (Turso) at LIBSQL_URL; migrations are applied from Node with `npm run db:migrate`
 * (README: "Cloudflare Workers"). The ingest Worker (ingest-worker.ts) builds its deps from the same
 * pieces (`createSharedDeps`).
 */

/**
 * The bindings both Workers have: [vars] in wrangler.toml (wrangler.ingest.toml), secrets from
 * `wrangler secret put` (or .dev.vars), the files' bucket and the rate-limit counters.
 */
export type SharedEnv = { [Name in keyof Config]?: string } & {
  /**
   * Rate-limit counters, one object per counter (counter-store.ts): the gateway's class, which the
   * ingest Worker reaches by `script_name`. Unused with GATEWAY_RATE_LIMIT_STORE=libsql.
   */
  RATE_LIMIT_COUNTER?: DurableObjectNamespace<RateLimitCounter>;
  /** Uploaded files' bytes (blob-store.ts). */
  FILES: R2Bucket;
};

/** The gateway Worker's bindings: also the run executors and the ingestion queue. */
export type Env = SharedEnv & {
  RATE_LIMIT_COUNTER: DurableObjectNamespace<RateLimitCounter>;
  /** Where runs execute, GATEWAY_RUN_EXECUTORS objects taking turns (run-host.ts, run-executor.ts). */
  RUN_EXECUTOR: DurableObjectNamespace<RunExecutorRpc>;
  /**
   * Where files added to vector stores are announced to the ingest Worker (ingest-queue.ts). A
   * deployment without it refuses to add files (`ingestion_unavailable`).
   */
  INGEST_QUEUE?: Queue<IngestWake>;
  /**
   * The Worker's static assets (wrangler.toml [assets]): the OpenAPI document and the reference
   * page's script, which only the Worker reads (`run_worker_first`), so that the script does not carry them.
   */
  ASSETS: Fetcher;
  /** The deployment's metrics, added up from every isolate's (metrics.ts): one object. */
  METRICS: DurableObjectNamespace<MetricsAggregate>;
};

/** The gateway Worker's deps: its metrics are handed to the aggregate (worker.ts, run-executor.ts). */
export type WorkerDeps = Deps & { metrics: IsolateMetrics };

/** The isolate's deps, built on first use; a failed build is retried by the next caller. */
export const workerDeps = perIsolate(createWorkerDeps);

/** `build` run once per isolate (its bindings do not change), again after a failure. */
export function perIsolate<E, T>(build: (env: E) => Promise<T>): (env: E) => Promise<T> {
  let built: Promise<T> | undefined;
  return (env) => {
    built ??= build(env).catch((error: unknown) => {
      built = undefined;
      throw error;
    });
    return built;
  };
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
  return new ConfigurationError(
    `The Worker is missing required configuration: ${missing.map((name) => REQUIRED[name]).join('; ')}.`,
  );
}

export async function createWorkerDeps(env: Env): Promise<WorkerDeps> {
  const shared = await createSharedDeps(env, (config, log) =>
    isolateMetrics(env.METRICS, { intervalMs: config.GATEWAY_METRICS_HANDOFF_MS, log }),
  );
  shared.metrics.onScrape(readIngestionQueue(shared.db));
  return {
    ...shared,
    runHost: workersRunHost(env.RUN_EXECUTOR, shared.log, shared.config.GATEWAY_RUN_EXECUTORS),
    ingestion: env.INGEST_QUEUE ? queueIngestionHost(env.INGEST_QUEUE, shared.log) : null,
    openApiDocument: assetsDocument(env.ASSETS, '/openapi.json'),
    staticAsset: (name) => assetsFile(env.ASSETS, `/${encodeURIComponent(name)}`),
    libraries: workerLibraries,
  };
}

/** The file at `path` of the static assets, as it is read; null when there is none. */
async function assetsFile(assets: Fetcher, path: string): Promise<ReadableStream<Uint8Array> | null> {
  const response = await assets.fetch(new URL(path, 'https://assets.invalid'));
  if (response.ok) return response.body;
  await response.body?.cancel();
  return null;
}

/**
 * The JSON document at `path` of the static assets, read and parsed on first use and kept for the
 * isolate: the document, not a promise of it, so that no request waits on another's I/O. Read
 * again after a failure.
 */
function assetsDocument(assets: Fetcher, path: string): () => Promise<object> {
  let document: object | undefined;
  return async () => {
    if (document) return document;
    const response = await assets.fetch(new URL(path, 'https://assets.invalid'));
    if (!response.ok) throw new Error(`The Worker's static assets have no ${path} (${response.status}).`);
    document = await response.json<object>();
    return document;
  };
}

/** What both Workers' deps share (createSharedDeps), their metrics of kind `M`. */
type SharedDeps<M extends Metrics> = Omit<
  Deps,
  'runHost' | 'ingestion' | 'openApiDocument' | 'staticAsset' | 'libraries' | 'metrics'
> & {
  metrics: M;
};

/**
 * Everything but where runs execute, where files are ingested, the API's description and page and
 * the libraries few requests use: what both Workers need. `makeMetrics` makes what keeps the
 * metrics, the database's round trips included; none are kept without it.
 */
export async function createSharedDeps<M extends Metrics>(
  env: SharedEnv,
  makeMetrics: (config: Config, log: Logger) => M,
): Promise<SharedDeps<M>> {
  const config = parseConfig({ ...env });
  const log = createLogger(config.LOG_LEVEL);
  const metrics = makeMetrics(config, log);
  const { LIBSQL_URL: url, GATEWAY_ENCRYPTION_KEY: key } = config;
  if (!url || !key) throw missingConfigurationError(missingConfiguration(config));
  // Statements go over HTTP (Hrana over HTTP, a request each): a WebSocket is one connection, which
  // workerd would not let one request use on behalf of another.
  if (/^wss?:/i.test(url)) {
    throw new ConfigurationError(
      `LIBSQL_URL is a WebSocket URL (${new URL(url).protocol}//…): on Workers, give the database's libsql://, https:// or http:// URL.`,
    );
  }
  const secrets = await secretBoxFromEnv(key, config);
  // Reads issued together go as one batch (coalescing-client.ts); what is refused as busy is sent again.
  const client = new CoalescingClient(
    new BusyRetryingClient(
      // Not @libsql/client's: the same requests and answers for a fraction of the CPU (http-client.ts).
      // It keeps no queue: workerd refuses I/O started on behalf of one request from another's, and
      // the per-request connection limit applies anyway; for the same reason writes take no turns (busy-retry.ts).
      openHttpClient({ url, authToken: config.LIBSQL_AUTH_TOKEN }),
      { answerMs: config.GATEWAY_DATABASE_TIMEOUT_MS, timings: metrics.served ? metrics.database : undefined },
    ),
  );
  const db = drizzle(client, { schema });
  await checkEncryptionKey(db, secrets, { keySource: 'GATEWAY_ENCRYPTION_KEY', now: Date.now() });
  return {
    db,
    config,
    log,
    secrets,
    metrics,
    counters:
      config.GATEWAY_RATE_LIMIT_STORE === 'libsql' ? new LibsqlCounterStore(client, { log }) : counterObjects(env, log),
    policyCache: new PolicyCache(db),
    settings: new SettingsCache(db, settingsLoaders(db), { provisional: true }),
    now: Date.now,
    fetch: workersUpstreamFetch((input, init) => fetch(input, init)),
    upstreamShares: upstreamShares(config),
    executions: new RunExecutions(),
    responseEvents: responseEvents(db),
    upstreamUrls: new UpstreamUrlJudgements(),
    modelLists: new ModelLists(),
    requestBody: (request) => request.body,
    slices: UNSLICED,
    blobs: r2BlobStore(env.FILES),
    // A Worker cannot run bubblewrap: its sandbox is a remote one, or none.
    sandbox: withKeptAvailability(configuredSandbox(config)),
  };
}

function counterObjects(env: SharedEnv, log: Deps['log']): DurableObjectCounterStore {
  if (!env.RATE_LIMIT_COUNTER) {
    throw new Error(
      "The RATE_LIMIT_COUNTER binding is missing: bind the gateway's RateLimitCounter class (script_name), " +
        'or set GATEWAY_RATE_LIMIT_STORE=libsql.',
    );
  }
  return new DurableObjectCounterStore(env.RATE_LIMIT_COUNTER, { log });
}
