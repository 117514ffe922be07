import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadFor } from '../../bench/load';

/**
 * bench/load.ts, the load generator of bench:compare: every answer counted once, whatever its
 * framing and however its bytes are cut, and those that are not 2xx counted as errors.
 */

/** A raw HTTP/1.1 server whose answers go round three framings, the last one a 500; each written a few bytes at a time. */
let server: Server;
let url: string;
const served = { ok: 0, failed: 0 };

const ANSWERS = [
  // Chunked, as an event stream is: three chunks, then the last chunk.
  'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n' +
    '7\r\nevent: a\r\n' +
    '10\r\ndata: {"x":"\r\n"}\r\n' +
    '2\r\n\n\n\r\n' +
    '0\r\n\r\n',
  'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world',
  'HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\n{}',
];

beforeAll(async () => {
  let next = 0;
  server = createServer((socket) => {
    let asked = '';
    socket.on('data', (data: Buffer) => {
      asked += data.toString('latin1');
      // A request is whole once its body (content-length) has come after its head.
      for (;;) {
        const headEnd = asked.indexOf('\r\n\r\n');
        const length = Number(/content-length: (\d+)/i.exec(asked)?.[1] ?? NaN);
        if (headEnd === -1 || asked.length < headEnd + 4 + length) return;
        asked = asked.slice(headEnd + 4 + length);
        const answer = ANSWERS[next++ % ANSWERS.length] ?? '';
        if (answer.includes(' 500 ')) served.failed++;
        else served.ok++;
        // Three bytes at a time, each its own write: the client meets every cut.
        for (let at = 0; at < answer.length; at += 3) socket.write(answer.slice(at, at + 3));
      }
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  url = `http://127.0.0.1:${address.port}/v1/x?y=1`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('loadFor', () => {
  it('counts each answer once, chunked or of a declared length, and the answers that are not 2xx as errors', async () => {
    const result = await loadFor(url, { authorization: 'Bearer x' }, '{"a":1}', 0.5, 4);
    expect(result.exchanges).toBeGreaterThan(ANSWERS.length);
    expect(result.exchanges).toBe(served.ok + served.failed);
    expect(result.errors).toBe(served.failed);
  });
});
