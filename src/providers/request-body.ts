import { Base64Pieces, base64Length, concatBytes } from '../lib/bytes';
import type { Slices } from '../lib/slices';
import type { ChatCompletionRequest, ChatContentPart, ChatMessage, StreamedImage, StreamedImagePart } from './types';

/**
 * A Chat Completions request as the bytes sent: its JSON, encoded once (what the HTTP client
 * would otherwise encode from the string). A request with streamed images (types.ts) is a stream
 * instead: the JSON around each image, held, and in between each image's bytes as they are read,
 * base64-encoded into its data: URL, so that no request holds an image (a 20 MiB image is 27 MiB
 * of base64, and a provider may take minutes to read it).
 */
export interface RequestBody {
  /** Its size as sent; an image counted at its size in base64, with its media type's longest name. */
  bytes: number;
  /** What it holds in memory until it is sent: its JSON, images left out. */
  heldBytes: number;
  /** The body to send, once. */
  body: Uint8Array | ReadableStream<Uint8Array>;
}

const encoder = new TextEncoder();

/** The longest media type an image's data: URL may name (resources/files/images.ts sniffs four). */
const MEDIA_TYPE_CHARS = 'image/jpeg'.length;

/** `request` as its body; `slices` share the event loop while images are read into it (Deps.slices). */
export function encodeRequest(request: ChatCompletionRequest, slices: Slices): RequestBody {
  if (!request.messages.some((message) => partsWithImages(message) !== null)) {
    const body = encoder.encode(JSON.stringify(request));
    return { bytes: body.byteLength, heldBytes: body.byteLength, body };
  }
  // The messages last, each one as JSON but a user message with streamed images, written part by part.
  const segments: Segment[] = [];
  let json = `${JSON.stringify({ ...request, messages: undefined }).slice(0, -1)},"messages":[`;
  let bytes = 0;
  let heldBytes = 0;
  const hold = () => {
    const held = encoder.encode(json);
    segments.push(held);
    heldBytes += held.byteLength;
    json = '';
  };
  for (const [i, message] of request.messages.entries()) {
    if (i > 0) json += ',';
    const parts = partsWithImages(message);
    if (parts === null) {
      json += JSON.stringify(message);
      continue;
    }
    json += '{"role":"user","content":[';
    for (const [j, part] of parts.entries()) {
      if (j > 0) json += ',';
      if (!isStreamedImage(part)) {
        json += JSON.stringify(part);
        continue;
      }
      hold();
      segments.push(part.image_url);
      bytes +=
        imagePrefix(part.image_url.detail, '').length +
        MEDIA_TYPE_CHARS +
        base64Length(part.image_url.url.bytes) +
        IMAGE_SUFFIX.length;
    }
    json += ']}';
  }
  json += ']}';
  hold();
  return { bytes: bytes + heldBytes, heldBytes, body: bodyStream(segments, slices) };
}

/** A user message's parts when a streamed image is among them; null for every other message. */
function partsWithImages(message: ChatMessage): (ChatContentPart | StreamedImagePart)[] | null {
  if (message.role !== 'user' || typeof message.content === 'string') return null;
  return message.content.some(isStreamedImage) ? message.content : null;
}

function isStreamedImage(part: ChatContentPart | StreamedImagePart): part is StreamedImagePart {
  return part.type === 'image_url' && typeof part.image_url.url !== 'string';
}

/** What a body is made of: JSON's bytes, held, and images, read when the body is read that far. */
type Segment = Uint8Array | StreamedImagePart['image_url'];

const imagePrefix = (detail: string | undefined, mediaType: string) =>
  `{"type":"image_url","image_url":{${detail === undefined ? '' : `"detail":${JSON.stringify(detail)},`}"url":"data:${mediaType};base64,`;
const IMAGE_SUFFIX = '"}}';

/**
 * The segments in order, an image's bytes read only when the body is read that far: a provider
 * that reads slowly holds back the reading of the image, and one that stops (or a call that ends)
 * cancels it.
 */
function bodyStream(segments: Segment[], slices: Slices): ReadableStream<Uint8Array> {
  const chunks = (async function* () {
    for (const segment of segments) {
      if (segment instanceof Uint8Array) yield segment;
      else yield* imagePart(segment.url, segment.detail, slices);
    }
  })();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      },
      async cancel() {
        await chunks.return(undefined);
      },
    },
    { highWaterMark: 0 },
  );
}

/**
 * An image's part: its data: URL's bytes base64-encoded as they are read, a slice of the event
 * loop at a time: a provider that reads fast, or a connection's buffers filling at its start
 * (megabytes on loopback), has the image read and encoded as fast as the disk goes.
 */
async function* imagePart(
  image: StreamedImage,
  detail: string | undefined,
  slices: Slices,
): AsyncGenerator<Uint8Array> {
  const opened = await image.open();
  if ('text' in opened) {
    yield encoder.encode(JSON.stringify({ type: 'text', text: opened.text }));
    return;
  }
  yield encoder.encode(imagePrefix(detail, opened.mediaType));
  const base64 = new Base64Pieces();
  for await (const piece of opened.chunks) {
    while (slices.spent()) await slices.next();
    const encoded = base64.push(piece);
    if (encoded.byteLength > 0) yield encoded;
  }
  yield concatBytes([base64.end(), encoder.encode(IMAGE_SUFFIX)]);
}
