import { defined } from '../../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamError } from '../../../src/providers/types';
import { upstreamCause, upstreamErrorCode } from '../../../src/resources/runs/execution/outcome';
import {
  fakeDirective,
  startFakeUpstream,
  type FakeScenario,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { createTestGateway, json, type Tenant, type TestGateway } from '../../support/gateway';
import { closedBaseUrl } from '../../support/ports';

/**
 * Failures that explain themselves: a run's last_error says which network failure or which refusal
 * of the provider ended it, with OpenAI's code for it, and every run that ends leaves one
 * `run ended` log line with who ran what, its tokens, its timings and, for a failure, the cause.
 * DNS and refused connections are real: an unresolvable `.invalid` name, a closed loopback port.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let tenant: Tenant;
let slug: string;
let assistantId: string;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway({ env: { GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: '300' } });
  tenant = await gateway.tenant();
  slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL });
  const assistant = await json(
    await gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'fake-model' } }),
  );
  assistantId = assistant.id;
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});

interface Ended {
  run: { id: string; thread_id: string; status: string; last_error: { code: string; message: string } | null };
  /** The run's `run ended` log line. */
  line: Record<string, unknown>;
}

/** Creates a run on the virtual key `key` (default: the fake's) and waits for it to end and log it. */
async function runToEnd(scenario: FakeScenario | null, key = slug): Promise<Ended> {
  const content = scenario ? `Go\n${fakeDirective(scenario)}` : 'Go';
  const created = await json(
    await gateway.request('/v1/threads/runs', {
      key: tenant.workspaceKey,
      headers: { 'x-gateway-virtual-key': key },
      body: { assistant_id: assistantId, thread: { messages: [{ role: 'user', content }] } },
    }),
  );
  await gateway.tasks.drain(10_000);
  const run = await json(
    await gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}`, { key: tenant.workspaceKey }),
  );
  const lines = gateway.logs.map((text) => JSON.parse(text) as Record<string, unknown>);
  const ended = lines.filter((line) => line.message === 'run ended' && line.run_id === created.id);
  expect(ended).toHaveLength(1);
  return { run, line: defined(ended[0]) };
}

describe('a completed run', () => {
  it('logs one line with its ids, key, model, tokens and timings', async () => {
    const { run, line } = await runToEnd({
      reply: 'one two three',
      usage: { prompt_tokens: 11, completion_tokens: 3 },
    });
    expect(run.status).toBe('completed');
    expect(line).toMatchObject({
      level: 'info',
      run_id: run.id,
      thread_id: run.thread_id,
      assistant_id: assistantId,
      workspace_id: tenant.workspace.id,
      api_key_id: tenant.workspaceKeyId,
      virtual_key: slug,
      model: 'fake-model',
      status: 'completed',
      prompt_tokens: 11,
      completion_tokens: 3,
      total_tokens: 14,
      time_to_first_token_ms: expect.any(Number),
      duration_ms: expect.any(Number),
    });
    expect(line).not.toHaveProperty('cause');
    expect(line.time_to_first_token_ms as number).toBeGreaterThanOrEqual(0);
    expect(line.duration_ms as number).toBeGreaterThanOrEqual(line.time_to_first_token_ms as number);
  });
});

describe('a run cancelled while it waits for tool outputs', () => {
  it('logs its end too, its key read from the database', async () => {
    const tool = { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } };
    const assistant = await json(
      await gateway.request('/v1/assistants', {
        key: tenant.workspaceKey,
        body: { model: 'fake-model', tools: [tool] },
      }),
    );
    const created = await json(
      await gateway.request('/v1/threads/runs', {
        key: tenant.workspaceKey,
        headers: { 'x-gateway-virtual-key': slug },
        body: {
          assistant_id: assistant.id,
          thread: { messages: [{ role: 'user', content: `Go\n${fakeDirective({ tool_calls: true })}` }] },
        },
      }),
    );
    await gateway.tasks.drain(10_000);
    const path = `/v1/threads/${created.thread_id}/runs/${created.id}`;
    expect((await json(await gateway.request(path, { key: tenant.workspaceKey }))).status).toBe('requires_action');
    const logged = () =>
      gateway.logs
        .map((text) => JSON.parse(text) as Record<string, unknown>)
        .filter((line) => line.run_id === created.id && line.message === 'run ended');
    expect(logged()).toEqual([]);

    const cancelled = await json(await gateway.request(`${path}/cancel`, { key: tenant.workspaceKey, method: 'POST' }));
    expect(cancelled.status).toBe('cancelled');
    expect(logged()).toEqual([
      expect.objectContaining({
        status: 'cancelled',
        virtual_key: slug,
        assistant_id: assistant.id,
        time_to_first_token_ms: null,
      }),
    ]);
  });
});

describe('a run its upstream fails', () => {
  it.each([
    [
      'a refused provider key',
      401,
      'invalid_api_key',
      /^The upstream refused the virtual key's provider API key: HTTP 401: /,
    ],
    [
      'an unknown model',
      404,
      'model_not_found',
      /^The upstream has no model "fake-model" \(or no Chat Completions at the virtual key's base_url\): HTTP 404: /,
    ],
    ['a bad request', 400, 'invalid_request_error', /^The upstream refused the request as invalid: HTTP 400: /],
    ['a rate limit', 429, 'rate_limit_exceeded', /^The upstream rate-limited the request: HTTP 429: /],
    ["the provider's own failure", 500, 'server_error', /^The upstream answered HTTP 500: /],
  ])('%s (HTTP %i) gets code %s', async (_name, status, code, message) => {
    const { run, line } = await runToEnd({ status });
    expect(run).toMatchObject({ status: 'failed', last_error: { code, message: expect.stringMatching(message) } });
    expect(line).toMatchObject({
      status: 'failed',
      cause: `http_${status}`,
      error_code: code,
      error_message: defined(run.last_error).message,
      virtual_key: slug,
    });
    expect(line.time_to_first_token_ms).toBeNull();
  });

  it('a refused connection (a closed loopback port)', async () => {
    const key = await gateway.virtualKey(tenant, { base_url: await closedBaseUrl() });
    const { run, line } = await runToEnd(null, key);
    expect(run.last_error).toEqual({
      code: 'server_error',
      message: "The upstream refused the connection: nothing listens at the virtual key's base_url.",
    });
    expect(line).toMatchObject({ status: 'failed', cause: 'refused', error_code: 'server_error', virtual_key: key });
  });

  it('a name that does not resolve (.invalid)', async () => {
    const key = await gateway.virtualKey(tenant, { base_url: 'http://provider.gateway-test.invalid/v1' });
    const { run, line } = await runToEnd(null, key);
    expect(run.last_error).toEqual({
      code: 'server_error',
      message: "The upstream's host name did not resolve (DNS): check the virtual key's base_url.",
    });
    expect(line).toMatchObject({ status: 'failed', cause: 'dns' });
  });

  it('a TLS handshake that fails (https to a plain-HTTP server)', async () => {
    const key = await gateway.virtualKey(tenant, { base_url: fake.baseURL.replace(/^http:/, 'https:') });
    const { run, line } = await runToEnd(null, key);
    expect(run.last_error).toEqual({
      code: 'server_error',
      message:
        "The TLS handshake with the upstream failed (its certificate or protocol): check the virtual key's base_url.",
    });
    expect(line).toMatchObject({ status: 'failed', cause: 'tls' });
  });

  it('no first byte in time', async () => {
    const { run, line } = await runToEnd({ first_byte_delay_ms: 2_000 });
    expect(run.last_error).toEqual({ code: 'server_error', message: 'The upstream sent no first byte within 300 ms.' });
    expect(line).toMatchObject({ status: 'failed', cause: 'timeout' });
  });
});

describe("a run's last_error code and logged cause, by upstream failure", () => {
  it.each([
    [new UpstreamError('http', '', 401), 'invalid_api_key', 'http_401'],
    [new UpstreamError('http', '', 403), 'invalid_api_key', 'http_403'],
    [new UpstreamError('http', '', 404), 'model_not_found', 'http_404'],
    [new UpstreamError('http', '', 400), 'invalid_request_error', 'http_400'],
    [new UpstreamError('http', '', 422), 'invalid_request_error', 'http_422'],
    [new UpstreamError('http', '', 429), 'rate_limit_exceeded', 'http_429'],
    [new UpstreamError('http', '', 402), 'server_error', 'http_402'],
    [new UpstreamError('http', '', 503), 'server_error', 'http_503'],
    [new UpstreamError('network', '', undefined, 'dns'), 'server_error', 'dns'],
    [new UpstreamError('network', ''), 'server_error', 'network'],
    [new UpstreamError('timeout', ''), 'server_error', 'timeout'],
    [new UpstreamError('protocol', ''), 'server_error', 'protocol'],
    [new UpstreamError('address', ''), 'server_error', 'address'],
  ])('%o: %s, %s', (error, code, cause) => {
    expect(upstreamErrorCode(error)).toBe(code);
    expect(upstreamCause(error)).toBe(cause);
  });
});

describe('request log lines', () => {
  it('carry the request id that the response headers give', async () => {
    const response = await gateway.request('/v1/assistants', { key: tenant.workspaceKey });
    const id = response.headers.get('x-request-id');
    expect(id).toMatch(/^req_/);
    expect(response.headers.get('x-gateway-request-id')).toBe(id);
    const lines = gateway.logs.map((text) => JSON.parse(text) as Record<string, unknown>);
    expect(lines.filter((line) => line.message === 'request' && line.request_id === id)).toEqual([
      expect.objectContaining({ method: 'GET', path: '/v1/assistants', status: 200 }),
    ]);
  });
});
