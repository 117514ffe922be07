import { defined } from '../../support/defined';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeThread, startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { json } from '../../support/envelope';
import { createTestGateway, serveOverHttp, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * A streamed run as the Node server (runtime/node/server.ts) writes it on the socket: framed as chunks,
 * thread.created first, each later event as it happens, the body ended; and a client that leaves
 * mid-stream does not stop its run.
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
