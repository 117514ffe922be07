import type { Readable } from 'node:stream';

/**
 * Request bodies on Node, read from the HTTP server's IncomingMessage itself. @hono/node-server
 * hands the app a light Request that becomes a full one (a web stream over the message, an
 * AbortSignal, a Request object) the moment its body is touched; reading the message directly
 * skips all of that on every POST. The server (server.ts) notes each request's message here; a
 * Request that did not come through it (tests' `app.request`) is read as a web Request.
 */
const messages = new WeakMap<Request, Readable>();

/** `message`: the IncomingMessage (or HTTP/2 request) the server read `request` from. */
export function noteMessage(request: Request, message: Readable): void {
  messages.set(request, message);
}

/** Deps.requestBody on Node. A reader that stops early leaves the message to the server (drained or closed, not destroyed: its answer, a 413, must still go out). */
export function requestBody(request: Request): AsyncIterable<Uint8Array> | null {
  const message = messages.get(request);
  if (message === undefined) return request.body;
  return { [Symbol.asyncIterator]: (): AsyncIterator<Uint8Array> => message.iterator({ destroyOnReturn: false }) };
}
