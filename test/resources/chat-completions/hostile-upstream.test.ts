import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defined } from '../../support/defined';
import { errorOf } from '../../support/envelope';
import {
  fakeDirective,
  startFakeUpstream,
  type FakeScenario,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { createTestGateway, serveOverHttp, type Tenant, type TestGateway } from '../../support/gateway';
import { waitFor } from '../../support/wait';

/**
 * A chat completion passed through to an upstream under a tenant's control, answering what no
 * provider would, and a client that sends what no SDK would: each a clear error in the one
 * envelope, nothing counted twice, and the gateway answering others all the while. Over real HTTP
 * (serveOverHttp), so that a client that stops reading holds back the socket as it would.
 */

const MAX_BODY_BYTES = 64 * 1024;

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let served: { url: string; close(): Promise<void> };
/** An upstream that answers every request with a proxy's HTML page, with status 200. */
let html: Server;
let htmlUrl: string;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway({ env: { GATEWAY_MAX_BODY_BYTES: String(MAX_BODY_BYTES) } });
  served = await serveOverHttp(gateway);
  html = createServer((request, response) => {
    request.resume();
    response.writeHead(200, { 'content-type': 'text/html' });
    response.end('<html><body><h1>Welcome to nginx!</h1></body></html>');
  });
  await new Promise<void>((resolve) => html.listen(0, '127.0.0.1', resolve));
  htmlUrl = `http://127.0.0.1:${(html.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  await served.close();
  await gateway.close();
  await fake.close();
  await new Promise((resolve) => html.close(resolve));
});

/** A tenant whose default virtual key calls `baseUrl`, with the SDK over HTTP as an application has it. */
async function tenantCalling(baseUrl: string): Promise<{ tenant: Tenant; client: OpenAI }> {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: baseUrl, default: true });
  return { tenant, client: new OpenAI({ apiKey: tenant.workspaceKey, baseURL: `${served.url}/v1`, maxRetries: 0 }) };
}

const asking = (text: string, scenario: FakeScenario) => ({
  role: 'user' as const,
  content: `${text}\n${fakeDirective(scenario)}`,
});

/** The tenant's chat completions counted in /v1/usage this hour (0 before the first). */
async function countedRequests(tenant: Tenant): Promise<number> {
  const response = await gateway.request('/v1/usage?bucket_width=1h&limit=1&group_by=kind', {
    key: tenant.workspaceKey,
  });
  const body = (await response.json()) as { data: { results: { kind: string; num_requests: number }[] }[] };
  return body.data[0]?.results.find((result) => result.kind === 'chat_completions')?.num_requests ?? 0;
}

/** Another tenant's whole chat completion: the gateway is still answering. */
async function othersAreServed(): Promise<void> {
  const { client } = await tenantCalling(fake.baseURL);
  const completion = await client.chat.completions.create({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'still there?' }],
  });
  expect(defined(completion.choices[0]).message.content).toBe('You said: still there?');
}

describe('an upstream that is not a provider', () => {
  it('an HTML page with status 200 is a 502 upstream_error saying the answer is not JSON', async () => {
    const { tenant, client } = await tenantCalling(htmlUrl);
    const error = await client.chat.completions
      .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error).toMatchObject({ status: 502, code: 'upstream_error' });
    expect((error as Error).message).toMatch(/not JSON/);
    await othersAreServed();
    // The provider answered: the call is counted once, at its estimate.
    expect(
      await waitFor(
        () => countedRequests(tenant),
        (count) => count === 1,
      ),
    ).toBe(1);
  });

  it("a proxy's HTML error page is the provider's status in the envelope, its text bounded", async () => {
    const { tenant, client } = await tenantCalling(fake.baseURL);
    const page = `<html><body>${'<p>Bad gateway</p>'.repeat(2_000)}</body></html>`;
    const error = await client.chat.completions
      .create({
        model: 'gpt-4o',
        messages: [asking('hi', { status: 502, error: page, headers: { 'content-type': 'text/html' } })],
      })
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({ status: 502, code: 'upstream_error' });
    expect((error as Error).message.length).toBeLessThan(1_000);
    // The provider refused: nothing is counted.
    expect(await countedRequests(tenant)).toBe(0);
  });
});

describe('an upstream that floods', () => {
  it('an endless stream of chunks is relayed while the client reads, ends when it leaves, and is counted once', async () => {
    const { tenant, client } = await tenantCalling(fake.baseURL);
    const chunk = `data: ${JSON.stringify({ id: 'chatcmpl-flood', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta: { content: 'a' }, finish_reason: null }] })}\n\n`;
    const stream = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('flood', { flood: chunk, chunk_bytes: 64 * chunk.length })],
      stream: true,
    });
    let read = 0;
    for await (const part of stream) {
      expect(part.choices[0]?.delta.content).toBe('a');
      read += 1;
      // Others are answered while the flood goes on.
      if (read === 2_000) await othersAreServed();
      if (read === 5_000) break;
    }
    // The client left: the provider's call is ended, not read on into nothing.
    const flooded = defined(fake.requests.find((request) => request.rawBody.includes('flood')));
    expect(
      await waitFor(
        () => flooded.outcome,
        (outcome) => outcome !== 'open',
      ),
    ).toBe('cancelled');
    expect(
      await waitFor(
        () => countedRequests(tenant),
        (count) => count === 1,
      ),
    ).toBe(1);
  });
});

describe('a client that sends what no SDK would', () => {
  it('a body over GATEWAY_MAX_BODY_BYTES is a 413, and nothing reaches the provider', async () => {
    const { tenant } = await tenantCalling(fake.baseURL);
    const before = fake.requests.length;
    const response = await fetch(`${served.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.workspaceKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY_BYTES) }] }),
    });
    expect(response.status).toBe(413);
    expect(await errorOf(response)).toMatchObject({ type: 'invalid_request_error', code: 'payload_too_large' });
    expect(fake.requests.length).toBe(before);
  });
});
