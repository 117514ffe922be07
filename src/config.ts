import * as z from 'zod';
import { FairShares, type ShareLimits, type ShareTimeout } from './lib/fair-shares';
import { keyTextProblem, SecretBox } from './lib/secrets';
import { parseUpstreamHostPatterns } from './lib/upstream-url';

/**
 * The environment, validated once at the entry (node.ts, worker.ts) and never read elsewhere.
 * Every variable is listed in the README's configuration table and in .dev.vars.example.
 */

/** A boolean: `true`/`1` or `false`/`0`, nothing looser (a `yes` is refused rather than guessed at). */
const flag = z
  .enum(['true', 'false', '1', '0'], { error: 'must be true, false, 1 or 0' })
  .transform((v) => v === 'true' || v === '1');

const positiveInt = z.coerce.number().int().positive();

/**
 * OTEL_EXPORTER_OTLP_HEADERS: `key=value,key2=value2`, keys and values trimmed and percent-decoded
 * (the OpenTelemetry specification's format); null when a pair has no key or no `=`.
 */
function parseOtlpHeaders(text: string): Record<string, string> | null {
  const headers: Record<string, string> = {};
  for (const pair of text.split(',')) {
    if (pair.trim() === '') continue;
    const at = pair.indexOf('=');
    if (at <= 0) return null;
    try {
      headers[decodeURIComponent(pair.slice(0, at).trim()).toLowerCase()] = decodeURIComponent(
        pair.slice(at + 1).trim(),
      );
    } catch {
      return null;
    }
  }
  return headers;
}

/** GATEWAY_DATABASE_TIMEOUT_MS's default: how long db/busy-retry.ts gives the server to answer. */
export const DEFAULT_ANSWER_MS = 30_000;

/**
 * GATEWAY_DATABASE_WRITERS's default: the most that a local sqld sharing 2 cores with the gateway
 * and its load held under round after round; with 8 its waiting writers were left spinning now and
 * then (the reliability suite's sqld-writers.test.ts). A distant server may want more: each write holds its
 * turn for a round trip.
 */
export const DEFAULT_SERVER_WRITERS = 4;

/**
 * The environment's schema, built for each parse and not kept: about 160 zod schemas and 0.3 MB of
 * heap that a running gateway has no use for once it has its Config (docs/development.md, "Known
 * limits").
 */
export const configSchema = () =>
  z
    .object({
      /** Where the Node server listens. */
      PORT: z.coerce.number().int().min(0).max(65535).default(8787),
      HOST: z.string().min(1).default('127.0.0.1'),
      /** Node: the directory of the embedded database (and of the generated encryption key). */
      DATA_DIR: z.string().min(1).default('./data'),
      /** A remote libSQL server or Turso database; unset on Node means the embedded file. */
      LIBSQL_URL: z.string().url().optional(),
      LIBSQL_AUTH_TOKEN: z.string().optional(),
      /**
       * With LIBSQL_URL (and on Workers): how long the server has to answer a statement or a batch
       * before the request that sent it fails with 503 database_timeout (db/busy-retry.ts).
       */
      GATEWAY_DATABASE_TIMEOUT_MS: positiveInt.default(DEFAULT_ANSWER_MS),
      /**
       * Node with LIBSQL_URL: writes sent to the server at once, the others wait their turn
       * (db/busy-retry.ts: a local sqld spun under 8 now and then, and collapsed under 16 or more).
       */
      GATEWAY_DATABASE_WRITERS: positiveInt.default(DEFAULT_SERVER_WRITERS),
      /** Requests with a larger body are refused with 413, also when sent chunked. */
      GATEWAY_MAX_BODY_BYTES: positiveInt.default(4 * 1024 * 1024),
      /**
       * The largest file POST /v1/files accepts (413 past it), counted as it streams to the blob store;
       * uploads are exempt from GATEWAY_MAX_BODY_BYTES. Workers' platform caps request bodies lower
       * (100 MB on the Free and Pro plans) whatever this says.
       */
      GATEWAY_MAX_FILE_BYTES: positiveInt.default(512 * 1024 * 1024),
      /**
       * The bytes of a workspace's files together (400 quota_exceeded past it): what one tenant may
       * store. Uploads reserve their bytes against it before writing them (resources/files/reservation.ts).
       */
      GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE: positiveInt.default(10 * 1024 * 1024 * 1024),
      /**
       * Node: the free space an upload must leave on DATA_DIR's filesystem (507 insufficient_storage
       * past it, looked at before and while the file is written), so that uploads cannot fill the
       * disk the database writes to. 0 turns the check off.
       */
      GATEWAY_MIN_FREE_DISK_BYTES: z.coerce
        .number()
        .int()
        .min(0)
        .default(1024 * 1024 * 1024),
      LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
      /**
       * The AES-256-GCM key of provider secrets: 32 bytes, base64. Required on Workers and with
       * LIBSQL_URL; on Node's embedded default, generated once into DATA_DIR/encryption.key when unset.
       */
      GATEWAY_ENCRYPTION_KEY: z.string().optional(),
      /**
       * The key GATEWAY_ENCRYPTION_KEY replaces, while it is rotated (docs/operations.md): secrets
       * sealed under it still open, and `gateway encryption-key rotate` seals them under the new one.
       */
      GATEWAY_ENCRYPTION_KEY_PREVIOUS: z.string().optional(),
      /**
       * Loopback and private upstreams (local servers: Ollama, vLLM, llama.cpp), and such hosts in
       * messages' image URLs: true allows them, false refuses them, unset allows them only while the
       * database holds a single workspace.
       */
      GATEWAY_ALLOW_PRIVATE_UPSTREAMS: flag.optional(),
      /**
       * The organisation whose keys may read GET /metrics, whose figures are every organisation's;
       * unset, an organisation key may while the database holds a single organisation.
       */
      GATEWAY_METRICS_ORGANISATION: z.string().min(1).max(128).optional(),
      /**
       * Workers: how often, at most, an isolate hands the metrics it recorded to the deployment's
       * aggregate (runtime/workers/metrics.ts), in ms; an evicted isolate loses at most this much of
       * its own. Within a request's `waitUntil` allowance (30 s).
       */
      GATEWAY_METRICS_HANDOFF_MS: z.coerce.number().int().min(0).max(20_000).default(10_000),
      /**
       * Node: an OpenTelemetry collector's OTLP/HTTP base URL; set, the metrics are sent to its
       * `/v1/metrics` every OTEL_METRIC_EXPORT_INTERVAL ms, JSON-encoded (metrics/otlp.ts). Unset, nothing is sent.
       */
      OTEL_EXPORTER_OTLP_ENDPOINT: z.url({ protocol: /^https?$/ }).optional(),
      /** Node: headers sent with each export, `key=value` pairs separated by commas, values percent-encoded (OTel's format). */
      OTEL_EXPORTER_OTLP_HEADERS: z
        .string()
        .transform((text, ctx) => {
          const headers = parseOtlpHeaders(text);
          if (headers) return headers;
          ctx.addIssue({ code: 'custom', message: 'must be key=value pairs separated by commas' });
          return z.NEVER;
        })
        .default({}),
      /** Node: milliseconds between two OTLP exports (at least 100). */
      OTEL_METRIC_EXPORT_INTERVAL: z.coerce.number().int().min(100).default(60_000),
      /** Comma-separated host[:port] patterns allowed as upstreams even when private addresses are not. */
      GATEWAY_ALLOWED_UPSTREAM_HOSTS: z
        .string()
        .transform((text, ctx) => {
          const parsed = parseUpstreamHostPatterns(text);
          if ('patterns' in parsed) return parsed.patterns;
          ctx.addIssue({ code: 'custom', message: parsed.problem });
          return z.NEVER;
        })
        .default([]),
      /** The embeddings model of new vector stores, unless their workspace sets another (workspaces.embeddings_model). */
      GATEWAY_EMBEDDINGS_MODEL: z.string().min(1).max(256).default('text-embedding-3-small'),
      /**
       * The dimensions asked of models that can shorten their vectors (OpenAI's text-embedding-3-*):
       * smaller vectors search faster and take less room; other models answer their own size.
       */
      GATEWAY_EMBEDDINGS_DIMENSIONS: positiveInt.max(4096).default(512),
      /**
       * Ingestion of a vector store's files: the largest file indexed (its bytes are read whole), the
       * most chunks one file may make (its chunks are written in one transaction), what a file's
       * compressed parts may inflate to (a PDF's streams, a DOCX's parts, counted before any library
       * inflates them), and a PDF's pages. Past any of them the file ends `failed`, saying which.
       */
      GATEWAY_INGEST_MAX_FILE_BYTES: positiveInt.default(64 * 1024 * 1024),
      GATEWAY_INGEST_MAX_CHUNKS: positiveInt.default(4096),
      GATEWAY_INGEST_MAX_INFLATED_BYTES: positiveInt.default(128 * 1024 * 1024),
      GATEWAY_INGEST_MAX_PAGES: positiveInt.default(5000),
      /**
       * Node: files ingested at once, and at most this many of one workspace (so that one tenant's big
       * files or slow embeddings provider hold only its own share).
       */
      GATEWAY_INGEST_CONCURRENCY: positiveInt.max(64).default(2),
      GATEWAY_INGEST_CONCURRENCY_PER_WORKSPACE: positiveInt.max(64).default(1),
      /**
       * Node: a file is read and chunked in a process of its own (runtime/node/chunker-pool.ts), at a lower
       * priority than the server; past this much CPU time, or this much memory, the process is
       * stopped and the file ends `failed`, saying which.
       */
      GATEWAY_INGEST_MAX_CPU_SECONDS: positiveInt.default(120),
      GATEWAY_INGEST_MAX_MEMORY_MB: positiveInt.min(64).default(512),
      /**
       * A vector store with at least this many chunks gets an approximate-nearest-neighbour index of its
       * own (retrieval/vector-index.ts), built in the background; smaller stores are searched exactly.
       */
      GATEWAY_VECTOR_INDEX_MIN_CHUNKS: positiveInt.default(5000),
      /** At most this many stores have such an index (each adds a trigger to every chunk insert); the others are searched exactly. */
      GATEWAY_VECTOR_INDEX_MAX_STORES: positiveInt.max(1000).default(100),
      /** A run fails when its upstream sends no first byte (connection and headers included) in this time. */
      GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: positiveInt.default(60_000),
      /**
       * A run fails when its upstream goes silent mid-answer for longer than this; a streaming client
       * that reads nothing for this long is detached (stops receiving events) rather than holding the run.
       */
      GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS: positiveInt.default(60_000),
      /**
       * The most one turn of a run keeps of an upstream's answers: text, tool-call names and arguments
       * together, in UTF-8 bytes, over all the turn's calls (its file-search rounds). Past it the
       * upstream call is dropped and the run ends `incomplete`.
       */
      GATEWAY_MAX_ANSWER_BYTES: positiveInt.default(4 * 1024 * 1024),
      /**
       * The most of a thread's history one turn of a run sends its provider: earlier messages, tool
       * calls and outputs, the newest first, in bytes. Older ones are left out, as `auto` truncation
       * leaves out what does not fit a model's context; it bounds what a turn reads and holds.
       */
      GATEWAY_MAX_HISTORY_BYTES: positiveInt.default(8 * 1024 * 1024),
      /**
       * The most one request of a run to its provider may be, in bytes as sent (images as their
       * base64): older history is left out to fit it, then images past it; a run whose instructions,
       * tools and the turn being answered do not fit even then fails with a last_error saying so.
       */
      GATEWAY_MAX_UPSTREAM_REQUEST_BYTES: positiveInt.min(64 * 1024).default(48 * 1024 * 1024),
      /**
       * Fair shares of the provider calls one process makes (resources/runs/execution/upstream-call.ts, lib/fair-shares.ts):
       * calls in flight at once, in all and per workspace, and the bytes of requests built and not yet
       * sent (images aside: they are streamed), in all and per workspace. A call past them waits its
       * turn, in order, within its first-byte timeout; past that its run fails with a last_error
       * naming the limit. A workspace's own calls are many more than its clients' connections: a run
       * created without streaming executes after its answer (one workspace at 370 runs/s on 2 cores
       * held over 64 calls at once).
       */
      GATEWAY_UPSTREAM_CALLS: positiveInt.default(1024),
      GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE: positiveInt.default(256),
      GATEWAY_UPSTREAM_BYTES: positiveInt.default(256 * 1024 * 1024),
      GATEWAY_UPSTREAM_BYTES_PER_WORKSPACE: positiveInt.default(64 * 1024 * 1024),
      /** A run not finished this long after its creation expires (OpenAI: 10 minutes). */
      GATEWAY_RUN_EXPIRES_AFTER_SECONDS: positiveInt.default(600),
      /**
       * A run whose executor stopped renewing its claim this long ago (a crash, a kill -9) fails with
       * a last_error saying so; executors renew every third of it.
       */
      GATEWAY_RUN_LEASE_SECONDS: positiveInt.default(30),
      /**
       * Workers only: where rate-limit counters live, one Durable Object per counter (the default
       * there) or the libSQL table that Node uses. Node always counts in libSQL.
       */
      GATEWAY_RATE_LIMIT_STORE: z.enum(['durable-object', 'libsql']).optional(),
      /**
       * Workers only: how many Durable Objects execute runs, each run in the one its id hashes to
       * (runtime/workers/run-host.ts), so that an object serves run after run rather than being
       * created for each; 0: an object of its own for every run.
       */
      GATEWAY_RUN_EXECUTORS: z.coerce.number().int().min(0).max(4096).default(32),
      /**
       * Node's HTTP server: a client must send a request's headers within the first, and the whole
       * request (headers and body) within the second; connections beyond the third are refused.
       */
      GATEWAY_HEADERS_TIMEOUT_MS: positiveInt.default(10_000),
      GATEWAY_REQUEST_TIMEOUT_MS: positiveInt.default(60_000),
      GATEWAY_MAX_CONNECTIONS: positiveInt.default(1024),
      /**
       * Per-workspace budgets on the control plane (400 quota_exceeded past them): active rate-limit
       * policies, conditions per policy (at most the API's own bound of 32), the bytes of a workspace's
       * active policies (names, conditions and group_by as stored), live virtual keys, live assistants.
       */
      GATEWAY_MAX_POLICIES_PER_WORKSPACE: positiveInt.default(1000),
      GATEWAY_MAX_POLICY_CONDITIONS: positiveInt.max(32).default(32),
      GATEWAY_MAX_POLICY_BYTES_PER_WORKSPACE: positiveInt.default(1024 * 1024),
      GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE: positiveInt.default(100),
      GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE: positiveInt.default(10_000),
      /**
       * Tokens a run turn reserves for its completion in each matching tokens policy when it sets no
       * max_completion_tokens (on top of an estimate of its prompt); released against the real usage.
       */
      GATEWAY_TOKEN_RESERVATION: positiveInt.default(1024),
      /**
       * code_interpreter's sandbox (sandbox/sandbox.ts). A remote one, served by `gateway sandbox`
       * (Workers, or a Node host without bubblewrap): its URL and the secret both ends share.
       */
      GATEWAY_SANDBOX_URL: z.string().url().optional(),
      GATEWAY_SANDBOX_SECRET: z.string().min(32, { error: 'must be at least 32 characters' }).optional(),
      /** A thread's session ends after this long without a call (OpenAI's: one hour). */
      GATEWAY_SANDBOX_IDLE_MS: positiveInt.default(60 * 60 * 1000),
      /** Sessions at once, in all and per workspace: past them the oldest idle one is ended, or a call waits for none. */
      GATEWAY_SANDBOX_SESSIONS: positiveInt.default(16),
      GATEWAY_SANDBOX_SESSIONS_PER_WORKSPACE: positiveInt.default(4),
      /** The wall time one call may run; past it the session's processes are killed and the session ends. */
      GATEWAY_SANDBOX_TIMEOUT_MS: positiveInt.default(60_000),
      /** The CPU time each process of a session may take over the session's life (RLIMIT_CPU). */
      GATEWAY_SANDBOX_CPU_SECONDS: positiveInt.default(600),
      /**
       * The address space each process of a session may map (RLIMIT_AS), in MiB; with a cgroup per
       * session (GATEWAY_SANDBOX_CGROUP), also the memory of its processes together.
       */
      GATEWAY_SANDBOX_MEMORY_MB: positiveInt.min(256).default(1024),
      /** Processes and threads a session may run at once (RLIMIT_NPROC, counted in its own user namespace). */
      GATEWAY_SANDBOX_PROCESSES: positiveInt.min(4).default(32),
      /**
       * Where each local sandbox session's cgroup goes, bounding its memory and processes as a whole: a
       * cgroup path (the same in v1's memory and pids hierarchies), `off`, or unset to use a directory
       * in the gateway's own cgroup where it may make one.
       */
      GATEWAY_SANDBOX_CGROUP: z
        .string()
        .regex(/^(off|\/[^\0]*)$/, { error: 'is `off` or a cgroup path from /' })
        .optional(),
      /** The size of a session's /mnt/data and of its /tmp, each a tmpfs, in MiB; also the largest file written. */
      GATEWAY_SANDBOX_DISK_MB: positiveInt.default(256),
      /** The output one call may print; past it the session is killed. Its first 64 KiB are kept as the call's logs. */
      GATEWAY_SANDBOX_OUTPUT_BYTES: positiveInt.default(4 * 1024 * 1024),
      /** The largest file put in or given back, and the most a call's images and files may hold together. */
      GATEWAY_SANDBOX_FILE_BYTES: positiveInt.default(32 * 1024 * 1024),
    })
    .superRefine((config, ctx) => {
      if (config.GATEWAY_SANDBOX_URL !== undefined && config.GATEWAY_SANDBOX_SECRET === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['GATEWAY_SANDBOX_SECRET'],
          message: 'is required with GATEWAY_SANDBOX_URL (the secret `gateway sandbox` was started with)',
        });
      }
      // Node's HTTP server refuses a headers timeout longer than the request's, which includes them.
      if (config.GATEWAY_HEADERS_TIMEOUT_MS > config.GATEWAY_REQUEST_TIMEOUT_MS) {
        ctx.addIssue({
          code: 'custom',
          path: ['GATEWAY_HEADERS_TIMEOUT_MS'],
          message: `must not exceed GATEWAY_REQUEST_TIMEOUT_MS (${config.GATEWAY_REQUEST_TIMEOUT_MS})`,
        });
      }
    });

export type Config = z.infer<ReturnType<typeof configSchema>>;

/**
 * A configuration the gateway cannot start with: its message names the variables and what is wrong,
 * never their values, and is safe to show (the Worker answers it with 503; node.ts prints it).
 */
export class ConfigurationError extends Error {
  override name = 'ConfigurationError';
}

/** Parses an environment record; throws one readable line naming every bad variable. */
export function parseConfig(env: Record<string, unknown>): Config {
  // Empty strings mean "unset", as they do in shells and in .dev.vars.
  const schema = configSchema();
  const present = Object.fromEntries(
    Object.entries(env).filter(([key, value]) => key in schema.shape && value !== '' && value !== undefined),
  );
  const result = schema.safeParse(present);
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
  throw new ConfigurationError(`Invalid configuration: ${problems.join('; ')}.`);
}

/**
 * The box of `key` (GATEWAY_ENCRYPTION_KEY or the key file's text) and GATEWAY_ENCRYPTION_KEY_PREVIOUS,
 * if set (Node and Workers), with an error that names the variable at fault (`keySource` for the key).
 */
export async function secretBoxFromEnv(
  key: string,
  config: Pick<Config, 'GATEWAY_ENCRYPTION_KEY_PREVIOUS'>,
  keySource = 'GATEWAY_ENCRYPTION_KEY',
): Promise<SecretBox> {
  const previous = config.GATEWAY_ENCRYPTION_KEY_PREVIOUS || undefined;
  const problem = previous === undefined ? null : keyTextProblem(previous);
  if (problem !== null) throw new ConfigurationError(`Invalid GATEWAY_ENCRYPTION_KEY_PREVIOUS: ${problem}`);
  return SecretBox.fromBase64(key, previous).catch((error: Error) => {
    throw new ConfigurationError(`Invalid ${keySource}: ${error.message}`);
  });
}

/** The shares of the provider calls of a process (Deps.upstreamShares), by workspace, as configured. */
export function upstreamShares(
  config: Pick<
    Config,
    | 'GATEWAY_UPSTREAM_CALLS'
    | 'GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE'
    | 'GATEWAY_UPSTREAM_BYTES'
    | 'GATEWAY_UPSTREAM_BYTES_PER_WORKSPACE'
  >,
): FairShares {
  return new FairShares({
    calls: config.GATEWAY_UPSTREAM_CALLS,
    callsPerKey: config.GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE,
    bytes: config.GATEWAY_UPSTREAM_BYTES,
    bytesPerKey: config.GATEWAY_UPSTREAM_BYTES_PER_WORKSPACE,
  });
}

/** What kept a provider call from starting within `timeoutMs` (a ShareTimeout of upstreamShares), naming its setting. */
export function shareTimeoutMessage(error: ShareTimeout, timeoutMs: number): string {
  return `No call to the provider could start within ${timeoutMs} ms: ${SHARE_LIMITS[error.limit](error.value)}.`;
}

const SHARE_LIMITS: Record<keyof ShareLimits, (value: number) => string> = {
  callsPerKey: (n) =>
    `this workspace's ${n} provider calls at once (GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE) were all in flight`,
  calls: (n) => `the gateway's ${n} provider calls at once (GATEWAY_UPSTREAM_CALLS) were all in flight`,
  bytesPerKey: (n) =>
    `this workspace's requests waiting to be sent held its ${n} bytes (GATEWAY_UPSTREAM_BYTES_PER_WORKSPACE)`,
  bytes: (n) => `the requests waiting to be sent held the gateway's ${n} bytes (GATEWAY_UPSTREAM_BYTES)`,
};
