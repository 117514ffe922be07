import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { ApiError } from '../errors';
import { inspectJson, type JsonProblem } from '../lib/strict-json';
import { readsOwnBody } from './own-body';
import { unreadBody } from './body-limit';
import { formatPath } from './validate';

const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;
const BODYLESS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Every request body is JSON: a non-empty body of another media type is 415, malformed JSON is 400
 * `invalid_json`. The parsed value is left in Hono's body cache, so validators do not parse twice.
 * An empty body is no body (the OpenAI SDK sends none on `cancel`, OpenAI's examples send
 * `-d ''` to create an empty thread): validators see `{}`, as for a request without a JSON
 * content type, and routes that need fields report the missing ones. JSON that parses but is ambiguous or could not be stored as sent
 * (lib/strict-json.ts) is 400 too, naming where.
 *
 * The bytes must be UTF-8 (RFC 8259 requires it of JSON between systems): invalid sequences are
 * 400 `invalid_json`, never replaced with U+FFFD, which would store a value the client did not
 * send. A leading byte order mark is skipped, as RFC 8259 lets parsers do: some Windows tools
 * write one, and it carries no data.
 *
 * A route whose body is not JSON (a multipart upload) opts out with `ownBody()` (own-body.ts): its
 * body is then left for the route to read, and bound.
 */
export const jsonBody = () =>
  createMiddleware(async (c, next) => {
    if (BODYLESS.has(c.req.method) || readsOwnBody(c)) return next();
    const mediaType = (c.req.header('content-type') ?? '').split(';')[0]!.trim();
    const isJson = JSON_MEDIA_TYPE.test(mediaType);
    if (!isJson) {
      // A body of another type is refused from its headers when they announce one; only a body
      // that declares no length at all has to be looked at to know whether it is empty.
      const length = c.req.header('content-length');
      if (c.req.header('transfer-encoding') !== undefined || (length !== undefined && length !== '0')) {
        throw new ApiError('unsupported_media_type');
      }
      if (length === undefined && c.req.raw.body && (await readBytes(c)).byteLength > 0) {
        throw new ApiError('unsupported_media_type');
      }
      return next();
    }
    const text = decodeUtf8(await readBytes(c));
    if (text.length === 0) {
      // HonoRequest.json() parses the text of the first body it has cached: the bytes read above
      // give it '' (not JSON), so they make way for the empty object.
      delete c.req.bodyCache.arrayBuffer;
      c.req.bodyCache.json = Promise.resolve({});
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
    const problem = inspectJson(text, { maxDepth: MAX_BODY_DEPTH });
    if (problem) throw strictJsonError(problem);
    c.req.bodyCache.json = Promise.resolve(parsed);
    return next();
  });

const readBytes = (c: Context) => c.req.arrayBuffer().catch((error: unknown) => Promise.reject(unreadBody(error)));

/**
 * `fatal`: a malformed sequence throws instead of becoming U+FFFD. `ignoreBOM: false` does not keep
 * a leading BOM in the text (the decoder consumes it).
 */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

function decodeUtf8(bytes: ArrayBuffer): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new ApiError('invalid_json', 'The request body is not valid UTF-8.');
  }
}

/**
 * Deep enough for every schema here (a JSON Schema of 32 levels inside a tool inside a body is
 * about 36), shallow enough that nothing after the parser could recurse into trouble.
 */
export const MAX_BODY_DEPTH = 64;

function strictJsonError(problem: JsonProblem): ApiError {
  const param = formatPath(problem.path, 'json');
  const where = param === null ? 'the request body' : `'${param}'`;
  switch (problem.kind) {
    case 'too_deep':
      return new ApiError('invalid_json', `The request body nests deeper than ${MAX_BODY_DEPTH} levels.`, { param });
    case 'duplicate_key':
      return new ApiError('invalid_json', `The request body has the key ${where} more than once.`, { param });
    case 'proto_key':
      return new ApiError('invalid_json', `The key '__proto__' is not allowed (at ${where}).`, { param });
    case 'bad_key':
      return new ApiError('invalid_json', `A key in ${where} has a NUL character or an unpaired surrogate.`, { param });
    case 'bad_string':
      return new ApiError('invalid_value', `Invalid ${where}: strings cannot contain NUL characters or unpaired surrogates.`, {
        param,
      });
  }
}
