/**
 * Where uploaded files' bytes live: one small interface over a directory under DATA_DIR on Node
 * (node/blob-store.ts) and an R2 bucket on Workers (workers/blob-store.ts). Keys are the gateway's
 * own (never a client's filename). Bytes are streamed in and out, never held whole in memory.
 */
export interface BlobStore {
  /**
   * Streams `body` to `key` and resolves with its size once the bytes are durable. Past
   * `maxBytes` it stops reading and rejects with BlobTooLarge; when the stream errors (a cut
   * upload) or is too large, nothing is left at `key` or anywhere else.
   */
  put(key: string, body: ReadableStream<Uint8Array>, options: { maxBytes: number }): Promise<{ bytes: number }>;
  /** The bytes at `key`, streamed; null when there are none. */
  get(key: string): Promise<ReadableStream<Uint8Array> | null>;
  /** Removes `key`; nothing happens when it is not there. */
  delete(key: string): Promise<void>;
}

export class BlobTooLarge extends Error {
  constructor(readonly maxBytes: number) {
    super(`more than ${maxBytes} bytes`);
    this.name = 'BlobTooLarge';
  }
}

/**
 * `body` passed through, failing with BlobTooLarge as soon as more than `maxBytes` went by: the
 * stores pipe through it, so a too-large upload is refused without being read to its end. `body`
 * itself is not cancelled then (its owner decides): cancelling a multipart part reads the request
 * on to the part's end, which for an oversized upload is what the cap is there to avoid.
 */
export function capped(body: ReadableStream<Uint8Array>, maxBytes: number): { stream: ReadableStream<Uint8Array>; bytes: () => number } {
  let bytes = 0;
  const stream = body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        bytes += chunk.byteLength;
        if (bytes > maxBytes) controller.error(new BlobTooLarge(maxBytes));
        else controller.enqueue(chunk);
      },
    }),
    { preventCancel: true },
  );
  return { stream, bytes: () => bytes };
}
