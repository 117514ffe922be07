import { createClient } from '@libsql/client/web';
import { drizzle } from 'drizzle-orm/libsql/web';
import type { ExecutionContext } from 'hono';
import { createApp, type App } from './app';
import { parseConfig } from './config';
import * as schema from './db/schema';
import type { Deps } from './deps';
import { errorResponse, serverError } from './errors';
import { secretBoxFromEnv } from './lib/secrets';
import { createLogger } from './logger';
import { dispatchInProcess } from './runs/dispatch';
import { LibsqlCounterStore, PolicyCache } from './ratelimit';

/**
 * The Workers entry: bindings -> config -> deps, built once per isolate, then the same app as on
 * Node. Data lives in libSQL (Turso) at LIBSQL_URL; migrations are applied from Node with
 * `npm run db:migrate` (README: "Cloudflare Workers").
 */

/** The bindings: [vars] in wrangler.toml, secrets from `wrangler secret put` (or .dev.vars). */
export interface Env {
  LIBSQL_URL?: string;
  LIBSQL_AUTH_TOKEN?: string;
  LOG_LEVEL?: string;
  GATEWAY_MAX_BODY_BYTES?: string;
  /** A secret: the AES-256-GCM key of provider secrets, 32 bytes in base64. */
  GATEWAY_ENCRYPTION_KEY?: string;
}

let built: Promise<App> | undefined;

async function build(env: Env): Promise<App> {
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
  const deps: Deps = {
    db,
    config,
    log,
    secrets,
    // Until the Durable Object store: the same libSQL counters as on Node, exact across isolates.
    counters: new LibsqlCounterStore(client, { log }),
    policyCache: new PolicyCache(db),
    now: Date.now,
    background: (c, task) => c.executionCtx.waitUntil(task),
    // Until the run-executing Durable Object: waitUntil's short tail (see issue 5).
    dispatchRun: dispatchInProcess,
    fetch: (input, init) => fetch(input, init),
  };
  return createApp(deps);
}

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    let app: App;
    try {
      app = await (built ??= build(env));
    } catch (error) {
      // A bad binding: say so in the log and answer with the envelope; the next request retries.
      built = undefined;
      createLogger('error').error('worker start-up failed', { error });
      return errorResponse(serverError(error));
    }
    return app.fetch(request, env, ctx);
  },
};
