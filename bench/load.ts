import { connect, type Socket } from 'node:net';

/**
 * A load generator that costs little of the machine it shares: whole POST exchanges back to back
 * on `connections` kept-alive connections for `seconds`, the request's bytes built once, each
 * answer read only as far as its end (its Content-Length, or the last chunk of a chunked body) and
 * its status. Node's fetch spent about as much CPU on an exchange as the gateway it loaded
 * (1.8 ms against 2 to 3 on 2026-11-29, with the fake provider another 1.2 to 2): on two cores
 * shared by the client, the server and the provider, the server's throughput then says more about
 * the client than about the server. wrk, when installed, is cheaper still (compare.ts).
 *
 * Answers the exchanges that ended (those that failed among them: an answer other than 2xx, a
 * connection lost midway) and the seconds until the last of them ended.
 */
export async function loadFor(
  url: string,
  headers: Record<string, string>,
  body: string,
  seconds: number,
  connections: number,
): Promise<{ exchanges: number; errors: number; seconds: number }> {
  const target = new URL(url);
  const payload = Buffer.from(body);
  const request = Buffer.concat([
    Buffer.from(
      `POST ${target.pathname}${target.search} HTTP/1.1\r\nhost: ${target.host}\r\ncontent-length: ${payload.length}\r\n` +
        Object.entries(headers)
          .map(([name, value]) => `${name}: ${value}\r\n`)
          .join('') +
        '\r\n',
    ),
    payload,
  ]);
  const started = performance.now();
  const deadline = started + seconds * 1000;
  let exchanges = 0;
  let errors = 0;
  const connection = () =>
    new Promise<void>((resolve) => {
      const socket: Socket = connect(Number(target.port), target.hostname);
      socket.setNoDelay(true);
      const answer = new AnswerReader();
      let inFlight = false;
      const next = () => {
        if (performance.now() >= deadline) {
          socket.end();
          return;
        }
        inFlight = true;
        socket.write(request);
      };
      socket.on('connect', next);
      socket.on('data', (data: Buffer) => {
        const read = answer.feed(data);
        if (read === null) return;
        exchanges++;
        inFlight = false;
        // An answer comes only after its request: bytes past its end answer nothing asked.
        if (!read.ok || read.rest.length > 0) errors++;
        next();
      });
      socket.on('error', () => undefined);
      socket.on('close', () => {
        if (inFlight) {
          exchanges++;
          errors++;
        }
        // A connection the server closed while there is time left is opened again.
        if (performance.now() < deadline) void connection().then(resolve);
        else resolve();
      });
    });
  await Promise.all(Array.from({ length: connections }, connection));
  return { exchanges, errors, seconds: (performance.now() - started) / 1000 };
}

const CRLF = Buffer.from('\r\n');
const HEAD_END = Buffer.from('\r\n\r\n');
const EMPTY = Buffer.alloc(0);

/** One HTTP/1.1 answer read from its bytes as they come: its head, then its body's end. */
class AnswerReader {
  #pending: Buffer = EMPTY;
  #ok = false;
  /** Null until the head is read; then the bytes left of the chunk being read, and whether it is the last. */
  #framing: { left: number; last: boolean } | null = null;

  /** Takes the next bytes; answers the answer's status and the bytes after its end once it ended, else null. */
  feed(data: Buffer): { ok: boolean; rest: Buffer } | null {
    const buffer = this.#pending.length > 0 ? Buffer.concat([this.#pending, data]) : data;
    let at = 0;
    if (this.#framing === null) {
      const headEnd = buffer.indexOf(HEAD_END);
      if (headEnd === -1) {
        this.#pending = buffer;
        return null;
      }
      const head = buffer.toString('latin1', 0, headEnd).toLowerCase();
      const status = Number(head.slice(9, 12));
      this.#ok = status >= 200 && status < 300;
      const length = /\r\ncontent-length: *(\d+)/.exec(head);
      // A body of a declared length is read as one last chunk.
      this.#framing = length ? { left: Number(length[1]), last: true } : { left: 0, last: false };
      at = headEnd + HEAD_END.length;
    }
    const framing = this.#framing;
    for (;;) {
      const taken = Math.min(framing.left, buffer.length - at);
      framing.left -= taken;
      at += taken;
      if (framing.left > 0) {
        this.#pending = EMPTY;
        return null;
      }
      if (framing.last) return this.#ended(buffer, at);
      // A chunk's size line; after the last chunk (size 0), its empty trailer.
      const lineEnd = buffer.indexOf(CRLF, at);
      if (lineEnd === -1) {
        this.#pending = buffer.subarray(at);
        return null;
      }
      const size = parseInt(buffer.toString('latin1', at, lineEnd), 16);
      at = lineEnd + CRLF.length;
      if (Number.isNaN(size)) throw new Error('the answer is not chunked as HTTP/1.1 says');
      framing.last = size === 0;
      // The chunk's data and its CRLF (the last chunk: the trailer's blank line).
      framing.left = size + CRLF.length;
    }
  }

  #ended(buffer: Buffer, at: number): { ok: boolean; rest: Buffer } {
    const ok = this.#ok;
    this.#pending = EMPTY;
    this.#framing = null;
    this.#ok = false;
    return { ok, rest: buffer.subarray(at) };
  }
}
