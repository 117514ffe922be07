import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';

/** What @hono/node-server hands the fetch callback as `incoming`: an HTTP/1 or HTTP/2 request. */
type Message = IncomingMessage | Http2ServerRequest;

/**
 * Request bodies on Node, read from the HTTP server's IncomingMessage itself. @hono/node-server
 * hands the app a light Request that becomes a full one (a web stream over the message, an
 * AbortSignal, a Request object) the moment its body is touched; reading the message directly
 * skips all of that on every POST. The server (server.ts) notes each request's message here; a
 * Request that did not come through it (tests' `app.request`) is read as a web Request.
 */
const messages = new WeakMap<Request, Message>();

/** `message`: the IncomingMessage (or HTTP/2 request) the server read `request` from. */
export function noteMessage(request: Request, message: Message): void {
  messages.set(request, message);
}

/**
 * Deps.requestBody on Node. A reader that stops early leaves the message to the server (drained or
 * closed, not destroyed: its answer, a 413, must still go out).
 *
 * A body the server has already received whole (nearly every JSON body: it came with its headers)
 * is handed over as the one chunk its buffer holds, without a stream iterator, which cost about 1%
 * of a streamed run's CPU. Only a whole body is read this way, and it is no larger than the
 * content-length the reader checked first: a body still arriving is read as it comes, and so
 * honours the reader's bound as before.
 */
export function requestBody(request: Request): AsyncIterable<Uint8Array> | null {
  const message = messages.get(request);
  if (message === undefined) return request.body;
  return { [Symbol.asyncIterator]: () => bodyOf(message) };
}

/**
 * The message's body, whole or as it comes, decided at the first read. That read is put off by a
 * microtask: the app is handed a request while the server's parser is still at its headers, and
 * the parser reads on (the rest of the body that came with them) before microtasks run.
 */
function bodyOf(message: Message): AsyncIterator<Uint8Array> {
  let chunks: AsyncIterator<Uint8Array> | null = null;
  return {
    next: async () => {
      if (chunks === null) {
        await Promise.resolve();
        chunks ??= received(message) ? wholeBody(message) : message.iterator({ destroyOnReturn: false });
      }
      return chunks.next();
    },
    return: async () => (chunks?.return ? chunks.return() : { done: true, value: undefined }),
  };
}

/**
 * Whether the whole of the message's body is in its buffer, unread: all the bytes its
 * content-length declares (the parser pushes no more than that; it marks the message complete
 * only later). A body without a length, chunked, is read as it comes.
 */
function received(message: Message): boolean {
  const length = message.headers['content-length'];
  return (
    length !== undefined && !message.destroyed && !message.readableDidRead && message.readableLength === Number(length)
  );
}

/** The message's buffered body as one chunk (none when it is empty); reading it lets the message end. */
function wholeBody(message: Message): AsyncIterator<Uint8Array> {
  let chunk: Uint8Array | null = message.read();
  return {
    next: async () => {
      const value = chunk;
      chunk = null;
      return value === null ? { done: true, value: undefined } : { done: false, value };
    },
    return: async () => {
      chunk = null;
      return { done: true, value: undefined };
    },
  };
}
