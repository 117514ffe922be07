/**
 * A response body that a server can have written straight to its connection, past a web
 * ReadableStream's queue and reader: each chunk read through a stream costs a queue hop and a
 * promise, and a run's answer is a chunk a token. Everywhere else (Workers, `app.request` in tests,
 * any server that does not ask) the body is read as the ReadableStream it also is.
 *
 * The producer offers its stream (`offerDirect`); the route that answers with it notes the stream
 * as its response's body (`withBody`); the server asks the response for it (`directBodyOf`) before
 * reading the body, and writes it to its sink if there is one.
 */

/** Where a direct body's bytes go: a server's answer to one request. */
export interface ByteSink {
  /** Writes `bytes`; false when the sink holds more than it wants, until it calls `room` back. */
  write(bytes: Uint8Array): boolean;
  /** Ends the body. */
  end(): void;
  /** Ends the answer cut, as if the client had left. */
  destroy(error: Error): void;
}

/** What the server tells a direct body about its sink. */
export interface SinkEvents {
  /** The sink wants more bytes again (after a write answered false). */
  room(): void;
  /** The client is gone (or the answer has ended): nothing more is written. */
  gone(): void;
}

export interface DirectBody {
  /** Writes what the body holds already, then everything written to it, to `sink`. */
  writeTo(sink: ByteSink): SinkEvents;
}

const offered = new WeakMap<ReadableStream<Uint8Array>, DirectBody>();
const bodies = new WeakMap<object, ReadableStream<Uint8Array>>();

/** `readable`'s bytes can also be written by `body`, while nobody reads `readable`. */
export function offerDirect(readable: ReadableStream<Uint8Array>, body: DirectBody): void {
  offered.set(readable, body);
}

/** `response`, noted as answering with `body` (when a stream: a body of another kind is written whole anyway). */
export function withBody<R extends object>(response: R, body: unknown): R {
  if (body instanceof ReadableStream) bodies.set(response, body);
  return response;
}

/** The direct body of `response`, if its body was offered as one and has not been read. */
export function directBodyOf(response: object): DirectBody | undefined {
  const readable = bodies.get(response);
  if (readable === undefined || readable.locked) return undefined;
  return offered.get(readable);
}

/** A body produced a chunk at a time, when its reader is ready for one. */
export interface PulledSource {
  /** The next bytes to send (null: none, at the end); `last` once there are no more. */
  next(): Promise<{ bytes: Uint8Array | null; last: boolean }>;
  /** The reader left before the end. */
  cancel(reason: unknown): Promise<void>;
}

/**
 * `source` as a ReadableStream that reads it only when asked (nothing read ahead), offered to be
 * written directly: then each chunk is asked for once the sink took the one before, or once it made
 * room.
 */
export function pulledStream(source: PulledSource): ReadableStream<Uint8Array> {
  const readable = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const { bytes, last } = await source.next();
        if (bytes !== null) controller.enqueue(bytes);
        if (last) controller.close();
      },
      cancel: (reason) => source.cancel(reason),
    },
    { highWaterMark: 0 },
  );
  offerDirect(readable, { writeTo: (sink) => pump(source, sink) });
  return readable;
}

function pump(source: PulledSource, sink: ByteSink): SinkEvents {
  let gone = false;
  let room: (() => void) | null = null;
  const madeRoom = () => {
    const made = room;
    room = null;
    made?.();
  };
  void (async () => {
    try {
      for (;;) {
        const { bytes, last } = await source.next();
        if (gone) return;
        const full = bytes !== null && !sink.write(bytes);
        if (last) return sink.end();
        if (full) await new Promise<void>((resolve) => (room = resolve));
        if (gone) return;
      }
    } catch (error) {
      if (!gone) sink.destroy(error instanceof Error ? error : new Error(String(error)));
    }
  })();
  return {
    room: madeRoom,
    gone: () => {
      if (gone) return;
      gone = true;
      madeRoom();
      void source.cancel(new Error('The client left before the end of the stream.')).catch(() => undefined);
    },
  };
}
