import type { ExecutionContext } from 'hono';
import { createApp, type App } from './app';
import { ConfigurationError, configSchema } from './config';
import { ApiError, errorResponse, serverError } from './errors';
import { createLogger } from './logger';
import { FILE_PURGE_INTERVAL_MS, purgeExpiredFiles } from './resources/files/commands';
import { sweepUploads } from './resources/files/sweep';
import { maintainVectorIndexes } from './retrieval/vector-index';
import { sweepRuns } from './resources/runs/execution/recovery';
import {
  missingConfiguration,
  missingConfigurationError,
  workerDeps,
  type Env,
  type WorkerDeps,
} from './runtime/workers/deps';

/**
 * The Workers entry: the same app as on Node over the isolate's deps (runtime/workers/deps.ts), the
 * recovery sweep on the cron trigger of wrangler.toml, and the Durable Object classes, which the
 * runtime finds among this module's exports.
 */

export { RateLimitCounter } from './runtime/workers/counter-store';
export { RunExecutor } from './runtime/workers/run-executor';
export { MetricsAggregate } from './runtime/workers/metrics';
export type { Env } from './runtime/workers/deps';

let built: Promise<{ app: App; metrics: WorkerDeps['metrics'] }> | undefined;
let reportedMissing = false;
/** The bindings last found complete: workerd hands every request of an isolate the same object, checked once. */
let complete: Env | undefined;

/** A cron invocation's share for index maintenance: well within a scheduled handler's limits. */
const INDEX_BUDGET_MS = 20_000;

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    if (env !== complete) {
      const missing = missingConfiguration(env);
      if (missing.length > 0) {
        const error = missingConfigurationError(missing);
        // Once per isolate in the log; every answer says it.
        if (!reportedMissing) startupFailed(env, error);
        reportedMissing = true;
        return misconfigured(request, error);
      }
      complete = env;
    }
    let app: App, metrics: WorkerDeps['metrics'];
    try {
      ({ app, metrics } = await (built ??= workerDeps(env).then((deps) => ({
        app: createApp(deps),
        metrics: deps.metrics,
      }))));
    } catch (error) {
      // A bad binding: say so in the log and answer with the envelope; the next request retries.
      built = undefined;
      startupFailed(env, error);
      return error instanceof ConfigurationError ? misconfigured(request, error) : errorResponse(serverError(error));
    }
    const response = await app.fetch(request, env, ctx);
    metrics.handOffSoon((promise) => ctx.waitUntil(promise));
    return response;
  },

  /**
   * Every minute (wrangler.toml [triggers]): settles runs left behind, as Node's sweep does, and
   * deletes from R2 what uploads whose isolate died, or failed deletes, left (resources/files/sweep.ts: named
   * by lapsed reservations; the bucket itself is never listed), then maintains the vector indexes
   * of large stores (retrieval/vector-index.ts) for up to INDEX_BUDGET_MS: one back-fill batch per
   * round trip to the database, each a short statement; and every FILE_PURGE_INTERVAL_MS, deletes
   * expired files.
   */
  async scheduled(controller: ScheduledController, env: Env, ctx: ExecutionContext): Promise<void> {
    let deps;
    try {
      deps = await workerDeps(env);
    } catch (error) {
      startupFailed(env, error);
      return;
    }
    try {
      await maintain(controller, deps);
    } finally {
      // What the sweep recorded (the runs it settled) goes to the metrics' aggregate as a request's does.
      deps.metrics.handOffSoon((promise) => ctx.waitUntil(promise));
    }
  },
};

/** The cron's work (`scheduled`), each part logged and not thrown when it fails. */
async function maintain(controller: ScheduledController, deps: WorkerDeps): Promise<void> {
  try {
    const settled = await sweepRuns(deps);
    if (settled > 0) deps.log.info('recovery sweep settled runs', { count: settled });
  } catch (error) {
    deps.log.error('recovery sweep failed', { error });
  }
  try {
    const swept = await sweepUploads(deps);
    if (swept > 0) deps.log.warn('deleted what uploads left behind', { count: swept });
  } catch (error) {
    deps.log.error('uploads sweep failed', { error });
  }
  try {
    await maintainVectorIndexes(deps, { budgetMs: INDEX_BUDGET_MS });
  } catch (error) {
    deps.log.error('vector index maintenance failed', { error });
  }
  if (Math.floor(controller.scheduledTime / 60_000) % (FILE_PURGE_INTERVAL_MS / 60_000) !== 0) return;
  try {
    const purged = await purgeExpiredFiles(deps);
    if (purged > 0) deps.log.info('deleted expired files', { count: purged });
  } catch (error) {
    deps.log.error('expired files sweep failed', { error });
  }
}

/**
 * A Worker that cannot serve for want of configuration says what is wrong on every path, 503:
 * `/health` as `{"status":"misconfigured","message"}` (for probes and people), the rest in the envelope.
 */
function misconfigured(request: Request, error: ConfigurationError): Response {
  if (new URL(request.url).pathname === '/health') {
    return Response.json({ status: 'misconfigured', message: error.message }, { status: 503 });
  }
  return errorResponse(new ApiError('gateway_misconfigured', error.message));
}

/** Logged at the configured LOG_LEVEL when it is a valid one (the failure may be that it is not). */
function startupFailed(env: Env, error: unknown) {
  const level = configSchema().shape.LOG_LEVEL.safeParse(env.LOG_LEVEL);
  createLogger(level.success ? level.data : 'error').error('worker start-up failed', { error });
}
