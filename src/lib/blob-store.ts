/**
 * Where uploaded files' bytes live: one small interface over a directory under DATA_DIR on Node
 * (runtime/node/blob-store.ts) and an R2 bucket on Workers (runtime/workers/blob-store.ts). Keys are the gateway's
 * own (never a client's filename). Bytes are streamed in and out, never held whole in memory.
 */
export interface BlobStore {
  /**
   * Streams `body` to `key` and resolves with its size once the bytes are durable. Past
   * `maxBytes` it stops reading and rejects with BlobTooLarge; before writing each chunk it lets
   * `admit` pass its size (a throw or rejection stops the put: resources/files/reservation.ts). When the
   * stream errors (a cut upload), is too large or is not admitted, nothing is left at `key` or
   * anywhere else.
   */
  put(key: string, body: ReadableStream<Uint8Array>, options: PutOptions): Promise<{ bytes: number }>;
  /** The bytes at `key`, streamed; null when there are none. */
  get(key: string): Promise<ReadableStream<Uint8Array> | null>;
  /**
   * Removes `key`'s bytes, and what a put to `key` left partly written (a crash cut it short);
   * nothing happens when there are none. Never called while a put to `key` is under way: the
   * gateway deletes a file's bytes once its row is gone, or once its upload's reservation lapsed.
   */
  delete(key: string): Promise<void>;
}

/**
 * A put would leave less free space than the store must keep (the Node store's floor,
 * GATEWAY_MIN_FREE_DISK_BYTES): nothing was stored, and nothing is left of what was written.
 */
export class StoreFull extends Error {
  constructor(readonly minFreeBytes: number) {
    super(`less than ${minFreeBytes} bytes of free space would be left`);
    this.name = 'StoreFull';
  }
}

/**
 * A blob as a sweep finds it in a store that can list what it holds (resources/files/sweep.ts): whole, or
 * partial (a put under way, or one a crash cut short) with the key it is written to; a stray is a
 * partial one whose key is unknown (left by an earlier version of the gateway).
 */
export type StoredBlob = {
  /** Deletes this blob, and only it: a partial one's removal leaves the key's whole blob alone. */
  remove(): Promise<void>;
} & ({ kind: 'whole' | 'partial'; key: string } | { kind: 'stray'; modifiedAt: number });

export interface PutOptions {
  maxBytes: number;
  /** Called with each chunk's size before it is written, one chunk at a time; awaited when it answers a promise. */
  admit?: (bytes: number) => Promise<void> | undefined;
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
export function capped(
  body: ReadableStream<Uint8Array>,
  maxBytes: number,
): { stream: ReadableStream<Uint8Array>; bytes: () => number } {
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
