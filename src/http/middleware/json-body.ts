import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../errors';
import { concatBytes } from '../../lib/bytes';
import { inspectJson, type JsonProblem } from '../../lib/strict-json';
import type { Deps } from '../../deps';
import { readsOwnBody } from './own-body';
import { formatPath } from './validate';

const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;
const BODYLESS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Every request body is read here, bounded, and is JSON. A body over `maxBytes` is 413: at once
 * when its Content-Length says so, else when the count passes it (a chunked body, or one longer
 * than it said), reading no further. The bytes come from Deps.requestBody: on Node, the HTTP
 * server's message itself.
 *
 * Every request body is JSON: a non-empty body of another media type is 415, malformed JSON is 400
 * `invalid_json`. The text is left in Hono's body cache, where `c.req.json()` (the validators')
 * reads it: Hono parses the cached text, and a cached parsed value would cost it a Response object
 * and a round through JSON.stringify per request, as Hono's `json()` asks its cache for the text.
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
export const jsonBody = (options: { maxBytes: number; requestBody: Deps['requestBody'] }) => {
  if (!Number.isInteger(options.maxBytes) || options.maxBytes <= 0) {
    throw new Error(`jsonBody: maxBytes must be a positive integer, got ${options.maxBytes}`);
  }
  const tooLarge = () =>
    new ApiError('payload_too_large', `The request body is larger than ${options.maxBytes} bytes.`);
  const readBytes = (c: Context) => readBounded(options.requestBody(c.req.raw), options.maxBytes, tooLarge);
  return createMiddleware(async (c, next) => {
    if (BODYLESS.has(c.req.method) || readsOwnBody(c)) return next();
    const length = c.req.header('content-length');
    if (length !== undefined && Number(length) > options.maxBytes) throw tooLarge();
    const mediaType = (c.req.header('content-type') ?? '').split(';', 1)[0]?.trim() ?? '';
    const isJson = JSON_MEDIA_TYPE.test(mediaType);
    if (!isJson) {
      // A body of another type is refused from its headers when they announce one; only a body
      // that declares no length at all has to be looked at to know whether it is empty.
      if (c.req.header('transfer-encoding') !== undefined || (length !== undefined && length !== '0')) {
        throw new ApiError('unsupported_media_type');
      }
      if (length === undefined && (await readBytes(c)).byteLength > 0) {
        throw new ApiError('unsupported_media_type');
      }
      return next();
    }
    const text = decodeUtf8(await readBytes(c));
    if (text.length === 0) {
      cacheText(c, '{}');
      return next();
    }
    try {
      JSON.parse(text);
    } catch (error) {
      // V8's message may quote part of the body; only its position is repeated back.
      const position = error instanceof Error ? /position (\d+)/.exec(error.message)?.[1] : undefined;
      const where = position === undefined ? '' : ` (at position ${position})`;
      throw new ApiError('invalid_json', `The request body is not valid JSON${where}.`);
    }
    const problem = inspectJson(text, { maxDepth: MAX_BODY_DEPTH });
    if (problem) throw strictJsonError(problem);
    cacheText(c, text);
    return next();
  });
};

/**
 * Leaves the body's text where `c.req.json()` and `c.req.text()` read it. Hono's cache holds the
 * promises its reads made (hono/dist/request.js), though its type names the values they resolve
 * to: the entry is set as Hono sets it.
 */
function cacheText(c: Context, text: string): void {
  Object.assign(c.req.bodyCache, { text: Promise.resolve(text) });
}

/** The whole body, or `tooLarge()` once more than `maxBytes` arrived (the rest is left unread). */
async function readBounded(
  body: AsyncIterable<Uint8Array> | null,
  maxBytes: number,
  tooLarge: () => ApiError,
): Promise<Uint8Array> {
  if (body === null) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let size = 0;
  try {
    for await (const part of body) {
      size += part.length;
      if (size > maxBytes) throw tooLarge();
      parts.push(part);
    }
  } catch (error) {
    throw unreadBody(error);
  }
  return concatBytes(parts);
}

/**
 * What a failure to read the request body becomes: the client stopped sending it (closed the
 * connection mid-body), which is its doing, not a server error to log. Our own refusals pass.
 */
function unreadBody(error: unknown): unknown {
  if (error instanceof ApiError) return error;
  return new ApiError('invalid_json', 'The request body could not be read to its end.', { cause: error });
}

/**
 * `fatal`: a malformed sequence throws instead of becoming U+FFFD. `ignoreBOM: false` does not keep
 * a leading BOM in the text (the decoder consumes it).
 */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

function decodeUtf8(bytes: Uint8Array): string {
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
      return new ApiError(
        'invalid_value',
        `Invalid ${where}: strings cannot contain NUL characters or unpaired surrogates.`,
        {
          param,
        },
      );
  }
}
