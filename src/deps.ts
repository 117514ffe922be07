import type { Config } from './config';
import type { Db } from './db/client';
import type { BlobStore } from './files/blob-store';
import type { SecretBox } from './lib/secrets';
import type { Slices } from './lib/slices';
import type { Logger } from './logger';
import type { IngestionHost } from './retrieval/host';
import type { CounterStore } from './ratelimit/counter-store';
import type { UpstreamFetch } from './providers/types';
import type { PolicyCache } from './ratelimit/policy-cache';
import type { RunHost } from './runs/host';

/**
 * Everything runtime-specific, built once per process (node/deps.ts) or isolate (workers/deps.ts)
 * and handed to createApp. App code reaches these only through here, never through globals of a
 * runtime. Functions take the part they need (`Pick<Deps, 'db' | 'now'>`).
 */
export interface Deps {
  db: Db;
  config: Config;
  log: Logger;
  /** Encrypts and decrypts provider secrets under GATEWAY_ENCRYPTION_KEY. */
  secrets: SecretBox;
  /** How upstream providers are called: Node's pooled client, Workers' fetch (tests may hand in a fake's handler). */
  fetch: UpstreamFetch;
  /** Rate-limit counters (ratelimit/counter-store.ts): libSQL by default. */
  counters: CounterStore;
  /** The active rate-limit policies per workspace, cached and indexed for matching. */
  policyCache: PolicyCache;
  /** Milliseconds since the epoch. Tests move it to cross rate-limit windows and run expiry. */
  now: () => number;
  /**
   * How runs executing side by side share the event loop (lib/slices.ts): in slices on Node, where
   * one process executes every run; not at all on Workers, where each run has its executor object.
   */
  slices: Slices;
  /**
   * A request's body, read once (middleware/json-body.ts): the Request's own stream, or on Node the
   * HTTP server's message underneath it (node/request-body.ts), which costs far less to read.
   */
  requestBody: (request: Request) => AsyncIterable<Uint8Array> | null;
  /** Where runs execute (runs/host.ts): in this process on Node, in Durable Objects on Workers. */
  runHost: RunHost;
  /** Uploaded files' bytes (files/blob-store.ts): a directory under DATA_DIR on Node, R2 on Workers. */
  blobs: BlobStore;
  /**
   * Where files added to vector stores are ingested (retrieval/host.ts): in process on Node; on Workers,
   * by the ingest Worker, told through a Queue (null without its binding).
   */
  ingestion: IngestionHost | null;
}
