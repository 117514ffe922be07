import type { Context, MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';

/**
 * Marks a route that reads its body itself, in a format of its own, and bounds it itself:
 * `.post('/', ownBody(), handler)`. jsonBody() leaves its body unread and uncounted (POST /v1/files
 * streams a file larger than GATEWAY_MAX_BODY_BYTES into the blob store, under
 * GATEWAY_MAX_FILE_BYTES). It does nothing when it runs; the middleware find it among the
 * request's matched routes, which Hono knows before the first middleware runs.
 */
export const ownBody = (): MiddlewareHandler => OWN_BODY;

const OWN_BODY: MiddlewareHandler = (_c, next) => next();

/** Whether the request's route is marked with ownBody(). */
export const readsOwnBody = (c: Context): boolean => matchedRoutes(c).some((route) => route.handler === OWN_BODY);
