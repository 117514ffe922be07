import type { Deps } from '../deps';
import { ApiError } from '../errors';
import type { ChatContentPart, ChatMessage } from '../providers/types';
import type { PromptMessage } from '../runs/prompt';
import type { ThreadMessageInput } from '../schemas/threads';
import { getFile, type FileRow } from '../services/files';
import { hostKind, parseHttpUrl, privateRefusal, type UpstreamUrlOptions } from '../lib/upstream-url';
import { upstreamRules } from '../services/upstream-rules';
import { BlobTooLarge, capped } from './blob-store';

/**
 * Images in messages. Uploaded ones (`image_file` content parts): checked when a message is
 * written, and sent to the provider as image content (a `data:` URL of the bytes, which every Chat
 * Completions server with vision takes) when a run's prompt is built. What a prompt carries is
 * bounded: each image at most MAX_IMAGE_BYTES, and the images of one prompt together at most
 * MAX_PROMPT_IMAGE_BYTES (a run holds them, base64, while its request is sent).
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
  messages: readonly ThreadMessageInput[],
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

/**
 * The prompt as the provider is sent it: each image_file part replaced by its image, as a data:
 * URL, the newest images first while the prompt's images fit MAX_PROMPT_IMAGE_BYTES. An image
 * that cannot be sent (its file deleted or expired since the message was written, past the
 * prompt's budget, or a URL that `rules`, the upstream rules in force, now refuse) becomes a text
 * part that says so, so that the model knows an image was there.
 */
export async function inlineImages(
  deps: ImageDeps,
  workspaceId: string,
  messages: readonly PromptMessage[],
  now: number,
  rules: UpstreamUrlOptions,
): Promise<ChatMessage[]> {
  let budget = MAX_PROMPT_IMAGE_BYTES;
  const out: ChatMessage[] = new Array(messages.length);
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!;
    if (message.role !== 'user') {
      out[i] = message;
      continue;
    }
    if (typeof message.content === 'string') {
      out[i] = { role: 'user', content: message.content };
      continue;
    }
    const parts: ChatContentPart[] = new Array(message.content.length);
    for (let p = message.content.length - 1; p >= 0; p--) {
      const part = message.content[p]!;
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
      const unavailable = (why: string): ChatContentPart => ({ type: 'text', text: `[image ${id} not included: ${why}]` });
      if (!file) {
        parts[p] = unavailable('the file was deleted');
      } else if (file.bytes > budget) {
        parts[p] = unavailable(`the images of this prompt exceed the gateway's ${MAX_PROMPT_IMAGE_BYTES} bytes`);
      } else {
        const url = await dataUrl(deps, file);
        if (url === null) {
          parts[p] = unavailable('the file was deleted');
        } else {
          budget -= file.bytes;
          parts[p] = { type: 'image_url', image_url: { url, ...(part.image_file.detail ? { detail: part.image_file.detail } : {}) } };
        }
      }
    }
    out[i] = { role: 'user', content: parts };
  }
  return out;
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
  if (!IMAGE_TYPES.includes(header[0]!)) return 'a data: URL must be an image/png, image/jpeg, image/gif or image/webp one.';
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

/**
 * The file's bytes as a data: URL, base64-encoded as they stream (three bytes at a time make four
 * characters, so each chunk is encoded up to a multiple of three and the rest carried over); null
 * when the bytes are gone or are not an image. Read up to MAX_IMAGE_BYTES, whatever the row says.
 */
async function dataUrl(deps: ImageDeps, file: FileRow): Promise<string | null> {
  const stream = await deps.blobs.get(file.blobKey);
  if (!stream) return null;
  const pieces: string[] = [];
  const head = new Uint8Array(SNIFF_BYTES);
  let headFilled = 0;
  let carry = new Uint8Array(0);
  try {
    const reader = capped(stream, MAX_IMAGE_BYTES).stream.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (headFilled < SNIFF_BYTES) {
        const take = value.subarray(0, SNIFF_BYTES - headFilled);
        head.set(take, headFilled);
        headFilled += take.byteLength;
      }
      const bytes: Uint8Array = carry.byteLength === 0 ? value : concat(carry, value);
      const whole = bytes.byteLength - (bytes.byteLength % 3);
      pieces.push(base64(bytes.subarray(0, whole)));
      carry = bytes.slice(whole);
    }
  } catch (error) {
    if (error instanceof BlobTooLarge) return null;
    throw error;
  }
  pieces.push(base64(carry));
  const type = sniffImageType(head.subarray(0, headFilled));
  return type ? `data:${type};base64,${pieces.join('')}` : null;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.byteLength + b.byteLength);
  out.set(a);
  out.set(b, a.byteLength);
  return out;
}

/** btoa over bytes, in slices small enough for String.fromCharCode's arguments. */
function base64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.byteLength; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}
