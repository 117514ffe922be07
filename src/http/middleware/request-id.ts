import { createMiddleware } from 'hono/factory';
import { newId } from '../../lib/ids';

/**
 * `requestIdSource`: where the id came from, for the access log: the client's `X-Request-Id`
 * (`client`), the gateway's own because none was sent (`gateway`), or the gateway's own in place
 * of one that was not a valid id (`replaced`).
 */
export type RequestIdVariables = { requestId: string; requestIdSource: 'client' | 'gateway' | 'replaced' };

/** The longest `X-Request-Id` kept: a UUID is 36 characters, a W3C trace id 32; 128 leaves room for prefixes. */
export const MAX_REQUEST_ID_CHARS = 128;

/**
 * What an incoming id may be made of: letters, digits and `-_.:@/+=`, which cover UUIDs, ULIDs,
 * prefixed ids (`req_…`) and base64 without whitespace, and nothing a header, a log line or a
 * terminal could read as anything but text.
 */
const VALID_REQUEST_ID = new RegExp(`^[A-Za-z0-9._:@/+=-]{1,${MAX_REQUEST_ID_CHARS}}$`);

/**
 * Gives every request an id, sent back as `x-gateway-request-id` on every response (errors too)
 * and as `x-request-id`, which the OpenAI SDK exposes as `error.requestID`. Logs carry the same id.
 * A client's own `X-Request-Id` is kept when it is a valid id (VALID_REQUEST_ID), so that its logs
 * and the gateway's name the request alike; one that is not is replaced, not refused: an id is for
 * finding a request, and no request should fail for its label.
 */
export const requestId = () =>
  createMiddleware<{ Variables: RequestIdVariables }>(async (c, next) => {
    const sent = c.req.header('x-request-id');
    const kept = sent !== undefined && VALID_REQUEST_ID.test(sent);
    const id = kept ? sent : newId('req');
    c.set('requestId', id);
    c.set('requestIdSource', kept ? 'client' : sent === undefined ? 'gateway' : 'replaced');
    await next();
    c.res.headers.set('x-gateway-request-id', id);
    c.res.headers.set('x-request-id', id);
  });
