import { createLogger } from './logger';
import { inlineChunker } from './retrieval/chunker';
import { claimNext, ingestClaimed, ingestOptions, type IngestOptions } from './retrieval/ingest';
import { embeddingKey } from './resources/virtual-keys/embedding-key';
import { createSharedDeps, perIsolate, type SharedEnv } from './runtime/workers/deps';
import { wakeForWaitingFiles, type IngestWake } from './runtime/workers/ingest-queue';
import { isolateMetrics, unhandedMetrics, type MetricsAggregate } from './runtime/workers/metrics';

/**
 * The ingest Worker (wrangler.ingest.toml): where files added to vector stores on Workers are
 * ingested (retrieval/ingest.ts), apart from the gateway Worker, whose bundle the extraction and
 * tokenizer libraries would outgrow. The gateway sends a message on the ingestion Queue when files
 * are added (runtime/workers/ingest-queue.ts); each batch of messages makes this Worker claim and ingest
 * files, one at a time, until none is left or its time is spent (then it sends itself a message to
 * go on). The cron sends one when files wait unclaimed: a lost message, an invocation that died
 * mid-file (its lease ran out), a file put back by the workspace's rate limits.
 *
 * Same database, bucket and key as the gateway (createSharedDeps). Documents are read and chunked
 * inline (retrieval/chunker.ts): this Worker answers no API request, so a long document delays only
 * other ingestions, within the platform's CPU and memory limits and the extraction's own bounds.
 */

export type IngestEnv = SharedEnv & {
  /** The queue this Worker consumes, also to send itself a message when it runs out of time. */
  INGEST_QUEUE: Queue<IngestWake>;
  /**
   * The gateway Worker's metrics aggregate (its class, reached by script_name), which this Worker's
   * isolates hand what they record to, as the gateway's do: the embedding tokens and calls and the
   * database's round trips. The previews' one ingest Worker has none (wrangler.ingest.toml).
   */
  METRICS?: DurableObjectNamespace<MetricsAggregate>;
};

/**
 * No file is claimed after this long in one invocation. A queue consumer may run 15 minutes of wall
 * time: the rest is for the file in hand (its lease, 5 minutes, is renewed between embedding calls).
 */
const BUDGET_MS = 5 * 60_000;

const ingestDeps = perIsolate((env: IngestEnv) =>
  createSharedDeps(env, (config, log) =>
    env.METRICS ? isolateMetrics(env.METRICS, { intervalMs: config.GATEWAY_METRICS_HANDOFF_MS, log }) : unhandedMetrics,
  ),
);
type IngestWorkerDeps = Awaited<ReturnType<typeof ingestDeps>>;

export default {
  async queue(batch: MessageBatch<IngestWake>, env: IngestEnv, ctx: ExecutionContext): Promise<void> {
    let deps: IngestWorkerDeps;
    try {
      deps = await ingestDeps(env);
    } catch (error) {
      startupFailed(error);
      batch.retryAll({ delaySeconds: 60 });
      return;
    }
    try {
      const options = ingestOptions(deps.config, inlineChunker, embeddingKey);
      const more = await ingestFiles(deps, options, BUDGET_MS, (promise) => ctx.waitUntil(promise));
      if (more) await env.INGEST_QUEUE.send({ reason: 'more' });
      batch.ackAll();
    } catch (error) {
      // The database or the bucket failed: the files are still in progress, claimable again.
      deps.log.error('ingestion failed', { error });
      batch.retryAll({ delaySeconds: 30 });
    }
  },

  /** Every minute (wrangler.ingest.toml [triggers]): a message when files wait unclaimed. */
  async scheduled(_controller: ScheduledController, env: IngestEnv, ctx: ExecutionContext): Promise<void> {
    let deps: IngestWorkerDeps;
    try {
      deps = await ingestDeps(env);
    } catch (error) {
      startupFailed(error);
      return;
    }
    try {
      await wakeForWaitingFiles(deps, env.INGEST_QUEUE);
    } catch (error) {
      deps.log.error('ingestion sweep failed', { error });
    } finally {
      deps.metrics.handOffSoon((promise) => ctx.waitUntil(promise));
    }
  },
};

/**
 * Claims and ingests files one after the other, each file's figures handed to the metrics'
 * aggregate after it. False once none is left to claim; true when the budget ran out first (files
 * may be left).
 */
async function ingestFiles(
  deps: IngestWorkerDeps,
  options: IngestOptions,
  budgetMs: number,
  waitUntil: (promise: Promise<unknown>) => void,
): Promise<boolean> {
  const end = deps.now() + budgetMs;
  while (deps.now() < end) {
    const claim = await claimNext(deps);
    if (claim === null) return false;
    try {
      await ingestClaimed(deps, claim, options);
    } finally {
      deps.metrics.handOffSoon(waitUntil);
    }
  }
  return true;
}

function startupFailed(error: unknown) {
  createLogger('error').error('ingest worker start-up failed', { error });
}
