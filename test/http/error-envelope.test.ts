import Database from 'libsql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestGateway, errorOf, serveOverHttp, type Tenant, type TestGateway } from '../support/gateway';

/** The one envelope, its status codes, and the request id on every response. */

let gateway: TestGateway;
let tenant: Tenant;
const LIMIT = 2048;
beforeAll(async () => {
  gateway = await createTestGateway({ env: { GATEWAY_MAX_BODY_BYTES: String(LIMIT) } });
  tenant = await gateway.tenant();
});
afterAll(() => gateway.close());

const PATH = '/v1/policies/rate-limits';
const policy = {
  conditions: [{ key: 'model', value: '*' }],
  group_by: [{ key: 'model' }],
  type: 'requests',
  unit: 'rpm',
  value: 1,
};

describe('error envelope', () => {
  it('404s unknown routes, inside and outside /v1', async () => {
    for (const path of ['/nope', '/v2/policies']) {
      const error = await errorOf(await gateway.request(path, { key: tenant.workspaceKey }));
      expect(error).toMatchObject({ status: 404, code: 'route_not_found', type: 'invalid_request_error', param: null });
      expect(error.message).toContain(path);
    }
    // Under /v1, what the gateway does not serve says so (test/http/unsupported-endpoints.test.ts).
    const error = await errorOf(await gateway.request('/v1/nope', { key: tenant.workspaceKey }));
    expect(error).toMatchObject({
      status: 404,
      code: 'unsupported_endpoint',
      type: 'invalid_request_error',
      param: null,
    });
    expect(error.message).toContain('GET /v1/nope');
  });

  it('says that the API is under /v1 for a path outside it, and for a path that repeats /v1', async () => {
    const error = await errorOf(await gateway.request('/assistants', { key: tenant.workspaceKey }));
    expect(error).toMatchObject({ status: 404, code: 'route_not_found' });
    expect(error.message).toBe(
      "Unknown route: GET /assistants. The API is served under /v1: a client's base URL ends in /v1 (OPENAI_BASE_URL=http://<gateway>/v1), as in /v1/assistants.",
    );
    const doubled = await errorOf(await gateway.request('/v1/v1/assistants', { key: tenant.workspaceKey }));
    expect(doubled).toMatchObject({ status: 404, code: 'unsupported_endpoint' });
    expect(doubled.message).toContain('The path repeats /v1: a base URL ends in /v1');
    // A path is the client's text: repeated, not at any length.
    expect((await errorOf(await gateway.request(`/${'a'.repeat(10_000)}`))).message.length).toBeLessThan(800);
  });

  it('ends every JSON answer with a newline, errors included, over HTTP with a Content-Length that counts it', async () => {
    const server = await serveOverHttp(gateway);
    try {
      const answers = [
        await fetch(`${server.url}/health`),
        await fetch(`${server.url}/v1/assistants`, { headers: { authorization: `Bearer ${tenant.workspaceKey}` } }),
        await fetch(`${server.url}/v1/assistants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${tenant.workspaceKey}`, 'content-type': 'application/json' },
          body: '{}',
        }),
        await fetch(`${server.url}/nope`),
        await fetch(`${server.url}/v1/assistants`),
      ];
      expect(answers.map((response) => response.status)).toEqual([200, 200, 400, 404, 401]);
      for (const response of answers) {
        expect(response.headers.get('content-type')).toMatch(/^application\/json/);
        const bytes = new Uint8Array(await response.arrayBuffer());
        expect(bytes.at(-1)).toBe(0x0a);
        expect(bytes.at(-2)).toBe(0x7d); // the JSON's own last byte, `}`
        if (response.headers.has('content-length'))
          expect(Number(response.headers.get('content-length'))).toBe(bytes.length);
        JSON.parse(new TextDecoder().decode(bytes));
      }
    } finally {
      await server.close();
    }
  });

  it('405s a known path with another method, with Allow', async () => {
    const response = await gateway.request(PATH, { key: tenant.workspaceKey, method: 'PATCH', body: {} });
    expect(response.headers.get('allow')).toBe('GET, HEAD, POST');
    expect(await errorOf(response)).toMatchObject({ status: 405, code: 'method_not_allowed' });
  });

  it('413s a body over the limit, by Content-Length', async () => {
    const body = JSON.stringify({ ...policy, name: 'n'.repeat(LIMIT) });
    const response = await gateway.app.request(PATH, {
      method: 'POST',
      headers: {
        'x-gateway-api-key': tenant.workspaceKey,
        'content-type': 'application/json',
        'content-length': String(body.length),
      },
      body,
    });
    expect(await errorOf(response)).toMatchObject({ status: 413, code: 'payload_too_large' });
  });

  it('413s a streamed body over the limit that declares no length', async () => {
    const chunk = new TextEncoder().encode(' '.repeat(512));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 10) controller.enqueue(chunk);
        else controller.close();
      },
    });
    const request = new Request(`http://gateway${PATH}`, {
      method: 'POST',
      headers: {
        'x-gateway-api-key': tenant.workspaceKey,
        'content-type': 'application/json',
        'transfer-encoding': 'chunked',
      },
      body: stream,
      duplex: 'half',
    });
    expect(await errorOf(await gateway.app.request(request))).toMatchObject({ status: 413, code: 'payload_too_large' });
    expect(sent).toBeLessThanOrEqual(6);
  });

  it('415s a body that is not JSON', async () => {
    for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const response = await gateway.app.request(PATH, {
        method: 'POST',
        headers: { 'x-gateway-api-key': tenant.workspaceKey, 'content-type': contentType },
        body: 'type=requests',
      });
      expect(await errorOf(response)).toMatchObject({ status: 415, code: 'unsupported_media_type' });
    }
    const missing = await gateway.app.request(PATH, {
      method: 'POST',
      headers: { 'x-gateway-api-key': tenant.workspaceKey },
      body: JSON.stringify(policy),
    });
    // A body sent without a content type at all is not assumed to be JSON either.
    expect((await errorOf(missing)).status).toBe(415);
  });

  it('accepts JSON with a charset and the +json suffix', async () => {
    for (const contentType of ['application/json; charset=utf-8', 'application/merge-patch+json']) {
      const response = await gateway.request(PATH, {
        key: tenant.workspaceKey,
        body: policy,
        headers: { 'content-type': contentType },
      });
      expect(response.status).toBe(200);
    }
  });

  it('400s malformed JSON, saying where, without quoting the body', async () => {
    const secretish = 'sk-live-should-not-be-echoed';
    const error = await errorOf(
      await gateway.request(PATH, { key: tenant.workspaceKey, body: `{"name": "${secretish}", ` }),
    );
    expect(error).toMatchObject({ status: 400, code: 'invalid_json', param: null });
    expect(error.message).toMatch(/position \d+/);
    expect(error.message).not.toContain(secretish);
  });

  it('reads an empty JSON body as an empty object: a route that needs fields names the first missing one', async () => {
    const error = await errorOf(
      await gateway.request(PATH, {
        key: tenant.workspaceKey,
        body: '',
        headers: { 'content-type': 'application/json' },
        method: 'POST',
      }),
    );
    expect(error).toMatchObject({ status: 400, code: 'missing_required_parameter', param: 'conditions' });
  });

  it('marks errors that retrying cannot fix, so the OpenAI SDK does not retry them', async () => {
    const response = await gateway.request(PATH, { key: tenant.workspaceKey, body: {} });
    expect(response.status).toBe(400);
    expect(response.headers.get('x-should-retry')).toBe('false');
  });

  it('gives every response its own request id, also as x-request-id', async () => {
    const responses = [
      await gateway.request(PATH, { key: tenant.workspaceKey }),
      await gateway.request(PATH, { key: tenant.workspaceKey, body: {} }),
      await gateway.request(PATH),
      await gateway.request('/nope'),
      await gateway.request('/health'),
    ];
    const ids = responses.map((response) => response.headers.get('x-gateway-request-id'));
    for (const [i, response] of responses.entries()) {
      expect(ids[i]).toMatch(/^req_[A-Za-z0-9]{24}$/);
      expect(response.headers.get('x-request-id')).toBe(ids[i]);
    }
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('500', () => {
  it('answers a generic envelope, logs the cause with the request id, shows no internals', async () => {
    const broken = await createTestGateway();
    const brokenTenant = await broken.tenant();
    // A real failure: the database goes away under the app.
    broken.database.close();
    const response = await broken.request(PATH, { key: brokenTenant.workspaceKey });
    const requestId = response.headers.get('x-gateway-request-id');
    const text = await response.text();
    const body = JSON.parse(text) as { error: Record<string, unknown> };
    expect(response.status).toBe(500);
    expect(body.error).toEqual({
      message: 'The server had an error while processing your request. Sorry about that!',
      type: 'server_error',
      param: null,
      code: 'server_error',
    });
    expect(text).not.toMatch(/libsql|sqlite|closed|stack|at /i);
    expect(response.headers.get('x-should-retry')).toBeNull();
    const logged = broken.logs.map((line) => JSON.parse(line)).find((entry) => entry.level === 'error');
    expect(logged).toMatchObject({ message: 'request failed', request_id: requestId });
    expect(JSON.stringify(logged.error)).toMatch(/closed/i);
  });
});

describe('503 database_busy', () => {
  it('answers a write the database turned away (another process holds its lock past the busy timeout) with Retry-After, nothing of it written', async () => {
    // A real lock on the real file: another connection, as a second process (the CLI, a backup) would hold it.
    const holder = new Database(gateway.database.location);
    holder.exec('BEGIN IMMEDIATE');
    let response: Response;
    try {
      response = await gateway.request(PATH, {
        key: tenant.workspaceKey,
        body: { ...policy, name: 'written-while-locked' },
      });
    } finally {
      holder.exec('ROLLBACK');
      holder.close();
    }
    expect(response.headers.get('retry-after')).toBe('1');
    expect(response.headers.get('x-should-retry')).toBeNull();
    expect(await errorOf(response)).toMatchObject({
      status: 503,
      type: 'server_error',
      code: 'database_busy',
      param: null,
    });
    const logged = gateway.logs
      .map((line) => JSON.parse(line))
      .find((entry) => entry.level === 'error' && /SQLITE_BUSY|locked/i.test(JSON.stringify(entry.error)));
    expect(logged).toMatchObject({ message: 'request failed' });

    const listed = (await (await gateway.request(PATH, { key: tenant.workspaceKey })).json()) as {
      data: { name: string | null }[];
    };
    expect(listed.data.map((stored) => stored.name)).not.toContain('written-while-locked');
    // The retry the SDKs make succeeds once the lock is gone.
    const retried = await gateway.request(PATH, {
      key: tenant.workspaceKey,
      body: { ...policy, name: 'written-while-locked' },
    });
    expect(retried.status).toBe(200);
  }, 20_000);
});

describe('logs', () => {
  it('never contain statement parameters of a failed query', async () => {
    const broken = await createTestGateway();
    const brokenTenant = await broken.tenant();
    broken.database.close();
    await broken.request(PATH, { key: brokenTenant.workspaceKey, body: { ...policy, name: 'private-policy-name' } });
    await broken.request(PATH, { key: brokenTenant.workspaceKey });
    const logs = broken.logs.join('\n');
    expect(logs).toContain('request failed');
    expect(logs).not.toContain('params:');
    expect(logs).not.toContain(brokenTenant.workspaceKey);
    expect(logs).not.toMatch(/[0-9a-f]{64}/); // no key hash either
  });
});
