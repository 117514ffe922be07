import type { Agent, Dispatcher } from 'undici';
import type { IncomingHttpHeaders } from 'undici/types/header';

/**
 * One request through undici's dispatcher, with a handler of ours: the status and headers, then
 * the body's chunks as undici hands them over, read with for-await. This is what undici's own
 * `request` does, without what the gateway does not use of it: an async resource per request, a
 * Node Readable around the body and the async iterator over that (together a few percent of a
 * streamed run's CPU, more than the rest of the body's path).
 *
 * The body keeps at most HIGH_WATER_BYTES unread before it pauses the connection, and resumes it
 * once its reader has taken all of it (UpstreamBody.next says why not sooner). Leaving the loop
 * early (a break, an error, the iterator's return) aborts the request, which drops the connection;
 * so does `signal`, whose reason the pending read, or the request itself before its headers,
 * rejects with.
 */
export function requestUpstream(
  agent: Agent,
  options: Dispatcher.DispatchOptions,
  signal: AbortSignal | null,
): Promise<{ statusCode: number; headers: IncomingHttpHeaders; body: UpstreamBody }> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    let controller: Dispatcher.DispatchController | null = null;
    let body: UpstreamBody | null = null;
    const onAbort = () => controller?.abort(signal?.reason);
    const settled = () => signal?.removeEventListener('abort', onAbort);
    signal?.addEventListener('abort', onAbort, { once: true });
    agent.dispatch(options, {
      onRequestStart(started) {
        controller = started;
        if (signal?.aborted) started.abort(signal.reason);
      },
      onResponseStart(started, statusCode, headers) {
        // 1xx answers are informational: the answer follows them.
        if (statusCode < 200) return;
        body = new UpstreamBody(started, settled);
        resolve({ statusCode, headers, body });
      },
      onResponseData(_, chunk) {
        body?.push(chunk);
      },
      onResponseEnd() {
        settled();
        body?.end();
      },
      onResponseError(_, error) {
        settled();
        if (body) body.fail(error);
        else reject(error);
      },
    });
  });
}

/** Unread bytes past which the connection pauses until the reader has taken them all. */
const HIGH_WATER_BYTES = 64 * 1024;

/** An answer's body: its chunks in order, read once (see requestUpstream). */
export class UpstreamBody implements AsyncIterableIterator<Uint8Array> {
  readonly #controller: Dispatcher.DispatchController;
  readonly #settled: () => void;
  #chunks: Uint8Array[] = [];
  #unread = 0;
  /** The end (true) or the failure of the body, once it came; reads drain the chunks first. */
  #outcome: true | { error: unknown } | null = null;
  /** The reader let go: chunks still arriving are dropped. */
  #released = false;
  #waiting: { resolve: (result: IteratorResult<Uint8Array>) => void; reject: (error: unknown) => void } | null = null;

  constructor(controller: Dispatcher.DispatchController, settled: () => void) {
    this.#controller = controller;
    this.#settled = settled;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  push(chunk: Uint8Array): void {
    if (this.#released) return;
    const waiting = this.#waiting;
    if (waiting) {
      this.#waiting = null;
      waiting.resolve({ done: false, value: chunk });
      return;
    }
    this.#chunks.push(chunk);
    this.#unread += chunk.byteLength;
    if (this.#unread >= HIGH_WATER_BYTES) this.#controller.pause();
  }

  end(): void {
    this.#outcome = true;
    this.#wake();
  }

  fail(error: unknown): void {
    this.#outcome = { error };
    this.#wake();
  }

  /**
   * The next chunk. A paused connection resumes only once the reader has taken every chunk, not as
   * soon as it is under HIGH_WATER_BYTES: undici pauses inside a read of the socket, puts the rest
   * of that read back (socket.unshift), and each resume reads the socket's buffer whole again,
   * joined into one new buffer, which also asks the kernel for up to 64 KiB more. Resumed after
   * every chunk taken (one event of the provider's, 16 KiB say), the socket's buffer grew by the
   * difference at each one and was copied whole each time, without bound while the reader was
   * slower than its provider. Resumed when empty, a resume takes at least HIGH_WATER_BYTES out of
   * the socket's buffer for the at most 64 KiB it adds, so that buffer stays within a read or two.
   */
  next(): Promise<IteratorResult<Uint8Array>> {
    const value = this.#chunks.shift();
    if (value) {
      this.#unread -= value.byteLength;
      if (this.#chunks.length === 0 && this.#controller.paused) this.#controller.resume();
      return Promise.resolve({ done: false, value });
    }
    if (this.#released || this.#outcome === true) return Promise.resolve({ done: true, value: undefined });
    if (this.#outcome) return Promise.reject(this.#outcome.error);
    return new Promise((resolve, reject) => (this.#waiting = { resolve, reject }));
  }

  /** The reader lets go: a body not yet ended is aborted (its connection dropped). */
  return(): Promise<IteratorResult<Uint8Array>> {
    if (!this.#released) {
      this.#released = true;
      this.#chunks = [];
      this.#unread = 0;
      if (this.#outcome === null) {
        this.#settled();
        this.#controller.abort(new Error('the reader let go of the body'));
      }
      this.#wake();
    }
    return Promise.resolve({ done: true, value: undefined });
  }

  #wake(): void {
    const waiting = this.#waiting;
    if (!waiting) return;
    this.#waiting = null;
    if (this.#released || this.#outcome === true) waiting.resolve({ done: true, value: undefined });
    else if (this.#outcome) waiting.reject(this.#outcome.error);
  }
}
