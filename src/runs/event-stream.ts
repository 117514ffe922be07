import type { ErrorBody } from '../errors';

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

/** One event: its name and its data, an object to serialise or an already-serialised JSON string. */
export type ServerSentEvent = [name: string, data: unknown];

/** Receives a run's events. The engine emits through this; a non-streamed run has none. */
export interface EventSink {
  /**
   * Sends events together, as one chunk on the wire: every write costs a syscall here and a read on
   * the client, so events that happen together (a message opening with its first delta, an
   * ending) travel together.
   */
  send(events: ServerSentEvent[]): Promise<void>;
}

/** Events queued towards a slow client before the engine waits for it. */
const QUEUE_EVENTS = 64;

export class EventStream implements EventSink {
  readonly readable: ReadableStream<Uint8Array>;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #stallMs: number;
  #detached = false;
  #closed = false;

  constructor(options: { stallMs: number }) {
    this.#stallMs = options.stallMs;
    const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>(
      undefined,
      undefined,
      new CountQueuingStrategy({ highWaterMark: QUEUE_EVENTS }),
    );
    this.readable = readable;
    this.#writer = writable.getWriter();
    // The client cancelled (disconnected): the writable side errors; from then on, events are dropped.
    this.#writer.closed.catch(() => {
      this.#detached = true;
    });
  }

  /** Whether the client is gone. */
  get detached(): boolean {
    return this.#detached;
  }

  async send(events: ServerSentEvent[]): Promise<void> {
    if (this.#detached || this.#closed || events.length === 0) return;
    let text = '';
    for (const [name, data] of events) {
      text += `event: ${name}\ndata: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
    }
    await this.#write(text);
  }

  /** An error after the headers were sent: the envelope the SDKs raise, then the end. */
  async fail(body: ErrorBody): Promise<void> {
    await this.send([['error', body]]);
  }

  /** `done`, then the end of the body. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    await this.#write('event: done\ndata: [DONE]\n\n');
    this.#closed = true;
    if (!this.#detached) await this.#writer.close().catch(() => undefined);
  }

  async #write(text: string): Promise<void> {
    if (this.#detached) return;
    try {
      if (!(await this.#roomWithin(this.#stallMs))) {
        this.#detached = true;
        // Errors the readable side: the response ends, cut, as if the client had left.
        void this.#writer.abort(new Error('the client stopped reading the stream')).catch(() => undefined);
        return;
      }
      // Not awaited: `ready` already paced us; a failed write means the client left.
      this.#writer.write(encoder.encode(text)).catch(() => {
        this.#detached = true;
      });
    } catch {
      this.#detached = true;
    }
  }

  /** Whether the client made room in the queue within `ms` (rejects if it left). */
  async #roomWithin(ms: number): Promise<boolean> {
    // The usual case, on every event: room already, so no clock to start and stop.
    const room = this.#writer.desiredSize;
    if (room !== null && room > 0) return true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stalled = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
    try {
      return await Promise.race([this.#writer.ready.then(() => true as const), stalled]);
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
  }
}
