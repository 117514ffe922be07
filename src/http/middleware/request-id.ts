import { createMiddleware } from 'hono/factory';
import { newId } from '../../lib/ids';

export type RequestIdVariables = { requestId: string };

/**
 * Gives every request an id, sent back as `x-gateway-request-id` on every response (errors too)
 * and as `x-request-id`, which the OpenAI SDK exposes as `error.requestID`. Logs carry the same id.
 */
export const requestId = () =>
  createMiddleware<{ Variables: RequestIdVariables }>(async (c, next) => {
    const id = newId('req');
    c.set('requestId', id);
    await next();
    c.res.headers.set('x-gateway-request-id', id);
    c.res.headers.set('x-request-id', id);
  });
