import { serve, type ServerType } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { ServerResponse } from 'node:http';
import type { Http2ServerResponse } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { directBodyOf } from '../../lib/direct-body';
import { ConfigurationError, type Config } from '../../config';
import { noteMessage } from './request-body';

/**
 * The HTTP server around the app on Node, and what only a Node server needs: event streams
 * declared chunked, a lingering close, and bounds on slow clients and on connections.
 */

export type ServerConfig = Pick<
  Config,
  | 'HOST'
  | 'PORT'
  | 'GATEWAY_HEADERS_TIMEOUT_MS'
  | 'GATEWAY_REQUEST_TIMEOUT_MS'
  | 'GATEWAY_MAX_CONNECTIONS'
  | 'GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS'
  | 'GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS'
>;

/**
 * Serves `fetch` on HOST:PORT; resolves once it listens, with the URL it listens on. An address
 * that cannot be had rejects with a ConfigurationError that names the variable to change.
 */
export async function listen(
  fetch: (request: Request) => Response | Promise<Response>,
  config: ServerConfig,
): Promise<{ server: ServerType; url: string; answering: () => number }> {
  // Answers in flight, until their last byte is written or their client goes: a download read
  // slowly or a long event stream is one as long as it lasts (memory-trim.ts waits for none).
  let answering = 0;
  const server = serve({
    fetch: (request, { incoming, outgoing }) => {
      answering++;
      outgoing.once('close', () => answering--);
      noteMessage(request, incoming);
      return declareStreams(fetch(request), incoming.socket, outgoing);
    },
    hostname: config.HOST,
    port: config.PORT,
    // A client has this long for a request's headers, and for the whole request: what a slow
    // sender can hold. They bound receiving the request only, never the answer, so a long event
    // stream is not cut. Node checks them every connectionsCheckingInterval (30 s by default).
    serverOptions: {
      headersTimeout: config.GATEWAY_HEADERS_TIMEOUT_MS,
      requestTimeout: config.GATEWAY_REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: Math.min(1_000, config.GATEWAY_HEADERS_TIMEOUT_MS),
    },
  });
  // Connections past this are closed as they arrive, so that many clients cannot exhaust the
  // process's file descriptors and memory; those already open are served as before.
  server.maxConnections = config.GATEWAY_MAX_CONNECTIONS;
  server.on('connection', lingerOnClose);
  // A connection with no traffic either way for this long is closed: a client that stopped
  // reading a stream (its run carries on without it) would otherwise hold its socket for ever.
  // Twice the upstream timeouts: a healthy stream is never silent longer than those.
  server.setTimeout(
    2 * Math.max(config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS, config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS),
  );
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', (error: NodeJS.ErrnoException) => reject(listenError(error, config)));
  });
  return { server, url: urlOf(server.address()), answering: () => answering };
}

/** Why HOST:PORT cannot be listened on, as one line that says which variable picks another. */
function listenError(error: NodeJS.ErrnoException, { HOST, PORT }: Pick<Config, 'HOST' | 'PORT'>): Error {
  const address = `${HOST.includes(':') ? `[${HOST}]` : HOST}:${PORT}`;
  switch (error.code) {
    case 'EADDRINUSE':
      return new ConfigurationError(
        `Cannot listen on ${address}: another process listens there. Stop it, or set PORT to another port (PORT=0 picks a free one).`,
      );
    case 'EACCES':
      return new ConfigurationError(
        `Cannot listen on ${address}: this user may not open port ${PORT}. Set PORT to a port above 1023.`,
      );
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new ConfigurationError(
        `Cannot listen on ${address}: HOST is not an address of this machine. Set HOST to one (127.0.0.1, or 0.0.0.0 for every interface).`,
      );
    default:
      return error;
  }
}

function urlOf(address: AddressInfo | string | null): string {
  if (address === null || typeof address === 'string')
    throw new Error(`the server listens on no TCP address (${address})`);
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

/**
 * @hono/node-server reads up to three chunks of a body that is not declared chunked, with a timer
 * between reads, to give it a Content-Length: an event stream would wait for that before its
 * headers and first events leave. Declaring event streams chunked sends each event as it comes.
 * (Workers frame responses themselves; this is Node's alone.)
 *
 * An event stream that can be written directly (lib/direct-body.ts: a run's, a response's) is
 * written here, each send straight to `outgoing`, rather than read by @hono/node-server through
 * its ReadableStream (a queue hop and a promise a chunk); the same headers, in the same order, and
 * the same bytes leave. Any other stream is left to @hono/node-server, which writes the headers on
 * their own and then what the stream holds already.
 *
 * Either way the socket is corked until the current run of microtasks is over, so that the
 * headers and a run's opening events leave in one write (a syscall, and a read for the client,
 * fewer per run).
 */
async function declareStreams(
  response: Response | Promise<Response>,
  socket: Socket,
  outgoing: ServerResponse | Http2ServerResponse,
): Promise<Response> {
  const answer = await response;
  // By the header alone: reading `body` would make @hono/node-server build the whole Response.
  if (!answer.headers.get('content-type')?.startsWith('text/event-stream')) return answer;
  answer.headers.set('transfer-encoding', 'chunked');
  socket.cork();
  process.nextTick(() => socket.uncork());
  const body = directBodyOf(answer);
  // The server is HTTP/1.1 (serve() makes no other).
  if (body === undefined || !(outgoing instanceof ServerResponse)) return answer;
  // As @hono/node-server writes them: lower-case names, in the Headers' (sorted) order.
  const headers: Record<string, string> = {};
  for (const [name, value] of answer.headers) headers[name] = value;
  outgoing.writeHead(answer.status, headers);
  outgoing.flushHeaders();
  const sink = body.writeTo({
    write: (bytes) => outgoing.write(bytes),
    end: () => outgoing.end(),
    destroy: (error) => outgoing.destroy(error),
  });
  outgoing.on('drain', sink.room);
  // 'close' follows the end of every answer: only one that ended early is a client gone.
  outgoing.once('close', () => {
    if (!outgoing.writableFinished) sink.gone();
  });
  outgoing.once('error', sink.gone);
  if (outgoing.destroyed) sink.gone();
  return RESPONSE_ALREADY_SENT;
}

/**
 * Lingering close, as web servers do it. When Node closes a connection after its last response
 * (the client asked for `connection: close`), it closes the socket as soon as the answer is
 * written. If the client is still sending a body the gateway refused early (a 413 after the
 * limit), the unread bytes make the kernel reset the connection, and a reset can destroy the 413
 * before the client reads it. So the socket only half-closes: the answer and a FIN go out, the
 * rest of the body is read and dropped, and the socket closes when the client closes its side,
 * or after LINGER_MS.
 */
const LINGER_MS = 2_000;

function lingerOnClose(socket: Socket) {
  socket.destroySoon = function lingeringClose(this: Socket) {
    this.end();
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
  };
}
