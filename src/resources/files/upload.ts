import type { MultipartPart } from 'multitars';
import type { Libraries } from '../../deps';
import { ApiError } from '../../errors';
import { BlobTooLarge, capped, StoreFull, type BlobStore, type PutOptions } from '../../lib/blob-store';

/**
 * Reading a multipart/form-data upload (POST /v1/files) as the OpenAI SDKs send it: the `file` part
 * first, then the fields, chunked, without a Content-Length. The file part streams straight into
 * the blob store as it arrives (never whole in memory), so the fields that follow it can only be
 * judged once it is stored: the caller checks them, then keeps the blob or deletes it.
 *
 * Bounds, whatever the client sends: the file (`maxFileBytes`, 413), the number of parts, each
 * field's bytes, the filename's and the part's content type's length. multitars itself bounds a
 * part's headers (32 kB) and the preamble before the first boundary (16 kB).
 */

/** At most this many parts (file, purpose and expires_after's two leave room for a few extra). */
export const MAX_PARTS = 16;
/** Each field's value, in bytes: purpose and expires_after need a few dozen. */
export const MAX_FIELD_BYTES = 1024;
/** A filename is kept as sent, up to this many characters. */
export const MAX_FILENAME_CHARS = 512;

export interface Upload {
  /** The text fields, by name, as sent (each at most MAX_FIELD_BYTES of UTF-8). */
  fields: Record<string, string>;
  /** The file part, stored at the caller's key; absent when the body had none. */
  file?: { filename: string; contentType: string | null; bytes: number };
}

const MULTIPART = /^multipart\/form-data$/i;
const BOUNDARY = /;\s*boundary=(?:"([^"]{1,70})"|([^\s;"]{1,70}))/i;
/** A media type as RFC 9110 writes one (type/subtype, parameters), bounded: stored as a hint only. */
const MEDIA_TYPE = /^[\w!#$&^.+-]{1,127}\/[\w!#$&^.+-]{1,127}(\s*;[\x20-\x7e]*)?$/;
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/** A UTF-16 surrogate without its pair: no character, and no header could carry it. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/**
 * Refuses what cannot be an upload before anything is read or reserved: a content type other than
 * multipart/form-data (415), one without a boundary, a request without a body. Answers both, known.
 */
export function checkUploadRequest(
  body: ReadableStream<Uint8Array> | null,
  contentType: string | undefined,
): { body: ReadableStream<Uint8Array>; contentType: string } {
  const mediaType = (contentType ?? '').split(';', 1)[0]?.trim() ?? '';
  if (!MULTIPART.test(mediaType)) {
    throw new ApiError(
      'unsupported_media_type',
      "The request body must be multipart/form-data, with the file in a part named 'file' and its purpose in a part named 'purpose'.",
    );
  }
  if (!contentType || !BOUNDARY.test(contentType)) {
    throw new ApiError('invalid_multipart', 'The multipart/form-data content type has no boundary parameter.');
  }
  if (!body) throw new ApiError('invalid_multipart', 'The request has no body.');
  return { body, contentType };
}

/**
 * Reads `body` (checked by checkUploadRequest), storing the part named `file` at `blobKey` in
 * `blobs`, each chunk let through by `admit` before it is written (resources/files/reservation.ts).
 * On any failure (a refusal, a malformed or cut body, a store error) the error is thrown: an
 * ApiError for what the client did, or for a full store. The file may have been stored by then
 * (a part after it failed): the caller deletes what is at `blobKey`.
 */
export async function readUpload(
  body: ReadableStream<Uint8Array>,
  contentType: string,
  store: { blobs: BlobStore; blobKey: string; maxFileBytes: number; admit: PutOptions['admit'] },
  /** The multipart parser's library, loaded on the first upload (Deps.libraries). */
  multipart: Libraries['multipart'],
  /** Judges the fields sent before the file, before it is stored (throws to refuse the upload). */
  beforeFile: (fields: Readonly<Record<string, string>>) => void = () => undefined,
): Promise<Upload> {
  const upload: Upload = { fields: Object.create(null) };
  try {
    let parts = 0;
    const { parseMultipart } = await multipart();
    for await (const part of parseMultipart(fromClient(body), { contentType })) {
      if (++parts > MAX_PARTS) {
        throw new ApiError('invalid_multipart', `The request body has more than ${MAX_PARTS} parts.`);
      }
      const { name, filename } = disposition(part.headers['content-disposition'] ?? '');
      if (name === 'file') {
        if (upload.file)
          throw new ApiError('invalid_multipart', "The request body has more than one part named 'file'.", {
            param: 'file',
          });
        if (filename === undefined) {
          throw new ApiError('invalid_value', "'file' must be a file (a part with a filename), not a text field.", {
            param: 'file',
          });
        }
        checkFilename(filename);
        beforeFile(upload.fields);
        const { bytes } = await store.blobs.put(store.blobKey, part.stream(), {
          maxBytes: store.maxFileBytes,
          admit: store.admit,
        });
        upload.file = { filename, contentType: mediaTypeOf(part), bytes };
      } else {
        if (name === undefined || name === '')
          throw new ApiError('invalid_multipart', 'A part of the request body has no name.');
        if (Object.hasOwn(upload.fields, name)) {
          throw new ApiError('invalid_multipart', `The request body has more than one part named '${shorten(name)}'.`, {
            param: shorten(name),
          });
        }
        upload.fields[name] = await fieldText(part, name);
      }
    }
    return upload;
  } catch (error) {
    throw uploadError(error, store.maxFileBytes);
  }
}

/** A failure to read the request body itself: the client stopped sending it (or broke its framing). */
class UnreadBody extends Error {
  constructor(cause: unknown) {
    super('the request body could not be read', { cause });
  }
}

/** `body`, each failure to read it an UnreadBody, so that it is told apart from the store's. */
function fromClient(body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const read = await reader.read().catch((error: unknown) => Promise.reject(new UnreadBody(error)));
        if (read.done) controller.close();
        else controller.enqueue(read.value);
      },
      cancel: (reason) => reader.cancel(reason),
    },
    { highWaterMark: 0 },
  );
}

/**
 * What a failure while reading becomes: the client's doing is a 4xx (413 for too large, 400 for a
 * body that is cut, or is not multipart as multitars reads it); a store short of free space a 507;
 * the store's other failures pass as they are (a 500: the disk or the bucket failed, not the client).
 */
function uploadError(error: unknown, maxFileBytes: number): unknown {
  if (error instanceof ApiError) return error;
  if (error instanceof BlobTooLarge) {
    return new ApiError(
      'payload_too_large',
      `The file is larger than ${maxFileBytes} bytes (GATEWAY_MAX_FILE_BYTES).`,
      { param: 'file' },
    );
  }
  if (error instanceof StoreFull) return new ApiError('insufficient_storage', undefined, { cause: error });
  if (error instanceof UnreadBody) {
    return new ApiError(
      'invalid_multipart',
      'The request body ended before the multipart/form-data did (the upload was cut).',
      { cause: error },
    );
  }
  // multitars's own messages describe the format ("Invalid Multipart Part: Unexpected EOF").
  if (error instanceof Error && error.message.startsWith('Invalid Multipart')) {
    return new ApiError('invalid_multipart', `The request body is not valid multipart/form-data (${error.message}).`, {
      cause: error,
    });
  }
  return error;
}

async function fieldText(part: MultipartPart, name: string): Promise<string> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    const reader = capped(part.stream(), MAX_FIELD_BYTES).stream.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      total += value.byteLength;
    }
  } catch (error) {
    if (error instanceof BlobTooLarge) {
      throw new ApiError('invalid_value', `The field '${shorten(name)}' is longer than ${MAX_FIELD_BYTES} bytes.`, {
        param: shorten(name),
      });
    }
    throw error;
  }
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  try {
    return utf8.decode(bytes);
  } catch {
    throw new ApiError('invalid_value', `The field '${shorten(name)}' is not valid UTF-8.`, { param: shorten(name) });
  }
}

function checkFilename(filename: string): void {
  if (filename.length === 0) throw new ApiError('invalid_value', "The file's filename is empty.", { param: 'file' });
  if (filename.length > MAX_FILENAME_CHARS) {
    throw new ApiError('invalid_value', `The file's filename is longer than ${MAX_FILENAME_CHARS} characters.`, {
      param: 'file',
    });
  }
  if (CONTROL.test(filename) || LONE_SURROGATE.test(filename)) {
    throw new ApiError('invalid_value', "The file's filename contains control characters or unpaired surrogates.", {
      param: 'file',
    });
  }
}

/** The part's Content-Type when it is a well-formed media type; anything else is not kept. */
function mediaTypeOf(part: MultipartPart): string | null {
  const type = part.headers['content-type']?.trim();
  return type && MEDIA_TYPE.test(type) ? type : null;
}

/**
 * `name` and `filename` of a Content-Disposition `form-data` header, quoted strings read whole (a
 * `;` inside a quoted filename is part of it) with RFC 7578's escapes (`\"`, `%22`); `filename*`
 * (RFC 5987, UTF-8 percent-encoded) wins over `filename`, as RFC 6266 says.
 */
export function disposition(header: string): { name?: string; filename?: string } {
  const params: Record<string, string> = {};
  const pattern = /;\s*([\w*.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))/g;
  for (const match of header.matchAll(pattern)) {
    // The pattern's name group always takes part, and one of its two value groups does.
    const key = (match[1] ?? '').toLowerCase();
    if (key in params) continue;
    params[key] =
      match[2] !== undefined ? match[2].replace(/\\(.)/g, '$1').replace(/%22/g, '"') : (match[3] ?? '').trim();
  }
  let filename = params.filename;
  const extended = params['filename*'] && /^utf-8''(.*)$/i.exec(params['filename*']);
  if (extended) {
    try {
      filename = decodeURIComponent(extended[1] ?? '');
    } catch {
      // A malformed filename* leaves the plain filename.
    }
  }
  return { name: params.name, filename };
}

const shorten = (name: string) => (name.length <= 64 ? name : `${name.slice(0, 64)}…`);
