import type { Context, Next } from 'hono';
import { bodyLimit as honoBodyLimit } from 'hono/body-limit';
import { ApiError } from '../errors';
import { readsOwnBody } from './own-body';

/**
 * Refuses bodies over `maxBytes` with 413. Hono's middleware counts a chunked body as it streams,
 * so a body without Content-Length cannot slip past the limit either. A route marked ownBody()
 * bounds its body itself and is not counted here.
 */
export function bodyLimit(options: { maxBytes: number }) {
  if (!Number.isInteger(options.maxBytes) || options.maxBytes <= 0) {
    throw new Error(`bodyLimit: maxBytes must be a positive integer, got ${options.maxBytes}`);
  }
  const limit = honoBodyLimit({
    maxSize: options.maxBytes,
    onError: () => {
      throw new ApiError('payload_too_large', `The request body is larger than ${options.maxBytes} bytes.`);
    },
  });
  return async (c: Context, next: Next) => {
    if (readsOwnBody(c)) return next();
    // Hono reads a chunked body here, before the routes: a failure before `next` is the reading's.
    let reached = false;
    try {
      return await limit(c, () => ((reached = true), next()));
    } catch (error) {
      throw reached ? error : unreadBody(error);
    }
  };
}

/**
 * What a failure to read the request body becomes: the client stopped sending it (closed the
 * connection mid-body), which is its doing, not a server error to log. Our own refusals pass.
 */
export function unreadBody(error: unknown): unknown {
  if (error instanceof ApiError) return error;
  return new ApiError('invalid_json', 'The request body could not be read to its end.', { cause: error });
}
