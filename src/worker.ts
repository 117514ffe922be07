import type { ExecutionContext } from 'hono';
import { createApp, type App } from './app';
import { errorResponse, serverError } from './errors';
import { createLogger } from './logger';
import { maintainVectorIndexes } from './retrieval/vector-index';
import { sweepRuns } from './runs/recovery';
import { workerDeps, type Env } from './workers/deps';

/**
 * The Workers entry: the same app as on Node over the isolate's deps (workers/deps.ts), the
 * recovery sweep on the cron trigger of wrangler.toml, and the Durable Object classes, which the
 * runtime finds among this module's exports.
 */

export { RateLimitCounter } from './workers/counter-store';
export { RunExecutor } from './workers/run-executor';
export type { Env } from './workers/deps';

let built: Promise<App> | undefined;

/** A cron invocation's share for index maintenance: well within a scheduled handler's limits. */
const INDEX_BUDGET_MS = 20_000;

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    let app: App;
    try {
      app = await (built ??= workerDeps(env).then(createApp));
    } catch (error) {
      // A bad binding: say so in the log and answer with the envelope; the next request retries.
      built = undefined;
      startupFailed(error);
      return errorResponse(serverError(error));
    }
    return app.fetch(request, env, ctx);
  },

  /**
   * Every minute (wrangler.toml [triggers]): settles runs left behind, as Node's sweep does, then
   * maintains the vector indexes of large stores (retrieval/vector-index.ts) for up to
   * INDEX_BUDGET_MS: one back-fill batch per round trip to the database, each a short statement.
   */
  async scheduled(_controller: ScheduledController, env: Env): Promise<void> {
    let deps;
    try {
      deps = await workerDeps(env);
    } catch (error) {
      startupFailed(error);
      return;
    }
    try {
      const settled = await sweepRuns(deps);
      if (settled > 0) deps.log.info('recovery sweep settled runs', { count: settled });
    } catch (error) {
      deps.log.error('recovery sweep failed', { error });
    }
    try {
      await maintainVectorIndexes(deps, { budgetMs: INDEX_BUDGET_MS });
    } catch (error) {
      deps.log.error('vector index maintenance failed', { error });
    }
  },
};

function startupFailed(error: unknown) {
  createLogger('error').error('worker start-up failed', { error });
}
