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
    const text = await c.req.text();
    const mediaType = (c.req.header('content-type') ?? '').split(';')[0]!.trim();
    const isJson = JSON_MEDIA_TYPE.test(mediaType);
    if (text.length === 0) {
      if (isJson) c.req.bodyCache.json = Promise.resolve(undefined);
      return next();
    }
    if (!isJson) throw new ApiError('unsupported_media_type');
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
