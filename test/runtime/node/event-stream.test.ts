import { defined } from '../../support/defined';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeThread, startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { json } from '../../support/envelope';
import { createTestGateway, serveOverHttp, type Tenant, type TestGateway } from '../../support/gateway';
import { EventStream, eventStreamResponse, SSE_HEADERS } from '../../../src/resources/runs/execution/event-stream';
import { listen } from '../../../src/runtime/node/server';
import { pulledStream, withBody } from '../../../src/lib/direct-body';

/**
 * A streamed run as the Node server (runtime/node/server.ts) writes it on the socket: framed as chunks,
 * thread.created first, each later event as it happens, the body ended; and a client that leaves
 * mid-stream does not stop its run. The server writes an EventStream's bytes straight to the socket,
 * never reading its ReadableStream, with the same bounds on a client that reads slowly or leaves.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let served: { url: string; close(): Promise<void> };
let url: URL;
let tenant: Tenant;
let body: string;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
  served = await serveOverHttp(gateway);
  url = new URL(served.url);
  tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: fake.baseURL, default: true });
  const assistant = await json(
    await gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'fake-model' } }),
  );
  body = JSON.stringify({
    assistant_id: assistant.id,
    stream: true,
    thread: fakeThread('Hello', { reply: 'one two three four', chunk_delay_ms: 30 }),
  });
});
afterAll(async () => {
  await served.close();
  await gateway.close();
  await fake.close();
});

/** Sends a streamed run's request on a raw socket; answers the socket and the chunks as they arrive. */
function streamedRun() {
  const socket = connect(Number(url.port), url.hostname);
  socket.setNoDelay(true);
  const chunks: string[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk.toString('utf8')));
  socket.write(
    `POST /v1/threads/runs HTTP/1.1\r\nhost: ${url.host}\r\nx-gateway-api-key: ${tenant.workspaceKey}\r\n` +
      `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  return { socket, chunks };
}

describe('a streamed run on the Node server', () => {
  it('answers with the headers, thread.created first, then each event as it happens, then the end', async () => {
    const { socket, chunks } = streamedRun();
    await expect.poll(() => chunks.join('').includes('event: done'), { timeout: 10_000 }).toBe(true);
    socket.destroy();
    const [head, ...rest] = chunks.join('').split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(head).toMatch(/content-type: text\/event-stream/i);
    expect(head).toMatch(/transfer-encoding: chunked/i);
    expect(rest.join('\r\n\r\n')).toMatch(/^[0-9a-f]+\r\nevent: thread\.created\n/);
    // The deltas came 30 ms apart from the provider: each left as it came, not all at the end.
    expect(chunks.filter((chunk) => chunk.includes('event: thread.message.delta')).length).toBeGreaterThan(1);
    expect(chunks.join('')).toMatch(/0\r\n\r\n$/);
  });

  it('leaves the run to complete when the client goes away after the first events', async () => {
    const { socket, chunks } = streamedRun();
    await expect.poll(() => chunks.join('').includes('event: thread.run.created'), { timeout: 10_000 }).toBe(true);
    const runId = defined(defined(/"id":"(run_[A-Za-z0-9]+)"/.exec(chunks.join('')))[1]);
    const threadId = defined(defined(/"id":"(thread_[A-Za-z0-9]+)"/.exec(chunks.join('')))[1]);
    socket.destroy();
    await expect
      .poll(
        async () =>
          (await json(await gateway.request(`/v1/threads/${threadId}/runs/${runId}`, { key: tenant.workspaceKey })))
            .status,
        { timeout: 10_000 },
      )
      .toBe('completed');
    const messages = await json(
      await gateway.request(`/v1/threads/${threadId}/messages`, { key: tenant.workspaceKey }),
    );
    expect(messages.data[0].content[0].text.value).toBe('one two three four');
  });
});

/**
 * A server that answers a request with `stream`'s events, as the routes answer with a run's; or, not
 * `direct`, with a plain Response of its ReadableStream, which @hono/node-server reads.
 */
function serveEvents(stream: EventStream, direct = true) {
  const headers = { 'x-request-id': 'req_1' };
  return serve(() =>
    direct
      ? eventStreamResponse(stream.readable, headers)
      : new Response(stream.readable, { headers: { ...SSE_HEADERS, ...headers } }),
  );
}

/** A server that answers one request with `answer()`, and a raw socket that asked for it. */
async function serve(answer: () => Response) {
  const { server, url } = await listen(answer, {
    ...gateway.deps.config,
    HOST: '127.0.0.1',
    PORT: 0,
  });
  const target = new URL(url);
  const socket = connect(Number(target.port), target.hostname);
  const received: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => received.push(chunk));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(`GET / HTTP/1.1\r\nhost: ${target.host}\r\n\r\n`);
  return {
    socket,
    closed,
    text: () => Buffer.concat(received).toString('utf8'),
    /** Whether the chunked body's end arrived (without joining what came before). */
    ended: () => received.at(-1)?.toString('latin1').endsWith('0\r\n\r\n') ?? false,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ('closeAllConnections' in server) server.closeAllConnections();
      }),
  };
}

/** The body of a chunked HTTP/1.1 answer, its chunks joined. */
function unchunked(answer: string): string {
  let rest = answer.slice(answer.indexOf('\r\n\r\n') + 4);
  let body = '';
  for (;;) {
    const lineEnd = rest.indexOf('\r\n');
    const size = parseInt(rest.slice(0, lineEnd), 16);
    if (size === 0) return body;
    body += rest.slice(lineEnd + 2, lineEnd + 2 + size);
    rest = rest.slice(lineEnd + 2 + size + 2);
  }
}

describe('an event stream on the Node server', () => {
  it('is written straight to the socket, its ReadableStream never read, as the same bytes as when read through it', async () => {
    /** What the socket receives of an answer when the stream is sent three events in three writes. */
    async function answered(direct: boolean) {
      const stream = new EventStream({ stallMs: 5_000 });
      await stream.send([['thread.created', '{"id":"thread_1"}']]);
      const served = await serveEvents(stream, direct);
      await expect.poll(served.text).toContain('event: thread.created');
      await stream.send([
        ['thread.message.delta', '{"i":1}'],
        ['thread.message.delta', '{"i":2}'],
      ]);
      await expect.poll(served.text).toContain('{"i":2}');
      await stream.close();
      await expect.poll(served.text).toMatch(/0\r\n\r\n$/);
      served.socket.destroy();
      await served.close();
      return { locked: stream.readable.locked, text: served.text().replace(/\r\nDate: [^\r]+/, '') };
    }
    const direct = await answered(true);
    const read = await answered(false);
    expect(direct.locked).toBe(false);
    expect(read.locked).toBe(true);
    expect(direct.text).toBe(read.text);
    expect(direct.text.split('\r\n\r\n')[0]?.split('\r\n')).toEqual([
      'HTTP/1.1 200 OK',
      'cache-control: no-cache, no-transform',
      'content-type: text/event-stream; charset=utf-8',
      'transfer-encoding: chunked',
      'x-accel-buffering: no',
      'x-request-id: req_1',
      'Connection: keep-alive',
      'Keep-Alive: timeout=5',
    ]);
    expect(unchunked(direct.text)).toBe(
      'event: thread.created\ndata: {"id":"thread_1"}\n\n' +
        'event: thread.message.delta\ndata: {"i":1}\n\nevent: thread.message.delta\ndata: {"i":2}\n\n' +
        'event: done\ndata: [DONE]\n\n',
    );
  });

  it('lets go of a client that stops reading: once the socket holds what it can, a send waits stallMs, then the answer is cut', async () => {
    const stream = new EventStream({ stallMs: 200 });
    const served = await serveEvents(stream);
    served.socket.pause();
    const event = `{"text":"${'x'.repeat(64 * 1024)}"}`;
    // The kernel's buffers take some megabytes before the server's own fills and a send waits.
    for (let i = 0; i < 2_000 && !stream.detached; i++) await stream.send([['thread.message.delta', event]]);
    expect(stream.detached).toBe(true);
    expect(stream.readable.locked).toBe(false);
    served.socket.resume();
    await served.closed;
    await served.close();
  });

  it('waits for a client that reads slowly, and goes on once it reads', async () => {
    const stream = new EventStream({ stallMs: 20_000 });
    const served = await serveEvents(stream);
    served.socket.pause();
    const event = `{"text":"${'x'.repeat(64 * 1024)}"}`;
    let sent = 0;
    const sending = (async () => {
      for (; sent < 400; sent++) await stream.send([['thread.message.delta', event]]);
      await stream.close();
    })();
    // The socket's buffers fill, then a send waits for room.
    let before = -1;
    await expect
      .poll(
        async () => {
          const now = sent;
          await new Promise((resolve) => setTimeout(resolve, 100));
          const waiting = now > 1 && now === before && sent === now;
          before = now;
          return waiting;
        },
        { timeout: 10_000, interval: 0 },
      )
      .toBe(true);
    expect(sent).toBeLessThan(300);
    served.socket.resume();
    await sending;
    await expect.poll(served.ended, { timeout: 10_000 }).toBe(true);
    expect(stream.detached).toBe(false);
    expect(stream.readable.locked).toBe(false);
    served.socket.destroy();
    await served.close();
  });

  it('detaches when its client goes: later sends are dropped and the body is never read', async () => {
    const stream = new EventStream({ stallMs: 5_000 });
    const served = await serveEvents(stream);
    await stream.send([['thread.created', '{"id":"thread_1"}']]);
    await expect.poll(served.text).toContain('event: thread.created');
    served.socket.destroy();
    await expect.poll(() => stream.detached).toBe(true);
    await stream.send([['thread.message.delta', '{"i":1}']]);
    await stream.close();
    await served.close();
    expect(stream.readable.locked).toBe(false);
  });
});

describe('a stream pulled a chunk at a time (a passed-through completion) on the Node server', () => {
  /** A source of `count` chunks, counting how many it was asked for, and whether it was cancelled. */
  function chunks(count: number, size: number) {
    const state = { asked: 0, cancelled: false };
    const source = {
      next: () => {
        state.asked++;
        const last = state.asked === count;
        return Promise.resolve({
          bytes: new TextEncoder().encode(`data: ${state.asked}${'x'.repeat(size)}\n\n`),
          last,
        });
      },
      cancel: () => {
        state.cancelled = true;
        return Promise.resolve();
      },
    };
    return { state, source };
  }

  it('is written straight to the socket, never read through its ReadableStream, as the same bytes', async () => {
    const answered = async (direct: boolean) => {
      const { source } = chunks(3, 4);
      const readable = pulledStream(source);
      const headers = { ...SSE_HEADERS, 'x-request-id': 'req_1' };
      const served = await serve(() =>
        direct ? withBody(new Response(readable, { headers }), readable) : new Response(readable, { headers }),
      );
      await expect.poll(served.text).toMatch(/0\r\n\r\n$/);
      served.socket.destroy();
      await served.close();
      return { locked: readable.locked, text: served.text().replace(/\r\nDate: [^\r]+/, '') };
    };
    const direct = await answered(true);
    const read = await answered(false);
    expect(direct.locked).toBe(false);
    expect(read.locked).toBe(true);
    expect(direct.text).toBe(read.text);
    expect(unchunked(direct.text)).toBe('data: 1xxxx\n\ndata: 2xxxx\n\ndata: 3xxxx\n\n');
  });

  it('asks for no more than a client that stops reading makes room for, and goes on once it reads again', async () => {
    const { state, source } = chunks(400, 64 * 1024);
    const readable = pulledStream(source);
    const served = await serve(() => withBody(new Response(readable, { headers: SSE_HEADERS }), readable));
    served.socket.pause();
    // The socket's buffers fill (some megabytes), then the source is asked for nothing more.
    let before = -1;
    await expect
      .poll(
        async () => {
          const asked = state.asked;
          await new Promise((resolve) => setTimeout(resolve, 100));
          const settled = asked > 1 && asked === before && state.asked === asked;
          before = asked;
          return settled;
        },
        { timeout: 10_000, interval: 0 },
      )
      .toBe(true);
    expect(state.asked).toBeLessThan(300);
    served.socket.resume();
    await expect.poll(served.ended, { timeout: 10_000 }).toBe(true);
    expect(state.asked).toBe(400);
    expect(readable.locked).toBe(false);
    served.socket.destroy();
    await served.close();
  });

  it('is cancelled when its client goes', async () => {
    const { state, source } = chunks(5_000, 64 * 1024);
    const readable = pulledStream(source);
    const served = await serve(() => withBody(new Response(readable, { headers: SSE_HEADERS }), readable));
    served.socket.pause();
    await expect.poll(() => state.asked).toBeGreaterThan(1);
    served.socket.destroy();
    await expect.poll(() => state.cancelled).toBe(true);
    expect(state.asked).toBeLessThan(500);
    await served.close();
  });
});
