import { createClient } from '@libsql/client/web';
import { drizzle } from 'drizzle-orm/libsql/web';
import type { ExecutionContext } from 'hono';
import { createApp, type App } from './app';
import { parseConfig } from './config';
import * as schema from './db/schema';
import type { Deps } from './deps';
import { createLogger } from './logger';

/**
 * The Workers entry: bindings -> deps, built once per isolate, then the same app as on Node.
 * Data lives in libSQL (Turso) at LIBSQL_URL; migrations are applied with `npm run db:migrate`.
 */

let app: App | undefined;

function build(env: Record<string, unknown>): App {
  const config = parseConfig(env);
  if (!config.LIBSQL_URL) throw new Error('LIBSQL_URL is required on Workers (a Turso or libSQL server URL)');
  const client = createClient({ url: config.LIBSQL_URL, authToken: config.LIBSQL_AUTH_TOKEN });
  const deps: Deps = {
    db: drizzle(client, { schema }),
    config,
    log: createLogger(config.LOG_LEVEL),
    now: Date.now,
    background: (c, task) => c.executionCtx.waitUntil(task),
  };
  return createApp(deps);
}

export default {
  fetch(request: Request, env: Record<string, unknown>, ctx: ExecutionContext) {
    app ??= build(env);
    return app.fetch(request, env, ctx);
  },
};
