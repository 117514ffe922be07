import { defined } from '../support/defined';
import { exports } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';
import openApiDocument from '../../src/http/openapi/assets/openapi.json';
import { DOCS_SCRIPT } from '../../src/http/openapi/docs-page';
import { errorOf, json } from '../support/envelope';

/**
 * The Worker entry inside workerd (the same runtime as production), against a real sqld migrated
 * and given a tenant by test/support/workers-global-setup.ts. What the Node suite proves in depth, proven here on
 * the Workers runtime: the libsql/web driver, WebCrypto key hashing, zod, the envelope, the body
 * limit on Workers' streams. GATEWAY_MAX_BODY_BYTES is 2048 here (vitest.config.ts).
 */

const tenant = inject('workersTenant');
const PATH = '/v1/policies/rate-limits';
const LIMIT = 2048;

const policy = {
  conditions: [{ key: 'model', value: 'gpt-4o' }],
  group_by: [{ key: 'api_key' }],
  type: 'requests',
  unit: 'rpm',
  value: 60,
};

interface Call {
  method?: string;
  key?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

function call(path: string, { method, key, body, headers = {} }: Call = {}) {
  const sent: Record<string, string> = { ...headers };
  if (key !== undefined) sent['x-gateway-api-key'] = key;
  let payload: string | undefined;
  if (body !== undefined) {
    payload = typeof body === 'string' ? body : JSON.stringify(body);
    sent['content-type'] ??= 'application/json';
  }
  return exports.default.fetch(`http://gateway${path}`, {
    method: method ?? (payload === undefined ? 'GET' : 'POST'),
    headers: sent,
    body: payload,
  });
}

async function createPolicy(body: Record<string, unknown>, key = tenant.workspaceKey): Promise<string> {
  const response = await call(PATH, { key, body });
  expect(response.status).toBe(200);
  const created = await json(response);
  expect(created).toEqual({ id: expect.any(String), object: 'policy_usage_limits' });
  return created.id;
}

describe('policies on workerd', () => {
  it('creates a policy with a workspace key and reads it back', async () => {
    const id = await createPolicy({ ...policy, name: 'workers create' });
    const read = await json(await call(`${PATH}/${id}`, { key: tenant.workspaceKey }));
    expect(read).toEqual({
      id,
      type: 'requests',
      unit: 'rpm',
      value: 60,
      status: 'active',
      workspace_id: tenant.workspace.id,
      organisation_id: tenant.organisationId,
      created_at: expect.any(String),
      last_updated_at: expect.any(String),
      name: 'workers create',
      conditions: [{ key: 'model', value: 'gpt-4o' }],
      group_by: [{ key: 'api_key' }],
      created_by: 'workspace',
    });
  });

  it('creates with an organisation key naming workspace and organisation, and lists newest first', async () => {
    const first = await createPolicy({ ...policy, type: 'tokens', unit: 'rpd', value: 1000, name: 'first' });
    const second = await createPolicy(
      {
        ...policy,
        type: 'tokens',
        unit: 'rpd',
        value: 2000,
        name: 'second',
        workspace_id: tenant.workspace.slug,
        organisation_id: tenant.organisationId,
      },
      tenant.orgKey,
    );
    for (const [key, query] of [
      [tenant.workspaceKey, ''],
      [tenant.orgKey, `&workspace_id=${tenant.workspace.id}`],
    ] as const) {
      const list = await json(await call(`${PATH}?type=tokens&unit=rpd&page_size=1000${query}`, { key }));
      expect(list.object).toBe('list');
      const ids = list.data.map((item: { id: string }) => item.id);
      // Newest first; other tests may add policies of their own around these two.
      expect(ids.indexOf(second)).toBeGreaterThanOrEqual(0);
      expect(ids.indexOf(second)).toBeLessThan(ids.indexOf(first));
      expect(list.total).toBe(list.data.length);
      expect(
        list.data.every((item: { type: string; unit: string }) => item.type === 'tokens' && item.unit === 'rpd'),
      ).toBe(true);
    }
  });

  it('refuses invalid input with a 400 naming the field, and writes nothing', async () => {
    const before = (await json(await call(`${PATH}?page_size=0`, { key: tenant.workspaceKey }))).total;
    const error = await errorOf(
      await call(PATH, { key: tenant.workspaceKey, body: { ...policy, conditions: [{ key: 'user', value: 'x' }] } }),
    );
    expect(error).toMatchObject({ status: 400, code: 'invalid_value', param: 'conditions[0].key' });
    const missing = await errorOf(await call(PATH, { key: tenant.workspaceKey, body: { ...policy, type: undefined } }));
    expect(missing).toMatchObject({ status: 400, code: 'missing_required_parameter', param: 'type' });
    expect((await json(await call(`${PATH}?page_size=0`, { key: tenant.workspaceKey }))).total).toBe(before);
  });

  it('serves many concurrent requests of one isolate on its shared database client', async () => {
    const responses = await Promise.all(
      Array.from({ length: 40 }, () => call(`${PATH}?page_size=1`, { key: tenant.workspaceKey })),
    );
    expect(responses.map((response) => response.status)).toEqual(responses.map(() => 200));
    await Promise.all(responses.map((response) => response.arrayBuffer()));
  });
});

describe('x-gateway-api-key on the policy routes', () => {
  const routes = [
    ['GET', PATH],
    ['POST', PATH],
    ['GET', `${PATH}/id_0000000000000000`],
    ['PUT', `${PATH}/id_0000000000000000`],
    ['DELETE', `${PATH}/id_0000000000000000`],
  ] as const;
  const cases: [string, string | undefined, string][] = [
    ['missing', undefined, 'missing_api_key'],
    ['empty', '', 'missing_api_key'],
    ['unknown', 'gk_' + 'A'.repeat(43), 'invalid_api_key'],
    ['not a gateway key', 'sk-proj-abc123', 'invalid_api_key'],
    ['a workspace key with a character changed', changeLast(tenant.workspaceKey), 'invalid_api_key'],
    ['revoked', tenant.revokedKey, 'invalid_api_key'],
  ];

  for (const [name, key, code] of cases) {
    it(`answers 401 ${code} when the key is ${name}`, async () => {
      for (const [method, path] of routes) {
        const response = await call(path, { method, key, body: method === 'GET' ? undefined : {} });
        expect(response.headers.get('x-gateway-request-id')).toMatch(/^req_/);
        expect({ method, path, ...(await errorOf(response)) }).toMatchObject({
          method,
          path,
          status: 401,
          code,
          param: null,
        });
      }
    });
  }

  it('lets a valid workspace key and organisation key through', async () => {
    for (const key of [tenant.workspaceKey, tenant.orgKey]) {
      expect((await call(PATH, { key })).status).toBe(200);
    }
  });
});

describe('the error envelope on workerd', () => {
  it('404s unknown routes, inside and outside /v1', async () => {
    const outside = await errorOf(await call('/nope', { key: tenant.workspaceKey }));
    expect(outside).toMatchObject({ status: 404, code: 'route_not_found', type: 'invalid_request_error', param: null });
    const inside = await errorOf(await call('/v1/nope', { key: tenant.workspaceKey }));
    expect(inside).toMatchObject({
      status: 404,
      code: 'unsupported_endpoint',
      type: 'invalid_request_error',
      param: null,
    });
    const unknownId = await errorOf(
      await call(`${PATH}/00000000-0000-4000-8000-000000000000`, { key: tenant.workspaceKey }),
    );
    expect(unknownId.status).toBe(404);
  });

  it('405s a known path with another method, with Allow', async () => {
    const response = await call(PATH, { key: tenant.workspaceKey, method: 'PATCH', body: {} });
    expect(response.headers.get('allow')).toBe('GET, HEAD, POST');
    expect(await errorOf(response)).toMatchObject({ status: 405, code: 'method_not_allowed' });
  });

  it('413s a body over the limit, declared or streamed without a length', async () => {
    const big = JSON.stringify({ ...policy, name: 'n'.repeat(LIMIT) });
    const declared = await call(PATH, { key: tenant.workspaceKey, body: big });
    expect(await errorOf(declared)).toMatchObject({ status: 413, code: 'payload_too_large' });

    // A body without a length, written as the gateway reads it: once it has refused, the rest
    // cannot be written, and the writer is told so (rather than workerd logging it as unhandled).
    const { readable, writable } = new IdentityTransformStream();
    const writer = writable.getWriter();
    const writing = (async () => {
      const chunk = new TextEncoder().encode(' '.repeat(512));
      for (let i = 0; i < 10; i++) await writer.write(chunk);
      await writer.close();
    })().catch(() => 'refused');
    const streamed = await exports.default.fetch(`http://gateway${PATH}`, {
      method: 'POST',
      headers: { 'x-gateway-api-key': tenant.workspaceKey, 'content-type': 'application/json' },
      body: readable,
    });
    expect(await errorOf(streamed)).toMatchObject({ status: 413, code: 'payload_too_large' });
    await writing;
  });

  it('415s a body that is not JSON, 400s malformed JSON', async () => {
    const form = await call(PATH, {
      key: tenant.workspaceKey,
      body: 'type=requests',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(await errorOf(form)).toMatchObject({ status: 415, code: 'unsupported_media_type' });
    const broken = await call(PATH, { key: tenant.workspaceKey, body: '{"name": ' });
    expect(await errorOf(broken)).toMatchObject({ status: 400, code: 'invalid_json', param: null });
  });

  it('gives every response its own request id, also as x-request-id', async () => {
    const responses = [
      await call('/health'),
      await call(PATH, { key: tenant.workspaceKey }),
      await call(PATH, { key: tenant.workspaceKey, body: {} }),
      await call(PATH),
      await call('/nope'),
    ];
    const ids = responses.map((response) => response.headers.get('x-gateway-request-id'));
    for (const [i, response] of responses.entries()) {
      expect(ids[i]).toMatch(/^req_[A-Za-z0-9]{24}$/);
      expect(response.headers.get('x-request-id')).toBe(ids[i]);
      await response.arrayBuffer();
    }
    expect(new Set(ids).size).toBe(ids.length);
    // code_interpreter as the configuration's sandbox answers (test/workers/configuration.test.ts).
    expect(await json(await call('/health'))).toEqual({ status: 'ok', code_interpreter: expect.any(Boolean) });
  });

  it('ends every JSON answer with a newline, errors included, and says that the API is under /v1', async () => {
    const responses = [
      await call('/health'),
      await call(PATH, { key: tenant.workspaceKey }),
      await call(PATH, { key: tenant.workspaceKey, body: {} }),
      await call(PATH),
      await call('/assistants'),
    ];
    expect(responses.map((response) => response.status)).toEqual([200, 200, 400, 401, 404]);
    const texts = await Promise.all(responses.map((response) => response.text()));
    for (const text of texts) expect(text).toMatch(/}\n$/);
    expect(JSON.parse(defined(texts[4])).error.message).toContain(
      "The API is served under /v1: a client's base URL ends in /v1",
    );
  });
});

describe('GET /openapi.json on workerd', () => {
  it('serves the generated document from the static assets, through the app, as Node does', async () => {
    const response = await call('/openapi.json');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('application/json');
    expect(response.headers.get('x-gateway-request-id')).toMatch(/^req_/);
    expect(await response.text()).toBe(`${JSON.stringify(openApiDocument)}\n`);
    // Read once per isolate: the second answer is the same.
    expect(await json(await call('/openapi.json'))).toEqual(openApiDocument);
    const post = await call('/openapi.json', { body: {} });
    expect(await errorOf(post)).toMatchObject({ status: 405, code: 'method_not_allowed' });
  });
});

describe('GET /docs on workerd', () => {
  it('serves the reference page and its script from the static assets, as Node does', async () => {
    const page = await call('/docs');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await page.text()).toContain(`<script src="/docs/${DOCS_SCRIPT.file}" integrity="${DOCS_SCRIPT.integrity}"`);
    const script = await call(`/docs/${DOCS_SCRIPT.file}`);
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(script.headers.get('x-gateway-request-id')).toMatch(/^req_/);
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-384', await script.arrayBuffer()));
    expect(`sha384-${btoa(String.fromCharCode(...digest))}`).toBe(DOCS_SCRIPT.integrity);
    expect((await call('/docs/openapi.json')).status).toBe(404);
  });
});

function changeLast(key: string): string {
  return key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A');
}
