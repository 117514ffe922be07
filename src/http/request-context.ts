import type { Context, ExecutionContext } from 'hono';
import type { RequestContext } from '../actor';
import type { RequestIdVariables } from './middleware/request-id';

/**
 * The request as use-cases see it: the runtime's waitUntil (both entries hand Hono an
 * ExecutionContext) and the request's id. Takes the parts of a handler's Context it reads: a
 * Context is typed by its route's whole environment, which differs from route to route.
 */
export function requestContext(c: {
  get: Context<{ Variables: RequestIdVariables }>['get'];
  executionCtx: ExecutionContext;
}): RequestContext {
  return { waitUntil: (task) => c.executionCtx.waitUntil(task), requestId: c.get('requestId') };
}
