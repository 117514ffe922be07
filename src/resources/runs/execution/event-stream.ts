import type { EventSink, ServerSentEvent } from '../../../deps';
import type { ErrorBody } from '../../../errors';
import { offerDirect, withBody, type ByteSink, type DirectBody, type SinkEvents } from '../../../lib/direct-body';
import { concatBytes } from '../../../lib/bytes';
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

/**
 * The answer that streams `events` (an EventStream's `readable`, or one from elsewhere): SSE_HEADERS
 * and `headers`, the body noted so that a server may write it directly (lib/direct-body.ts).
 */
export function eventStreamResponse(
  events: ReadableStream<Uint8Array>,
  headers: Record<string, string> = {},
): Response {
  return withBody(new Response(events, { status: 200, headers: { ...SSE_HEADERS, ...headers } }), events);
}

/** What a send answers when it has nothing to wait for. */
const SENT: Promise<void> = Promise.resolve();

/** Events queued towards a slow client before the engine waits for it. */
const QUEUE_EVENTS = 64;
/** The most bytes one chunk of events written in parts holds. */
const PARTS_CHUNK_BYTES = 64 * 1024;

export class EventStream implements EventSink, DirectBody {
  readonly readable: ReadableStream<Uint8Array>;
  // A readable stream fed directly, not the readable side of a TransformStream: a run's stream is
  // made per request, and a writable side and a transform in between cost more than its events.
  // It queues nothing itself (a high-water mark of 0): what is written waits in #held until a read
  // asks for it, so that a server can still take the bytes past it (writeTo) until it is read.
  #controller!: ReadableStreamDefaultController<Uint8Array>;
  /** Bytes written and not handed on yet: before anything reads them, or while the reader is behind. */
  #held: Uint8Array[] = [];
  /** Whether a read of `readable` waits for bytes. */
  #asked = false;
  /** The server's sink, once it took the bytes past `readable` (writeTo). */
  #sink: ByteSink | null = null;
  /** Whether the sink asked to wait for room. */
  #full = false;
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
        pull: () => this.#pulled(),
        // The client cancelled (disconnected): from then on, events are dropped.
        cancel: () => this.#leave(),
      },
      { highWaterMark: 0 },
    );
    offerDirect(this.readable, this);
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
   * Events of which some are in parts: the long parts (a long answer's text, from its TextBuilder)
   * written as they are, the short ones between them copied into chunks of up to
   * PARTS_CHUNK_BYTES, so that a message of a 4 MiB answer never exists whole (as a string, then
   * as bytes) beside the answer, nor its text twice. Each write waits for its turn within the
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
    this.#end();
  }

  /**
   * On Node, the server writes the events straight to its answer (runtime/node/server.ts): what
   * was written before it asked, then each send as it comes, with the same bound on a slow client
   * (the sink's own buffer, then `stallMs` to make room).
   */
  writeTo(sink: ByteSink): SinkEvents {
    if (this.#sink !== null || this.readable.locked) throw new Error('the event stream is read already');
    this.#sink = sink;
    const held = this.#held;
    this.#held = [];
    if (!this.#detached) for (const bytes of held) this.#put(bytes);
    if (this.#closed) this.#end();
    this.#madeRoom();
    return {
      room: () => {
        this.#full = false;
        this.#madeRoom();
      },
      gone: () => this.#leave(),
    };
  }

  /** Writes `bytes` at once when there is room (the usual case, on every event), else once the client makes some. */
  #write(bytes: Uint8Array): Promise<void> {
    if (this.#detached) return SENT;
    if (!this.#hasRoom()) return this.#writeWhenRoom(bytes);
    this.#put(bytes);
    return SENT;
  }

  #hasRoom(): boolean {
    return this.#sink === null ? this.#asked || this.#held.length < QUEUE_EVENTS : !this.#full;
  }

  /** Hands `bytes` on: to the sink, to a read that waits for them, or to #held until one asks. */
  #put(bytes: Uint8Array): void {
    if (this.#sink !== null) {
      try {
        if (!this.#sink.write(bytes)) this.#full = true;
      } catch {
        this.#detached = true;
      }
    } else if (this.#asked) {
      this.#asked = false;
      this.#enqueue(bytes);
    } else {
      this.#held.push(bytes);
    }
  }

  async #writeWhenRoom(bytes: Uint8Array): Promise<void> {
    if (!(await this.#roomWithin(this.#stallMs))) {
      if (this.#detached) return;
      this.#detached = true;
      // The response ends, cut, as if the client had left.
      const error = new Error('the client stopped reading the stream');
      if (this.#sink === null) this.#controller.error(error);
      else this.#sink.destroy(error);
      return;
    }
    this.#put(bytes);
  }

  /** A read of `readable` asks for bytes: what is held, if any, else the next written. */
  #pulled(): void {
    if (this.#held.length === 0) {
      this.#asked = true;
      return;
    }
    const held = this.#held;
    this.#held = [];
    // What was written since the last read goes on joined (inChunks): a provider read of several
    // tokens, or the events queued behind the run's commit, crosses each hop after this one (an
    // executor object's RPC stream, the client's socket) as one write, not one per event. The usual
    // read finds one event: it goes as it is, without the joining's generator.
    const [only] = held;
    if (held.length === 1 && only) this.#enqueue(only);
    else for (const bytes of inChunks(held, PARTS_CHUNK_BYTES)) this.#enqueue(bytes);
    if (this.#closed) this.#end();
    this.#madeRoom();
  }

  /** Ends the body once closed, when everything written has been handed on. */
  #end(): void {
    if (this.#detached || (this.#sink === null && this.#held.length > 0)) return;
    try {
      if (this.#sink === null) this.#controller.close();
      else this.#sink.end();
    } catch {
      this.#detached = true;
    }
  }

  #enqueue(bytes: Uint8Array): void {
    try {
      this.#controller.enqueue(bytes);
    } catch {
      this.#detached = true;
    }
  }

  #leave(): void {
    this.#detached = true;
    this.#madeRoom();
  }

  #madeRoom(): void {
    const roomMade = this.#roomMade;
    this.#roomMade = null;
    roomMade?.();
  }

  /** Whether the client made room within `ms` (false if it left). */
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
 * A part at least this long is written as it is rather than copied: a long answer's text, held by
 * its TextBuilder in buffers of up to 64 KiB, leaves from them, so that its bytes are not held a
 * second time, in fresh buffers, while the client reads them.
 */
const WRITTEN_AS_IS_BYTES = 16 * 1024;

/**
 * `parts` in order: those of WRITTEN_AS_IS_BYTES or more as they are, the others between them
 * gathered into chunks of at most `size` bytes, each copied when asked for.
 */
function* inChunks(parts: Uint8Array[], size: number): Generator<Uint8Array> {
  let gathered: Uint8Array[] = [];
  let bytes = 0;
  for (const part of parts) {
    const asIs = part.byteLength >= WRITTEN_AS_IS_BYTES;
    if (bytes > 0 && (asIs || bytes + part.byteLength > size)) {
      yield concatBytes(gathered);
      gathered = [];
      bytes = 0;
    }
    if (asIs) yield part;
    else {
      gathered.push(part);
      bytes += part.byteLength;
    }
  }
  if (bytes > 0) yield concatBytes(gathered);
}
