import type { Deps } from '../../deps';
import { ApiError } from '../../errors';
import { base64Length, concatBytes } from '../../lib/bytes';
import { UpstreamError, type ChatContentPart, type ChatMessage, type StreamedImage, type StreamedImagePart } from '../../providers/types';
import type { PromptMessage } from '../runs/execution/prompt';
import { getFile, type FileRow } from './queries';
import { hostKind, parseHttpUrl, privateRefusal, type UpstreamUrlOptions } from '../../lib/upstream-url';
import { upstreamRules } from '../virtual-keys/upstream-rules';

/**
 * Images in messages. Uploaded ones (`image_file` content parts): checked when a message is
 * written, and sent to the provider as image content (a `data:` URL of the bytes, which every Chat
 * Completions server with vision takes) when a run's request is sent, streamed from the blob
 * store into the request's body (providers/request-body.ts). What a prompt carries is bounded:
 * each image at most MAX_IMAGE_BYTES, and the images of one prompt together at most
 * MAX_PROMPT_IMAGE_BYTES and what the request's bound leaves for them.
 *
 * Linked ones (`image_url` parts) go to the provider as they are, and a provider that fetches
 * image URLs fetches them from where it runs: a URL is an address a tenant makes it fetch, judged
 * as a virtual key's base_url is (lib/upstream-url.ts), by its text alone, since the gateway
 * fetches nothing (resolving a name would be a probe of its own). An `https:` or `http:` URL to a
 * public host, or to a private one the upstream rules allow, never a metadata or link-local
 * address; or a `data:` URL of a PNG, JPEG, GIF or WebP image, base64 (bounded by the part's
 * length). Checked when the message is written and again when a prompt is built, since the rules
 * may have changed since (a second workspace, say).
 */

export const MAX_IMAGE_BYTES = 20 * 1024 * 1024;
export const MAX_PROMPT_IMAGE_BYTES = 20 * 1024 * 1024;

/** The purposes of files a message may show as an image (OpenAI's: `vision`, or `assistants`). */
const IMAGE_PURPOSES = new Set(['vision', 'assistants']);

type ImageDeps = Pick<Deps, 'db' | 'blobs'>;

/** A message as a request gives it (a thread's, a run's additional ones), as far as its images go. */
type MessageInput = {
  content: string | readonly ({ type: 'text' } | { type: 'image_url'; image_url: { url: string } } | { type: 'image_file'; image_file: { file_id: string } })[];
};

/**
 * Refuses a message whose images cannot be sent: 400 naming the part. An image_file part
 * (`messages[0].content[1].image_file.file_id`) for an unknown or another workspace's file, one
 * whose purpose is not vision or assistants, one over MAX_IMAGE_BYTES, or bytes that are not a
 * PNG, JPEG, GIF or WebP image (read from their first bytes); an image_url part
 * (`messages[0].content[1].image_url.url`) whose URL imageUrlProblem refuses. Nothing is written
 * before this.
 */
export async function checkImages(
  deps: ImageDeps & Pick<Deps, 'now' | 'config'>,
  workspaceId: string,
  messages: readonly MessageInput[],
  param: (index: number) => string,
): Promise<void> {
  let rules: UpstreamUrlOptions | undefined;
  for (const [index, message] of messages.entries()) {
    if (typeof message.content === 'string') continue;
    for (const [partIndex, part] of message.content.entries()) {
      if (part.type === 'text') continue;
      const where = `${param(index)}content[${partIndex}].${part.type === 'image_url' ? 'image_url.url' : 'image_file.file_id'}`;
      const refuse = (why: string) => new ApiError('invalid_value', `Invalid '${where}': ${why}`, { param: where });
      if (part.type === 'image_url') {
        rules ??= await upstreamRules(deps.db, deps.config, { now: deps.now() });
        const problem = imageUrlProblem(part.image_url.url, rules);
        if (problem) throw refuse(problem);
        continue;
      }
      const id = part.image_file.file_id;
      const file = await getFile(deps.db, workspaceId, id, deps.now()).catch((error: unknown) => {
        if (error instanceof ApiError && error.code === 'file_not_found') throw refuse(`no file found with id '${id}'.`);
        throw error;
      });
      if (!IMAGE_PURPOSES.has(file.purpose)) throw refuse(`the file's purpose is '${file.purpose}'; an image needs 'vision' or 'assistants'.`);
      if (file.bytes > MAX_IMAGE_BYTES) throw refuse(`the image is larger than ${MAX_IMAGE_BYTES} bytes.`);
      if ((await imageTypeOf(deps, file)) === null) throw refuse('the file is not a PNG, JPEG, GIF or WebP image.');
    }
  }
}

/** What an image part takes in a request besides its bytes' base64 (request-body.ts), at most. */
const IMAGE_PART_BYTES = 128;

/**
 * The prompt as the provider is sent it: each image_file part replaced by its image, streamed
 * from the blob store as the request is sent (StreamedImage), the newest images first while the
 * prompt's images fit MAX_PROMPT_IMAGE_BYTES and, as base64, the `roomBytes` its request has left
 * for them (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES). An image that cannot be sent (its file deleted or
 * expired since the message was written, past either budget, or a URL that `rules`, the upstream
 * rules in force, now refuse) becomes a text part that says so, so that the model knows an image
 * was there. Only the files' rows are read here.
 */
export async function inlineImages(
  deps: ImageDeps,
  workspaceId: string,
  messages: readonly PromptMessage[],
  { now, roomBytes, rules }: { now: number; roomBytes: number; rules: UpstreamUrlOptions },
): Promise<ChatMessage[]> {
  let budget = MAX_PROMPT_IMAGE_BYTES;
  let room = roomBytes;
  const out: ChatMessage[] = new Array(messages.length);
  for (const [i, message] of [...messages.entries()].reverse()) {
    if (message.role !== 'user') {
      out[i] = message;
      continue;
    }
    if (typeof message.content === 'string') {
      out[i] = { role: 'user', content: message.content };
      continue;
    }
    const parts: (ChatContentPart | StreamedImagePart)[] = new Array(message.content.length);
    for (const [p, part] of [...message.content.entries()].reverse()) {
      if (part.type === 'image_url') {
        const problem = imageUrlProblem(part.image_url.url, rules);
        // Not the problem's words: they name the gateway's settings, which are not the provider's to read.
        parts[p] = problem ? { type: 'text', text: '[image not included: its URL is not allowed]' } : part;
        continue;
      }
      if (part.type !== 'image_file') {
        parts[p] = part;
        continue;
      }
      const id = part.image_file.file_id;
      const file = await getFile(deps.db, workspaceId, id, now).catch((error: unknown) => {
        if (error instanceof ApiError && error.code === 'file_not_found') return null;
        throw error;
      });
      const unavailable = (why: string) => `[image ${id} not included: ${why}]`;
      const cost = file ? base64Length(file.bytes) + IMAGE_PART_BYTES : 0;
      if (!file) {
        parts[p] = { type: 'text', text: unavailable('the file was deleted') };
      } else if (file.bytes > budget) {
        parts[p] = { type: 'text', text: unavailable(`the images of this prompt exceed the gateway's ${MAX_PROMPT_IMAGE_BYTES} bytes`) };
      } else if (cost > room) {
        parts[p] = { type: 'text', text: unavailable('the request to the provider has no room left for it (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES)') };
      } else {
        budget -= file.bytes;
        room -= cost;
        const url = streamedImage(deps, file, unavailable);
        parts[p] = { type: 'image_url', image_url: { url, ...(part.image_file.detail ? { detail: part.image_file.detail } : {}) } };
      }
    }
    out[i] = { role: 'user', content: parts };
  }
  return out;
}

/**
 * The file's image, read when its request is sent: its media type from its first bytes, then its
 * bytes, no more than its row says (the request was sized by it). Opened only then, so a file
 * deleted meanwhile, or bytes that are not an image, become the text that says so.
 */
function streamedImage(deps: ImageDeps, file: FileRow, unavailable: (why: string) => string): StreamedImage {
  return {
    bytes: file.bytes,
    async open() {
      const stream = await deps.blobs.get(file.blobKey);
      if (!stream) return { text: unavailable('the file was deleted') };
      const chunks = bytesOf(file, stream.getReader());
      const head: Uint8Array[] = [];
      let headBytes = 0;
      while (headBytes < SNIFF_BYTES) {
        const next = await chunks.next();
        if (next.done) break;
        head.push(next.value);
        headBytes += next.value.byteLength;
      }
      const mediaType = sniffImageType(concatBytes(head).subarray(0, SNIFF_BYTES));
      if (mediaType === null) {
        await chunks.return();
        return { text: unavailable('the file is not an image') };
      }
      return { mediaType, chunks: withHead(head, chunks) };
    },
  };
}

/** The file's bytes from `reader`, failing past the row's size; the reader cancelled (the file closed) if left early. */
async function* bytesOf(file: FileRow, reader: ReadableStreamDefaultReader<Uint8Array>): AsyncGenerator<Uint8Array, void> {
  let read = 0;
  let ended = false;
  try {
    for (;;) {
      const next = await reader.read().catch(() => {
        throw unreadable(file, 'its bytes could not be read');
      });
      if (next.done) {
        ended = true;
        return;
      }
      read += next.value.byteLength;
      if (read > file.bytes) throw unreadable(file, `its bytes are more than the ${file.bytes} its file says`);
      yield next.value;
    }
  } finally {
    if (!ended) await reader.cancel().catch(() => undefined);
  }
}

/** `head`, then `rest`; `rest` let go of whenever this ends. */
async function* withHead(head: Uint8Array[], rest: AsyncGenerator<Uint8Array, void>): AsyncGenerator<Uint8Array> {
  try {
    yield* head;
    yield* rest;
  } finally {
    await rest.return();
  }
}

/** An image whose bytes could not be read while its request was sent. */
function unreadable(file: FileRow, why: string): UpstreamError {
  return new UpstreamError('network', `The image ${file.id} could not be sent to the provider: ${why}.`);
}

type ImageType = 'image/png' | 'image/jpeg' | 'image/gif' | 'image/webp';

const IMAGE_TYPES: readonly string[] = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'] satisfies ImageType[];

/**
 * Why an image_url part's URL may not go to a provider, in words for an API error (the file's
 * header says what is allowed); null when it may. By the URL's text only: nothing is fetched or
 * resolved. `rules` decide private hosts (loopback, private ranges, CGNAT, `localhost`).
 */
export function imageUrlProblem(url: string, rules: UpstreamUrlOptions): string | null {
  if (/^data:/i.test(url)) return dataUrlProblem(url);
  const parsed = parseHttpUrl(url);
  if (typeof parsed === 'string') return `${parsed.slice(0, -1)} (or a data: URL of an image).`;
  switch (hostKind(parsed)) {
    case 'metadata':
      return 'cloud metadata and link-local addresses are never allowed in image URLs.';
    case 'private': {
      const refused = privateRefusal(parsed, rules);
      return refused && `loopback, private, CGNAT and unspecified addresses are refused in image URLs ${refused}`;
    }
    case 'public':
      return null;
  }
}

/** `data:image/png;base64,…`: one of the four image types, base64, whose first bytes are such an image. */
function dataUrlProblem(url: string): string | null {
  const comma = url.indexOf(',');
  const header = (comma < 0 ? url : url.slice(0, comma)).slice('data:'.length).toLowerCase().split(';');
  const payload = comma < 0 ? '' : url.slice(comma + 1);
  if (!IMAGE_TYPES.includes(header[0] ?? '')) return 'a data: URL must be an image/png, image/jpeg, image/gif or image/webp one.';
  if (header.at(-1) !== 'base64' || header.length < 2) return `a data: URL of an image must be base64: data:${header[0]};base64,….`;
  if (payload.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(payload)) return 'the data: URL is not valid base64.';
  const head = atob(payload.slice(0, 16));
  if (sniffImageType(Uint8Array.from(head, (character) => character.charCodeAt(0))) === null) {
    return 'the data: URL is not a PNG, JPEG, GIF or WebP image.';
  }
  return null;
}

/** The bytes sniffImageType looks at (WebP's signature ends at the twelfth). */
const SNIFF_BYTES = 12;

/** The image type of `bytes` from its signature, or null for anything else. */
export function sniffImageType(bytes: Uint8Array): ImageType | null {
  const starts = (signature: number[], at = 0) => signature.every((byte, i) => bytes[at + i] === byte);
  if (starts([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png';
  if (starts([0xff, 0xd8, 0xff])) return 'image/jpeg';
  if (starts([0x47, 0x49, 0x46, 0x38])) return 'image/gif';
  if (starts([0x52, 0x49, 0x46, 0x46]) && starts([0x57, 0x45, 0x42, 0x50], 8)) return 'image/webp';
  return null;
}

/** The type of the file's image, from its first bytes; null when it is none (or its bytes are gone). */
async function imageTypeOf(deps: ImageDeps, file: FileRow): Promise<ImageType | null> {
  const stream = await deps.blobs.get(file.blobKey);
  if (!stream) return null;
  const reader = stream.getReader();
  const head = new Uint8Array(SNIFF_BYTES);
  let filled = 0;
  try {
    while (filled < head.byteLength) {
      const { done, value } = await reader.read();
      if (done) break;
      const take = Math.min(value.byteLength, head.byteLength - filled);
      head.set(value.subarray(0, take), filled);
      filled += take;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return sniffImageType(head.subarray(0, filled));
}
