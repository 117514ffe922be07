import { createMiddleware } from 'hono/factory';
import type { AppEnv } from '../deps';
import { ApiError } from '../errors';

const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;
const BODYLESS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Every request body is JSON: a non-empty body of another media type is 415, malformed JSON is 400
 * `invalid_json`. The parsed value is left in Hono's body cache, so validators do not parse twice.
 * An empty body is no body (the OpenAI SDK sends none on `cancel`); routes that need one then
 * report the missing fields.
 */
export const jsonBody = () =>
  createMiddleware<AppEnv>(async (c, next) => {
    if (BODYLESS.has(c.req.method)) return next();
    const mediaType = (c.req.header('content-type') ?? '').split(';')[0]!.trim();
    const isJson = JSON_MEDIA_TYPE.test(mediaType);
    if (!isJson) {
      // A body of another type is refused from its headers when they announce one; only a body
      // that declares no length at all has to be looked at to know whether it is empty.
      const length = c.req.header('content-length');
      if (c.req.header('transfer-encoding') !== undefined || (length !== undefined && length !== '0')) {
        throw new ApiError('unsupported_media_type');
      }
      if (length === undefined && c.req.raw.body && (await c.req.text()).length > 0) {
        throw new ApiError('unsupported_media_type');
      }
      return next();
    }
    const text = await c.req.text();
    if (text.length === 0) {
      c.req.bodyCache.json = Promise.resolve(undefined);
      return next();
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      // V8's message may quote part of the body; only its position is repeated back.
      const position = error instanceof Error ? /position (\d+)/.exec(error.message)?.[1] : undefined;
      const where = position === undefined ? '' : ` (at position ${position})`;
      throw new ApiError('invalid_json', `The request body is not valid JSON${where}.`);
    }
    c.req.bodyCache.json = Promise.resolve(parsed);
    return next();
  });
