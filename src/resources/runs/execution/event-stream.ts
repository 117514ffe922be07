import type { EventSink, ServerSentEvent } from '../../../deps';
import type { ErrorBody } from '../../../errors';
import { UNSLICED, type Slices } from '../../../lib/slices';
import { TextParts } from '../../../lib/text';
import { silenceTimeout } from '../../../lib/time';

/**
 * The server-sent event stream of a run, as OpenAI writes it: `event: <name>\ndata: <json>\n\n`,
 * ending with `event: done\ndata: [DONE]\n\n`. Web Streams end to end: the engine writes events as
 * they happen, the writer honours the client's backpressure, and nothing is held beyond a small
 * queue. When the client goes away the stream detaches: writes become no-ops and the run carries on.
 * A client that stays connected but makes no room for `stallMs` is let go the same way, so that it
 * cannot hold its run in progress (and past its expiry) for as long as it keeps the connection.
 */

const encoder = new TextEncoder();

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  // Tells nginx and similar proxies not to buffer the stream.
  'x-accel-buffering': 'no',
} as const;

/** What a send answers when it has nothing to wait for. */
const SENT: Promise<void> = Promise.resolve();

/** Events queued towards a slow client before the engine waits for it. */
const QUEUE_EVENTS = 64;
/** The most bytes one chunk of events written in parts holds. */
const PARTS_CHUNK_BYTES = 64 * 1024;

export class EventStream implements EventSink {
  readonly readable: ReadableStream<Uint8Array>;
  // A readable stream fed directly, not the readable side of a TransformStream: a run's stream is
  // made per request, and a writable side and a transform in between cost more than its events.
  #controller!: ReadableStreamDefaultController<Uint8Array>;
  readonly #stallMs: number;
  readonly #slices: Slices;
  /** Called when the client makes room in a full queue (or leaves), while the engine waits for it. */
  #roomMade: (() => void) | null = null;
  #detached = false;
  #closed = false;
  readonly #done: boolean;

  /**
   * `slices`: the event loop's (Deps.slices), which a long event's chunks are copied and written within.
   * `done`: whether the stream ends with `event: done` (a run's does; a response's ends with its last event).
   */
  constructor(options: { stallMs: number; slices?: Slices; done?: boolean }) {
    this.#stallMs = options.stallMs;
    this.#done = options.done ?? true;
    this.#slices = options.slices ?? UNSLICED;
    this.readable = new ReadableStream<Uint8Array>(
      {
        start: (controller) => {
          this.#controller = controller;
        },
        pull: () => this.#madeRoom(),
        // The client cancelled (disconnected): from then on, events are dropped.
        cancel: () => {
          this.#detached = true;
          this.#madeRoom();
        },
      },
      new CountQueuingStrategy({ highWaterMark: QUEUE_EVENTS }),
    );
  }

  /** Whether the client is gone. */
  get detached(): boolean {
    return this.#detached;
  }

  /** Not async: a delta's send, the usual one, is written at once and answers a promise settled already. */
  send(events: ServerSentEvent[]): Promise<void> {
    if (this.#detached || this.#closed || events.length === 0) return SENT;
    if (events.some(([, data]) => data instanceof TextParts)) return this.#sendParts(events);
    let text = '';
    for (const [name, data] of events) {
      text += `event: ${name}\ndata: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
    }
    return this.#write(encoder.encode(text));
  }

  /**
   * Events of which some are in parts: written in chunks of up to PARTS_CHUNK_BYTES, each part
   * copied once into its chunk, so that a message of a 4 MiB answer never exists whole (as a
   * string, then as bytes) beside the answer. A chunk is copied when its turn comes, within the
   * event loop's slices: eight 4 MiB answers that end together are not copied and written all in
   * one turn of the event loop (that turn held every other request for 40 to 70 ms).
   */
  async #sendParts(events: ServerSentEvent[]): Promise<void> {
    const parts: Uint8Array[] = [];
    const add = (part: string | Uint8Array) => parts.push(typeof part === 'string' ? encoder.encode(part) : part);
    for (const [name, data] of events) {
      add(`event: ${name}\ndata: `);
      if (data instanceof TextParts) data.parts.forEach(add);
      else add(typeof data === 'string' ? data : JSON.stringify(data));
      add('\n\n');
    }
    for (const chunk of inChunks(parts, PARTS_CHUNK_BYTES)) {
      while (this.#slices.spent()) await this.#slices.next();
      await this.#write(chunk);
    }
  }

  /** An error after the headers were sent: the envelope the SDKs raise, then the end. */
  async fail(body: ErrorBody): Promise<void> {
    await this.send([['error', body]]);
  }

  /** `done` (unless told otherwise), then the end of the body. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    if (this.#done) await this.#write(encoder.encode('event: done\ndata: [DONE]\n\n'));
    this.#closed = true;
    if (this.#detached) return;
    try {
      this.#controller.close();
    } catch {
      this.#detached = true;
    }
  }

  /** Enqueues `bytes` at once when the queue has room (the usual case, on every event), else once the client makes some. */
  #write(bytes: Uint8Array): Promise<void> {
    if (this.#detached) return SENT;
    const room = this.#controller.desiredSize;
    if (room === null || room <= 0) return this.#writeWhenRoom(bytes);
    this.#enqueue(bytes);
    return SENT;
  }

  async #writeWhenRoom(bytes: Uint8Array): Promise<void> {
    if (!(await this.#roomWithin(this.#stallMs))) {
      if (this.#detached) return;
      this.#detached = true;
      // Errors the stream: the response ends, cut, as if the client had left.
      this.#controller.error(new Error('the client stopped reading the stream'));
      return;
    }
    this.#enqueue(bytes);
  }

  #enqueue(bytes: Uint8Array): void {
    try {
      this.#controller.enqueue(bytes);
    } catch {
      this.#detached = true;
    }
  }

  #madeRoom(): void {
    const roomMade = this.#roomMade;
    this.#roomMade = null;
    roomMade?.();
  }

  /** Whether the client made room in the queue within `ms` (false if it left). */
  async #roomWithin(ms: number): Promise<boolean> {
    let cancel: (() => void) | undefined;
    const made = await new Promise<boolean>((resolve) => {
      this.#roomMade = () => resolve(true);
      cancel = silenceTimeout(() => resolve(false), ms);
    });
    cancel?.();
    this.#roomMade = null;
    return made && !this.#detached;
  }
}

/**
 * `parts` copied into chunks of at most `size` bytes, each filled before the next begins, the last
 * only as long as what is left; each copied when asked for.
 */
function* inChunks(parts: Uint8Array[], size: number): Generator<Uint8Array> {
  let left = 0;
  for (const part of parts) left += part.byteLength;
  let chunk = new Uint8Array(0);
  let at = 0;
  for (let part of parts) {
    while (part.byteLength > 0) {
      if (at === chunk.byteLength) {
        if (chunk.byteLength > 0) yield chunk;
        chunk = new Uint8Array(Math.min(size, left));
        at = 0;
      }
      const taken = Math.min(part.byteLength, chunk.byteLength - at);
      chunk.set(part.subarray(0, taken), at);
      at += taken;
      left -= taken;
      part = part.subarray(taken);
    }
  }
  if (chunk.byteLength > 0) yield chunk;
}
