import { createMiddleware } from 'hono/factory';
import type { AppEnv } from '../deps';
import { newId } from '../lib/ids';

/**
 * Gives every request an id, sent back as `x-gateway-request-id` on every response (errors too)
 * and as `x-request-id`, which the OpenAI SDK exposes as `error.requestID`. Logs carry the same id.
 */
export const requestId = () =>
  createMiddleware<AppEnv>(async (c, next) => {
    const id = newId('req');
    c.set('requestId', id);
    await next();
    c.res.headers.set('x-gateway-request-id', id);
    c.res.headers.set('x-request-id', id);
  });
