import type { Deps } from '../../deps';
import { ApiError } from '../../errors';
import { getFile, type FileRow } from './queries';
import { hostKind, parseHttpUrl, privateRefusal, type UpstreamUrlOptions } from '../../lib/upstream-url';
import { upstreamRules } from '../virtual-keys/upstream-rules';

/**
 * Images in messages, as a message is written: uploaded ones (`image_file` content parts) and
 * linked ones (`image_url` parts) are checked, and refused with a 400 naming the part, before
 * anything is written. A run sends them later (resources/runs/execution/prompt-images.ts), checked
 * again then.
 *
 * Linked ones go to the provider as they are, and a provider that fetches image URLs fetches them
 * from where it runs: a URL is an address a tenant makes it fetch, judged
 * as a virtual key's base_url is (lib/upstream-url.ts), by its text alone, since the gateway
 * fetches nothing (resolving a name would be a probe of its own). An `https:` or `http:` URL to a
 * public host, or to a private one the upstream rules allow, never a metadata or link-local
 * address; or a `data:` URL of a PNG, JPEG, GIF or WebP image, base64 (bounded by the part's
 * length). Checked when the message is written and again when a prompt is built, since the rules
 * may have changed since (a second workspace, say).
 */

export const MAX_IMAGE_BYTES = 20 * 1024 * 1024;

/** The purposes of files a message may show as an image (OpenAI's: `vision`, or `assistants`). */
const IMAGE_PURPOSES = new Set(['vision', 'assistants']);

export type ImageDeps = Pick<Deps, 'db' | 'blobs'>;

/** A message as a request gives it (a thread's, a run's additional ones), as far as its images go. */
type MessageInput = {
  content:
    | string
    | readonly (
        | { type: 'text' }
        | { type: 'image_url'; image_url: { url: string } }
        | { type: 'image_file'; image_file: { file_id: string } }
      )[];
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
  const check = imageChecker(deps, workspaceId);
  for (const [index, message] of messages.entries()) {
    if (typeof message.content === 'string') continue;
    for (const [partIndex, part] of message.content.entries()) {
      if (part.type === 'text') continue;
      const where = `${param(index)}content[${partIndex}].${part.type === 'image_url' ? 'image_url.url' : 'image_file.file_id'}`;
      await check(part.type === 'image_url' ? { url: part.image_url.url } : { fileId: part.image_file.file_id }, where);
    }
  }
}

/** One image to check: linked (`url`) or uploaded (`fileId`). */
export type ImageRef = { url: string; fileId?: never } | { fileId: string; url?: never };

/**
 * Checks images one by one, as checkImages does, each refused with a 400 naming `where` (a
 * conversation's items name theirs `items[0].content[1].image_url`); the upstream rules are read
 * once, at the first linked image.
 */
export function imageChecker(
  deps: ImageDeps & Pick<Deps, 'now' | 'config'>,
  workspaceId: string,
): (image: ImageRef, where: string) => Promise<void> {
  let rules: UpstreamUrlOptions | undefined;
  return async (image, where) => {
    const refuse = (why: string) => new ApiError('invalid_value', `Invalid '${where}': ${why}`, { param: where });
    if (image.url !== undefined) {
      rules ??= await upstreamRules(deps.db, deps.config, { now: deps.now() });
      const problem = imageUrlProblem(image.url, rules);
      if (problem) throw refuse(problem);
      return;
    }
    const id = image.fileId;
    const file = await getFile(deps.db, workspaceId, id, deps.now()).catch((error: unknown) => {
      if (error instanceof ApiError && error.code === 'file_not_found') throw refuse(`no file found with id '${id}'.`);
      throw error;
    });
    if (!IMAGE_PURPOSES.has(file.purpose))
      throw refuse(`the file's purpose is '${file.purpose}'; an image needs 'vision' or 'assistants'.`);
    if (file.bytes > MAX_IMAGE_BYTES) throw refuse(`the image is larger than ${MAX_IMAGE_BYTES} bytes.`);
    if ((await imageTypeOf(deps, file)) === null) throw refuse('the file is not a PNG, JPEG, GIF or WebP image.');
  };
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
  if (!IMAGE_TYPES.includes(header[0] ?? ''))
    return 'a data: URL must be an image/png, image/jpeg, image/gif or image/webp one.';
  if (header.at(-1) !== 'base64' || header.length < 2)
    return `a data: URL of an image must be base64: data:${header[0]};base64,….`;
  if (payload.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(payload)) return 'the data: URL is not valid base64.';
  const head = atob(payload.slice(0, 16));
  if (sniffImageType(Uint8Array.from(head, (character) => character.charCodeAt(0))) === null) {
    return 'the data: URL is not a PNG, JPEG, GIF or WebP image.';
  }
  return null;
}

/** The bytes sniffImageType looks at (WebP's signature ends at the twelfth). */
export const SNIFF_BYTES = 12;

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
