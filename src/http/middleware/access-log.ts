import { createMiddleware } from 'hono/factory';
import type { DepsVariables } from './deps';
import type { RequestIdVariables } from './request-id';

/**
 * One `info` line per request: its id and where the id came from (the client's X-Request-Id, or
 * the gateway's: request-id.ts), method, path (never the query), status, duration.
 */
export const accessLog = () =>
  createMiddleware<{ Variables: DepsVariables & RequestIdVariables }>(async (c, next) => {
    const { log, now } = c.get('deps');
    if (!log.enabled('info')) return next();
    const started = now();
    await next();
    log.info('request', {
      request_id: c.get('requestId'),
      request_id_source: c.get('requestIdSource'),
      method: c.req.method,
      path: c.req.path,
      status: c.res.status,
      duration_ms: now() - started,
    });
  });
