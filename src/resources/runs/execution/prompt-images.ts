import { ApiError } from '../../../errors';
import { base64Length, concatBytes } from '../../../lib/bytes';
import type { UpstreamUrlOptions } from '../../../lib/upstream-url';
import {
  UpstreamError,
  type ChatContentPart,
  type ChatMessage,
  type StreamedImage,
  type StreamedImagePart,
} from '../../../providers/types';
import { imageUrlProblem, sniffImageType, SNIFF_BYTES, type ImageDeps } from '../../files/images';
import { getFile, type FileRow } from '../../files/queries';
import type { PromptMessage } from '../../../providers/types';

/**
 * Images in a run's prompt. Uploaded ones (`image_file` content parts), checked when their message
 * was written (resources/files/images.ts), are sent to the provider as image content (a `data:`
 * URL of the bytes, which every Chat Completions server with vision takes) when a run's request is
 * sent, streamed from the blob store into the request's body (providers/request-body.ts). What a
 * prompt carries is bounded: each image at most MAX_IMAGE_BYTES (files/images.ts), and the images
 * of one prompt together at most MAX_PROMPT_IMAGE_BYTES and what the request's bound leaves for
 * them. Linked ones (`image_url` parts) are judged again by the upstream rules in force.
 */

export const MAX_PROMPT_IMAGE_BYTES = 20 * 1024 * 1024;

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
        parts[p] = {
          type: 'text',
          text: unavailable(`the images of this prompt exceed the gateway's ${MAX_PROMPT_IMAGE_BYTES} bytes`),
        };
      } else if (cost > room) {
        parts[p] = {
          type: 'text',
          text: unavailable('the request to the provider has no room left for it (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES)'),
        };
      } else {
        budget -= file.bytes;
        room -= cost;
        const url = streamedImage(deps, file, unavailable);
        parts[p] = {
          type: 'image_url',
          image_url: { url, ...(part.image_file.detail ? { detail: part.image_file.detail } : {}) },
        };
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
async function* bytesOf(
  file: FileRow,
  reader: ReadableStreamDefaultReader<Uint8Array>,
): AsyncGenerator<Uint8Array, void> {
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
