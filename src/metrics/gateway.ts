import {
  BoundedValues,
  DATABASE_SECONDS_BUCKETS,
  Registry,
  SECONDS_BUCKETS,
  type CollectedFamily,
  type LabelValues,
} from './registry';

/**
 * The gateway's metrics (docs/metrics.md says what each means): one `Metrics` per app, in
 * `Deps.metrics`, recorded where the gateway does what they count and written by GET /metrics.
 * On Node the figures are the process's; on Workers each isolate records its own and hands them to
 * one aggregate, which a scrape reads (runtime/workers/metrics.ts).
 */
export interface Metrics {
  /** Whether GET /metrics has anything to write here: false where nothing is kept (`unservedMetrics`). */
  readonly served: boolean;
  /**
   * A request was answered: its method, its route's pattern (never its path), its status, and the
   * seconds until the handler returned its response (a stream's headers, not its end).
   */
  request(method: string, route: string, status: number, seconds: number): void;
  /** Where the database reports its statements' and commits' durations (db/timings.ts). */
  readonly database: DatabaseTimings;
  /** A provider call (one attempt) begins now: its timer, told of the first byte and of the end. */
  providerCall(virtualKeyId: string): ProviderCallTimer;
  /** A run (or a response, `kind`) reached a final status. */
  runEnded(kind: string, status: string): void;
  /** Tokens a call or a run used, as GET /v1/usage counts them: `kind` is the usage kind. */
  tokens(kind: string, model: string, prompt: number, completion: number): void;
  /** A rate-limit policy admitted or refused a request. */
  rateLimit(policyId: string, decision: 'allowed' | 'refused'): void;
  /** Readings taken at each scrape before it is written (process memory, queue depths). */
  onScrape(read: (gauges: ScrapeGauges) => void | Promise<void>): void;
  /** The text exposition of every metric, or null where metrics are not kept. */
  render(): Promise<string | null>;
  /** Every metric as values, for an export (otlp.ts), or null where metrics are not kept; read as a scrape is. */
  collect(): Promise<CollectedFamily[] | null>;
}

/**
 * How long the database took (Node: db/embedded-client.ts, db/busy-retry.ts): a statement from
 * its issue to its answer; a commit, a write transaction's, from its issue to its durable end.
 */
export interface DatabaseTimings {
  statement(seconds: number): void;
  /**
   * `group`: the app's writes, committed together on the embedded file's writer thread (its fsync
   * included); `immediate`: the counters' writes, each committed at once on the event loop's thread;
   * `server`: a write sent to a libSQL server, its round trip.
   */
  commit(path: CommitPath, seconds: number): void;
}

export type CommitPath = 'group' | 'immediate' | 'server';

/** What a scrape's readings set. */
export interface ScrapeGauges {
  memory(usage: { rss: number; heapUsed: number; heapTotal: number }): void;
  /** Files added to vector stores and not yet ingested: `waiting` for a claim, or `ingesting`. */
  ingestionQueue(state: 'waiting' | 'ingesting', files: number): void;
}

/**
 * How a provider call ended: `ok` (its answer read to the end), `incomplete` (it began and was
 * not read to its end: the stream broke, the answer cap cut it, the client left), or why it did
 * not begin: `http_429`, `http_4xx`, `http_5xx`, `http_other` (by the provider's status),
 * `timeout`, `network`, `protocol`, `address` (the upstream rules refused it), `aborted`.
 */
export type ProviderCallOutcome =
  | 'ok'
  | 'incomplete'
  | 'http_429'
  | 'http_4xx'
  | 'http_5xx'
  | 'http_other'
  | 'timeout'
  | 'network'
  | 'protocol'
  | 'address'
  | 'aborted';

export interface ProviderCallTimer {
  /** The provider's answer began (its status and headers arrived). */
  firstByte(): void;
  /** The call ended; only the first end counts. */
  end(outcome: ProviderCallOutcome): void;
}

/** Models named in `gateway_tokens_total`, the first ones seen; the rest are `other`. */
export const MAX_MODELS = 100;
/** Virtual keys and policies named in their families, the first ones seen; the rest are `other`. */
export const MAX_KEYS = 1000;

/** Metrics whose figures can be taken out as a delta and merged in from elsewhere (Workers' isolates). */
export interface KeptMetrics extends Metrics {
  /** The counters and histograms recorded since the last take, which start afresh (Registry.take). */
  take(): CollectedFamily[];
  /** Adds figures taken elsewhere, bounded as recording is; answers the series changed (Registry.merge). */
  merge(families: readonly CollectedFamily[]): CollectedFamily[];
}

export interface GatewayMetricsOptions {
  /** `now` in milliseconds (performance.now). */
  now?: () => number;
  /** Whether the process's memory is a family (Node); a Workers isolate has no process of its own. */
  memory?: boolean;
}

/** What the gateway keeps, written by GET /metrics. */
export function gatewayMetrics({
  now = () => performance.now(),
  memory = true,
}: GatewayMetricsOptions = {}): KeptMetrics {
  const registry = new Registry();
  const keys = new BoundedValues(MAX_KEYS);
  const models = new BoundedValues(MAX_MODELS);
  const policies = new BoundedValues(MAX_KEYS);
  const requests = registry.counter('gateway_http_requests_total', {
    help: "Requests answered, by method, the route's pattern and the status.",
    labelNames: ['method', 'route', 'status'],
  });
  const requestSeconds = registry.histogram('gateway_http_request_duration_seconds', {
    help: "Seconds from a request's arrival to its response's headers, by method, the route's pattern and the status class.",
    labelNames: ['method', 'route', 'status_class'],
    buckets: SECONDS_BUCKETS,
  });
  const statementSeconds = registry.histogram('gateway_db_statement_duration_seconds', {
    help: "Seconds from a database statement's issue to its answer (on the embedded file, the event loop's statements; the writer thread's are in commits).",
    buckets: DATABASE_SECONDS_BUCKETS,
  });
  const commitSeconds = registry.histogram('gateway_db_commit_duration_seconds', {
    help: "Seconds from a write transaction's issue to its commit, by path (group, immediate, server).",
    labelNames: ['path'],
    buckets: DATABASE_SECONDS_BUCKETS,
  });
  const runs = registry.counter('gateway_runs_ended_total', {
    help: 'Runs (kind run) and responses (kind response) that reached a final status, by that status.',
    labelNames: ['kind', 'status'],
  });
  const calls = registry.counter('gateway_provider_calls_total', {
    help: 'Provider calls (each attempt), by virtual key id and outcome.',
    labelNames: ['virtual_key_id', 'outcome'],
    bounded: { virtual_key_id: keys },
  });
  const firstByte = registry.histogram('gateway_provider_first_byte_seconds', {
    help: "Seconds from a provider call's start to its answer's status and headers, by virtual key id.",
    labelNames: ['virtual_key_id'],
    buckets: SECONDS_BUCKETS,
    bounded: { virtual_key_id: keys },
  });
  const duration = registry.histogram('gateway_provider_call_duration_seconds', {
    help: "Seconds from a provider call's start to its end, by virtual key id and outcome.",
    labelNames: ['virtual_key_id', 'outcome'],
    buckets: SECONDS_BUCKETS,
    bounded: { virtual_key_id: keys },
  });
  const tokens = registry.counter('gateway_tokens_total', {
    help: `Tokens used, by usage kind, model (the first ${MAX_MODELS} seen; the rest are other) and type (prompt, completion).`,
    labelNames: ['kind', 'model', 'type'],
    bounded: { model: models },
  });
  const decisions = registry.counter('gateway_rate_limit_decisions_total', {
    help: 'Rate-limit decisions of each matching policy, by policy id and decision (allowed, refused).',
    labelNames: ['policy_id', 'decision'],
    bounded: { policy_id: policies },
  });
  const ingestion = registry.gauge('gateway_ingestion_queue_files', {
    help: 'Files added to vector stores and not yet ingested, by state (waiting, ingesting), at the scrape.',
    labelNames: ['state'],
  });
  const readings: ((gauges: ScrapeGauges) => void | Promise<void>)[] = [];
  const gauges: ScrapeGauges = {
    memory: memory ? memoryGauges(registry) : () => undefined,
    ingestionQueue: (state, files) => ingestion.set([state], files),
  };

  return {
    served: true,
    request(method, route, status, seconds) {
      requests.inc([method, route, String(status)]);
      requestSeconds.observe([method, route, STATUS_CLASSES[Math.floor(status / 100)] ?? 'other'], seconds);
    },
    database: {
      statement: (seconds) => statementSeconds.observe(NO_LABELS, seconds),
      commit: (path, seconds) => commitSeconds.observe(COMMIT_PATHS[path], seconds),
    },
    providerCall(virtualKeyId) {
      const key = keys.of(virtualKeyId);
      const started = now();
      let ended = false;
      return {
        firstByte: () => firstByte.observe([key], (now() - started) / 1000),
        end(outcome) {
          if (ended) return;
          ended = true;
          calls.inc([key, outcome]);
          duration.observe([key, outcome], (now() - started) / 1000);
        },
      };
    },
    runEnded: (kind, status) => runs.inc([kind, status]),
    tokens(kind, model, prompt, completion) {
      const named = models.of(model);
      if (prompt > 0) tokens.inc([kind, named, 'prompt'], prompt);
      if (completion > 0) tokens.inc([kind, named, 'completion'], completion);
    },
    rateLimit: (policyId, decision) => decisions.inc([policies.of(policyId), decision]),
    onScrape: (read) => void readings.push(read),
    async render() {
      for (const read of readings) await read(gauges);
      return registry.render();
    },
    async collect() {
      for (const read of readings) await read(gauges);
      return registry.collect();
    },
    take: () => registry.take(),
    merge: (families) => registry.merge(families),
  };
}

/** The process's memory families, declared in `registry`, and what sets them at a scrape. */
function memoryGauges(registry: Registry): ScrapeGauges['memory'] {
  const rss = registry.gauge('process_resident_memory_bytes', { help: "The process's resident set size in bytes." });
  const heapUsed = registry.gauge('nodejs_heap_size_used_bytes', { help: "V8's heap in use, in bytes." });
  const heapTotal = registry.gauge('nodejs_heap_size_total_bytes', { help: "V8's heap reserved, in bytes." });
  return (usage) => {
    rss.set(NO_LABELS, usage.rss);
    heapUsed.set(NO_LABELS, usage.heapUsed);
    heapTotal.set(NO_LABELS, usage.heapTotal);
  };
}

/** Where nothing is kept (the ingest Worker: docs/metrics.md): every record is a no-op, and there is nothing to scrape. */
export const unservedMetrics: Metrics = {
  served: false,
  request: () => undefined,
  database: { statement: () => undefined, commit: () => undefined },
  providerCall: () => IGNORED_CALL,
  runEnded: () => undefined,
  tokens: () => undefined,
  rateLimit: () => undefined,
  onScrape: () => undefined,
  render: () => Promise.resolve(null),
  collect: () => Promise.resolve(null),
};

const IGNORED_CALL: ProviderCallTimer = { firstByte: () => undefined, end: () => undefined };

const NO_LABELS: LabelValues = [];
/** Label values made once: recording allocates nothing per statement or request. */
const STATUS_CLASSES = ['0xx', '1xx', '2xx', '3xx', '4xx', '5xx'];
const COMMIT_PATHS: Record<CommitPath, LabelValues> = {
  group: ['group'],
  immediate: ['immediate'],
  server: ['server'],
};
