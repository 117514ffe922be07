import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { matchedRoutes } from 'hono/route';
import type { DepsVariables } from './deps';

/** The methods named in `gateway_http_requests_total`; any other is `other` (a client chooses it). */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/**
 * Counts each answered request in `gateway_http_requests_total` (Deps.metrics) by its method, its
 * route's pattern (`/v1/threads/:thread_id/runs`, never the path, whose ids would make a series per
 * request) and its status, and times it in `gateway_http_request_duration_seconds` until its
 * response's headers. A request no route matched (a 404 or 405) is counted as `unmatched`.
 */
export const requestMetrics = () =>
  createMiddleware<{ Variables: DepsVariables }>(async (c, next) => {
    const { metrics } = c.get('deps');
    // Where metrics are not kept (Workers), no route is looked up on every request for nothing.
    if (!metrics.served) return next();
    const started = performance.now();
    await next();
    metrics.request(
      METHODS.has(c.req.method) ? c.req.method : 'other',
      routePattern(c),
      c.res.status,
      (performance.now() - started) / 1000,
    );
  });

/**
 * The pattern of the route that answered: the handler that ran last (`routeIndex`), or when that
 * was middleware (`use`, whose method is ALL: a missing key refused before the route), the first
 * route after it, the one the request was headed for. Not simply the last match: a request can
 * match several routes (`POST /v1/threads/runs` and `POST /v1/threads/:thread_id`), and only the
 * first that answers counts.
 */
function routePattern(c: Context): string {
  const routes = matchedRoutes(c);
  for (let index = c.req.routeIndex; index < routes.length; index++) {
    const route = routes[index];
    if (route && route.method !== 'ALL') return route.path;
  }
  return 'unmatched';
}
