import { bodyLimit as honoBodyLimit } from 'hono/body-limit';
import { ApiError } from '../errors';

/**
 * Refuses bodies over `maxBytes` with 413. Hono's middleware counts a chunked body as it streams,
 * so a body without Content-Length cannot slip past the limit either.
 */
export function bodyLimit(options: { maxBytes: number }) {
  if (!Number.isInteger(options.maxBytes) || options.maxBytes <= 0) {
    throw new Error(`bodyLimit: maxBytes must be a positive integer, got ${options.maxBytes}`);
  }
  return honoBodyLimit({
    maxSize: options.maxBytes,
    onError: () => {
      throw new ApiError('payload_too_large', `The request body is larger than ${options.maxBytes} bytes.`);
    },
  });
}
