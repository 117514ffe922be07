import { defined } from '../support/defined';
import { connect, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeDirective, startFakeUpstream } from '../support/fake-upstream';
import { startGatewayProcess, type GatewayProcess } from '../support/processes';

/**
 * What only the real Node server shows about slow and many clients: its headers and request
 * timeouts, its cap on connections, and an answer that streams longer than the request timeout.
 * They wait on the real clock for those timeouts: here rather than in npm test (test/runtime/node/server.test.ts
 * starts the server as a new user meets it).
 */

// ── The HTTP server's limits ─────────────────────────────────────────────────────────────────

/** A raw connection: what was received, and whether (and when) the server closed it. */
interface RawConnection {
  socket: Socket;
  received(): string;
  closed: Promise<void>;
  isClosed(): boolean;
}

async function rawConnection(url: string): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  let received = '';
  let isClosed = false;
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => (received += chunk));
  socket.on('error', () => {}); // a reset is a close too
  const closed = new Promise<void>((resolve) => socket.on('close', () => ((isClosed = true), resolve())));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return { socket, received: () => received, closed, isClosed: () => isClosed };
}

/** Writes `pieces` one at a time, `gapMs` apart, until they run out or the server closes. */
async function trickle(connection: RawConnection, pieces: string[], gapMs: number): Promise<number> {
  let sent = 0;
  for (const piece of pieces) {
    if (connection.isClosed()) break;
    connection.socket.write(piece);
    sent += 1;
    await new Promise((resolve) => setTimeout(resolve, gapMs));
  }
  return sent;
}

const lines = (count: number, line: (i: number) => string) => Array.from({ length: count }, (_, i) => line(i));

describe('the HTTP server', () => {
  let dataDir: string;
  let gateway: GatewayProcess;
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'gateway-limits-'));
    gateway = await startGatewayProcess({
      DATA_DIR: dataDir,
      GATEWAY_HEADERS_TIMEOUT_MS: '1000',
      GATEWAY_REQUEST_TIMEOUT_MS: '2000',
      GATEWAY_MAX_CONNECTIONS: '4',
    });
  });
  afterAll(async () => {
    await gateway?.stop('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('disconnects a client that sends its headers slowly, after the headers timeout (408)', async () => {
    const slow = await rawConnection(gateway.url);
    // 100 header lines, 200 ms apart: 20 s, far past the 1 s allowed.
    const sent = await trickle(
      slow,
      ['GET /health HTTP/1.1\r\nhost: gateway\r\n', ...lines(100, (i) => `x-slow-${i}: 1\r\n`)],
      200,
    );
    await slow.closed;
    expect(sent).toBeLessThan(101);
    expect(slow.received()).toMatch(/^(HTTP\/1\.1 408 |$)/);
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
  });

  it('disconnects a client that sends its body slowly, after the request timeout (408)', async () => {
    const slow = await rawConnection(gateway.url);
    const head =
      'POST /v1/assistants HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n';
    const sent = await trickle(slow, [head, ...lines(100, () => ' ')], 200);
    await slow.closed;
    expect(sent).toBeLessThan(101);
    expect(slow.received()).toMatch(/^(HTTP\/1\.1 408 |$)/);
  });

  it('refuses connections beyond GATEWAY_MAX_CONNECTIONS while it answers those it holds', async () => {
    // Four connections held open mid-request: each has been answered `100 Continue`, so the server
    // has them, and waits for a body.
    // Closed however the test ends: held open, they would keep the server at its cap for the tests
    // after this one. The server has 10 s to answer each: the suites share two cores with a load minute.
    const held: RawConnection[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        const connection = await rawConnection(gateway.url);
        held.push(connection);
        connection.socket.write(
          'POST /v1/assistants HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: 2\r\n' +
            'expect: 100-continue\r\nconnection: close\r\n\r\n',
        );
        await expect.poll(connection.received, { timeout: 10_000 }).toContain('100 Continue');
      }
      const refused = await rawConnection(gateway.url);
      refused.socket.write('GET /health HTTP/1.1\r\nhost: gateway\r\n\r\n');
      await refused.closed;
      expect(refused.received()).toBe('');

      // The held ones are still served.
      for (const connection of held.slice(0, 2)) {
        connection.socket.write('{}');
        await connection.closed;
        expect(connection.received()).toMatch(/HTTP\/1\.1 401 /);
      }
      // And with room again, new connections are too.
      await expect
        .poll(async () => (await fetch(`${gateway.url}/health`).catch(() => null))?.status, { timeout: 10_000 })
        .toBe(200);
    } finally {
      for (const connection of held) connection.socket.destroy();
    }
  });

  it('does not cut a streamed answer that lasts longer than the request timeout', async () => {
    const fake = await startFakeUpstream();
    try {
      await expect.poll(() => /workspace API key\s+gk_/.test(gateway.stdout())).toBe(true);
      const key = defined(defined(/workspace API key\s+(gk_[A-Za-z0-9_-]+)/.exec(gateway.stdout()))[1]);
      const headers = { 'x-gateway-api-key': key, 'content-type': 'application/json' };
      const post = (path: string, body: unknown, extra: Record<string, string> = {}) =>
        fetch(`${gateway.url}${path}`, {
          method: 'POST',
          headers: { ...headers, ...extra },
          body: JSON.stringify(body),
        });
      // A fresh database has one workspace: its upstream may be on loopback without any setting.
      expect(
        (await post('/v1/virtual-keys', { slug: 'fake', provider: 'openai', base_url: fake.baseURL, api_key: 'none' }))
          .status,
      ).toBe(200);
      const assistant = (await (await post('/v1/assistants', { model: 'fake-model' })).json()) as { id: string };

      // Eight chunks 500 ms apart: about 4 s of answer, twice the 2 s request timeout.
      const scenario = { reply: 'one two three four five six seven eight', chunks: 8, chunk_delay_ms: 500 };
      const response = await post(
        '/v1/threads/runs',
        {
          assistant_id: assistant.id,
          stream: true,
          thread: { messages: [{ role: 'user', content: `hi\n${fakeDirective(scenario)}` }] },
        },
        { 'x-gateway-virtual-key': 'fake' },
      );
      expect(response.status).toBe(200);
      const events = await response.text();
      expect(events).toContain('event: thread.run.completed');
      expect(events).toMatch(/data: \[DONE\]\n\n$/);
      expect(events.match(/event: thread\.message\.delta/g)).toHaveLength(8);
    } finally {
      await fake.close();
    }
  });
});
