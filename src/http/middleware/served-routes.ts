import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { matchedRoutes } from 'hono/route';
import { ApiError, errorResponse } from '../../errors';

/**
 * Whether the app has a handler for this request's method and path: Hono matches every route of a
 * request (its middleware and its handler) before the first middleware runs, and middleware is
 * registered for every method (`ALL`), handlers for theirs. So a handler registered with `.all()`
 * would not count: routes name their methods (`.on(['POST', 'PATCH'], …)` for several).
 */
export function hasHandler(c: Context): boolean {
  return matchedRoutes(c).some((route) => route.method !== 'ALL');
}

/**
 * Answers a request under /v1 that no route serves before anything else looks at it: 404
 * `unsupported_endpoint`, naming the method and path, without authenticating it or reading its
 * body, whatever its content type (a multipart upload to /v1/files is not a 415). OpenAI answers
 * unknown paths the same way, before authentication, and which operations the gateway serves is
 * public (docs/supported-operations.md). The answer is returned, not thrown, so that the 405 of a
 * path served under other methods (app.ts's methodNotAllowed, which looks at 404s) still applies.
 */
export const servedRoutesOnly = () =>
  createMiddleware(async (c, next) => {
    if (hasHandler(c)) return next();
    return errorResponse(
      new ApiError(
        'unsupported_endpoint',
        `The gateway does not serve ${c.req.method} ${shorten(c.req.path)}. ` +
          (c.req.path.startsWith('/v1/v1/')
            ? 'The path repeats /v1: a base URL ends in /v1 (OPENAI_BASE_URL=http://<gateway>/v1), and the client adds the rest.'
            : 'See docs/supported-operations.md for the operations it serves.'),
      ),
    );
  });

/** A path is the client's own text: repeated, but not at any length. */
export function shorten(path: string): string {
  return path.length <= MAX_PATH_CHARS ? path : `${path.slice(0, MAX_PATH_CHARS)}…`;
}

const MAX_PATH_CHARS = 256;
