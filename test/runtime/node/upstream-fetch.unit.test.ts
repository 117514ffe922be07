import { defined } from '../../support/defined';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { Agent, buildConnector } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { upstreamFetch } from '../../../src/runtime/node/upstream-fetch';
import { requestUpstream } from '../../../src/runtime/node/upstream-request';
import { readServerSentData } from '../../../src/providers/sse-reader';
import type { UpstreamAnswer } from '../../../src/providers/types';

/**
 * Node's upstream client (runtime/node/upstream-fetch.ts) on what only it does itself, where fetch did it
 * before: decompressing what an upstream compresses unasked, never following a redirect, and
 * dropping the connection when a reader lets go of a body early.
 */

let server: Server;
let base: string;
const closed: string[] = [];
const handlers = new Map<string, (request: IncomingMessage, response: ServerResponse) => void>();

beforeAll(async () => {
  server = createServer((request, response) => {
    request.on('close', () => closed.push(defined(request.url)));
    defined(handlers.get(defined(request.url)))(request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const client = upstreamFetch({ rules: () => ({ allowPrivate: true }) });
const POST = { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' } as const;

async function text(answer: UpstreamAnswer): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of answer.body ?? []) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

function answering(path: string, headers: Record<string, string>, body: Uint8Array | string, status = 200) {
  handlers.set(path, (_request, response) => {
    response.writeHead(status, headers);
    response.end(body);
  });
  return `${base}${path}`;
}

describe("Node's upstream client", () => {
  const plain = JSON.stringify({ error: { message: 'overloaded' } });

  it('asks for no compression and reads an identity body as sent', async () => {
    let asked: string | undefined;
    handlers.set('/identity', (request, response) => {
      asked = request.headers['accept-encoding'];
      response.end(plain);
    });
    const answer = await client(`${base}/identity`, POST);
    expect(asked).toBeUndefined();
    expect(answer.status).toBe(200);
    expect(await text(answer)).toBe(plain);
  });

  it.each([
    ['gzip', gzipSync(plain)],
    ['x-gzip', gzipSync(plain)],
    ['deflate', deflateSync(plain)],
    ['br', brotliCompressSync(plain)],
    ['gzip, br', brotliCompressSync(gzipSync(plain))],
    ['identity', Buffer.from(plain)],
  ])('decompresses a body sent with content-encoding %s', async (coding, body) => {
    const answer = await client(
      answering(`/coded-${coding.replace(/\W+/g, '-')}`, { 'content-encoding': coding }, body, 503),
      POST,
    );
    expect(answer.status).toBe(503);
    expect(answer.headers.get('Content-Encoding')).toBe(coding);
    expect(await text(answer)).toBe(plain);
  });

  it('passes a body of an unknown coding as sent, and refuses more than five codings', async () => {
    expect(await text(await client(answering('/unknown', { 'content-encoding': 'zstd' }, 'raw bytes'), POST))).toBe(
      'raw bytes',
    );
    expect(
      await text(
        await client(answering('/object-key', { 'content-encoding': 'gzip, constructor' }, 'raw bytes'), POST),
      ),
    ).toBe('raw bytes');
    const six = Array.from({ length: 6 }, () => 'gzip').join(', ');
    await expect(client(answering('/six', { 'content-encoding': six }, 'x'), POST)).rejects.toThrow(
      /more than 5 content codings/,
    );
  });

  it('answers a redirect as it is, without following it', async () => {
    let followed = false;
    handlers.set('/elsewhere', (_request, response) => {
      followed = true;
      response.end('no');
    });
    const answer = await client(answering('/moved', { location: `${base}/elsewhere` }, '', 307), POST);
    expect(answer.status).toBe(307);
    expect(answer.headers.get('location')).toBe(`${base}/elsewhere`);
    await text(answer);
    expect(followed).toBe(false);
  });

  it('drops the connection when a reader lets go of an endless body, compressed or not', async () => {
    for (const compressed of [false, true]) {
      const path = `/endless-${compressed}`;
      handlers.set(path, (_request, response) => {
        response.writeHead(200, compressed ? { 'content-encoding': 'gzip' } : {});
        const chunk = compressed ? gzipSync('x'.repeat(65_536)).subarray(0, 10) : Buffer.alloc(65_536, 120);
        const timer = setInterval(() => response.write(chunk), 1);
        response.on('close', () => clearInterval(timer));
      });
      const answer = await client(`${base}${path}`, POST);
      const chunks = defined(answer.body)[Symbol.asyncIterator]();
      if (!compressed) expect((await chunks.next()).done).toBe(false);
      await defined(chunks.return).call(chunks);
      await expect.poll(() => closed.includes(path)).toBe(true);
    }
  });

  it('stops waiting when its signal aborts, with the signal reason, and drops the connection', async () => {
    let received!: () => void;
    const arrived = new Promise<void>((resolve) => (received = resolve));
    handlers.set('/silent', () => received());
    const controller = new AbortController();
    const answered = client(`${base}/silent`, { ...POST, signal: controller.signal });
    await arrived;
    controller.abort(new Error('cancelled by the run'));
    await expect(answered).rejects.toThrow('cancelled by the run');
    await expect.poll(() => closed.includes('/silent')).toBe(true);
  });

  it('rejects a read pending when its signal aborts, with the signal reason, and drops the connection', async () => {
    handlers.set('/stalls', (_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: first\n\n');
    });
    const controller = new AbortController();
    const answer = await client(`${base}/stalls`, { ...POST, signal: controller.signal });
    const chunks = defined(answer.body)[Symbol.asyncIterator]();
    expect(Buffer.from((await chunks.next()).value).toString()).toBe('data: first\n\n');
    const pending = chunks.next();
    controller.abort(new Error('the run expired'));
    await expect(pending).rejects.toThrow('the run expired');
    await expect.poll(() => closed.includes('/stalls')).toBe(true);
  });

  it('stops reading from a provider while its body is not read, and reads all of it once it is', async () => {
    const size = 64 * 1024 * 1024;
    let sent = 0;
    handlers.set('/flood', (_request, response) => {
      response.writeHead(200, { 'content-length': String(size) });
      const chunk = Buffer.alloc(64 * 1024, 97);
      const send = () => {
        while (sent < size) {
          sent += chunk.length;
          if (!response.write(chunk)) return void response.once('drain', send);
        }
        response.end();
      };
      send();
    });
    const answer = await client(`${base}/flood`, POST);
    // Nobody reads: the client keeps its high-water mark and pauses, so the provider's writes back
    // up once the kernel's buffers are full (a few MiB on loopback), far short of the whole body.
    let before = -1;
    while (sent !== before) {
      before = sent;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(sent).toBeLessThan(size / 2);
    let read = 0;
    for await (const chunk of defined(answer.body)) read += chunk.byteLength;
    expect(read).toBe(size);
  });

  it('holds at most a few reads of a provider that sends faster than its body is read, however long', async () => {
    // A provider's events as OpenAI's arrive: one HTTP chunk each (16 KiB here), sent as fast as
    // the connection takes them, for as long as the connection lasts.
    handlers.set('/fast', (_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      const event = Buffer.from(`data: ${'a'.repeat(16 * 1024)}\n\n`);
      const send = () => {
        while (!response.destroyed) if (!response.write(event)) return void response.once('drain', send);
      };
      send();
    });
    // The connection undici reads from, to see what it holds that the body has not handed over.
    const sockets: Socket[] = [];
    const connect = buildConnector({});
    const agent = new Agent({
      connect: (options, callback) =>
        connect(options, (...outcome) => {
          if (outcome[1]) sockets.push(outcome[1]);
          callback(...outcome);
        }),
    });
    try {
      const answer = await requestUpstream(agent, { origin: base, path: '/fast', method: 'GET' }, null);
      const socket = defined(sockets[0]);
      let read = 0;
      let held = 0;
      for await (const chunk of answer.body) {
        read += chunk.byteLength;
        held = Math.max(held, socket.readableLength);
        if (read >= 4 * 1024 * 1024 || held > 512 * 1024) break;
        // A reader slower than the provider: the socket has a turn of the event loop's I/O per chunk.
        await new Promise((resolve) => setImmediate(resolve));
      }
      // Bytes read from the kernel and not yet handed to the body: a read or two (64 KiB each).
      // Resumed after each chunk taken, undici read 64 KiB more each time and gave back one
      // chunk's worth: 4 MiB read this way left megabytes in the socket's buffer.
      expect(held).toBeLessThanOrEqual(256 * 1024);
      expect(read).toBeGreaterThanOrEqual(4 * 1024 * 1024);
    } finally {
      await agent.close();
    }
  });

  it('skips an informational answer (103 Early Hints) for the one that follows it', async () => {
    handlers.set('/hints', (_request, response) => {
      response.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
      response.writeHead(201, { 'content-type': 'text/plain' });
      response.end('created');
    });
    const answer = await client(`${base}/hints`, POST);
    expect(answer.status).toBe(201);
    expect(await text(answer)).toBe('created');
  });
});

describe('after `[DONE]`', () => {
  /** A server answering every POST with one event and `[DONE]`, then doing `after` with the response. */
  async function sseServer(after: (response: ServerResponse) => void) {
    // The connections that carried a call: undici may open a spare one after a connection it
    // dropped, which no call uses.
    const connections = new Set<Socket>();
    const sse = createServer((request, response) => {
      connections.add(request.socket);
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.write('data: {"x":1}\n\ndata: [DONE]\n\n');
      after(response);
    });
    await new Promise<void>((resolve) => sse.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(sse.address() as AddressInfo).port}/v1/chat/completions`;
    return {
      url,
      connections: () => connections.size,
      close: async () => {
        sse.closeAllConnections();
        await new Promise<void>((resolve) => sse.close(() => resolve()));
      },
    };
  }

  /**
   * Reads as the chat provider does: stops at `[DONE]`, saying so. `letGo` settles once the reader
   * let go of the body after it: its end read (the connection back in the pool) or the body cut.
   */
  async function readToDone(url: string): Promise<{ seen: string[]; letGo: Promise<void> }> {
    const call = new AbortController();
    const answer = await client(url, { ...POST, signal: call.signal });
    let lettingGo = () => {};
    const letGo = new Promise<void>((resolve) => (lettingGo = resolve));
    const chunks = defined(answer.body)[Symbol.asyncIterator]();
    const body: AsyncIterable<Uint8Array> = {
      [Symbol.asyncIterator]: () => ({
        next: async () => {
          const result = await chunks.next().catch((error: unknown) => {
            lettingGo();
            throw error;
          });
          if (result.done) lettingGo();
          return result;
        },
        return: async () => {
          lettingGo();
          return (await chunks.return?.()) ?? { done: true, value: undefined };
        },
      }),
    };
    const seen: string[] = [];
    let done = false;
    const end = {
      stopped: () => done,
      cut: () => {
        call.abort();
        lettingGo();
      },
    };
    for await (const batch of readServerSentData(
      body,
      { maxLineBytes: 65_536, maxEventChars: 65_536 },
      undefined,
      end,
    )) {
      for (const data of batch) {
        if (data === '[DONE]') {
          done = true;
          break;
        }
        seen.push(data);
      }
      if (done) break;
    }
    return { seen, letGo };
  }

  /** The connections `calls` calls read to `[DONE]` opened, the server doing `after` past it. */
  async function connectionsOf(calls: number, after: (response: ServerResponse) => void): Promise<number> {
    const sse = await sseServer(after);
    try {
      for (let i = 0; i < calls; i++) {
        const { seen, letGo } = await readToDone(sse.url);
        expect(seen).toEqual(['{"x":1}']);
        await letGo;
        // undici hands the connection back to its pool in the turn after the body's end.
        await new Promise((resolve) => setImmediate(resolve));
      }
      return sse.connections();
    } finally {
      await sse.close();
    }
  }

  it('a body that ends soon after leaves its connection to the next call', async () => {
    expect(await connectionsOf(3, (response) => setTimeout(() => response.end(), 20))).toBe(1);
  });

  it('a body that goes on past 1 KiB is cut, and the next call opens a connection of its own', async () => {
    expect(await connectionsOf(2, (response) => response.write(`: ${'x'.repeat(4096)}\n\n`))).toBe(2);
  });

  it('a body that does not end within a second is cut', async () => {
    let closedAt = 0;
    const sse = await sseServer((response) => response.on('close', () => (closedAt = performance.now())));
    try {
      const started = performance.now();
      await (
        await readToDone(sse.url)
      ).letGo;
      await vi.waitFor(() => expect(closedAt).toBeGreaterThan(0), { timeout: 10_000 });
      expect(closedAt).toBeGreaterThan(started + 900);
    } finally {
      await sse.close();
    }
  });

  it('any other early stop cuts the body at once', async () => {
    let closed = false;
    const sse = await sseServer((response) => response.on('close', () => (closed = true)));
    try {
      const answer = await client(sse.url, POST);
      for await (const _batch of readServerSentData(defined(answer.body), {
        maxLineBytes: 65_536,
        maxEventChars: 65_536,
      }))
        break;
      await vi.waitFor(() => expect(closed).toBe(true), { timeout: 10_000 });
    } finally {
      await sse.close();
    }
  });
});
