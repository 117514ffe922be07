import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { revokeApiKey } from '../../../src/resources/identities/api-keys';
import { apiRoutes, createTestGateway, errorOf, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * `Authorization: Bearer <gateway API key>`, what OpenAI's SDKs send from `apiKey` or
 * `OPENAI_API_KEY`, beside `x-gateway-api-key` (which wins when both are sent). test/resources/identities/api-key-auth.test.ts
 * holds the header's own suite.
 */

let gateway: TestGateway;
let tenant: Tenant;
let revokedKey: string;
const PROVIDER_KEY = 'sk-proj-' + 'q'.repeat(40);

beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
  const doomed = await gateway.tenant({ organisationId: tenant.organisationId });
  await revokeApiKey(gateway.database.db, doomed.workspaceKeyId, gateway.clock.now());
  revokedKey = doomed.workspaceKey;
});
afterAll(() => gateway.close());

const PATH = '/v1/policies/rate-limits';

function call(headers: Record<string, string>, path = PATH, method = 'GET') {
  return gateway.app.request(path, {
    method,
    headers: method === 'GET' ? headers : { ...headers, 'content-type': 'application/json' },
    body: method === 'GET' ? undefined : '{}',
  });
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

describe('Authorization: Bearer', () => {
  it('authenticates a workspace key and an organisation key, scheme in any case', async () => {
    for (const headers of [
      bearer(tenant.workspaceKey),
      bearer(tenant.orgKey),
      { authorization: `bearer ${tenant.workspaceKey}` },
      { authorization: `BEARER  ${tenant.workspaceKey} ` },
    ]) {
      const response = await call(headers);
      expect(response.status).toBe(200);
    }
    // A workspace-scoped route: the key's own workspace, as with the header.
    const assistants = await call(bearer(tenant.workspaceKey), '/v1/assistants');
    expect(assistants.status).toBe(200);
  });

  it('is refused on every /v1 route when the key is revoked, unknown or a provider key', async () => {
    const routes = apiRoutes(gateway.app).map(({ method, path }) => ({
      method,
      path: path.replace(/:(\w+)/g, (_m, name: string) => `${name}_0000000000000000`),
    }));
    expect(routes.length).toBeGreaterThanOrEqual(5);
    for (const key of [revokedKey, 'gk_' + 'A'.repeat(43), PROVIDER_KEY]) {
      for (const route of routes) {
        const error = await errorOf(await call(bearer(key), route.path, route.method));
        expect({ route, ...error }).toMatchObject({ route, status: 401, code: 'invalid_api_key', param: null });
      }
    }
  });

  it('tells a client that sent a provider key what to send instead, without repeating it', async () => {
    const response = await call(bearer(PROVIDER_KEY));
    const text = await response.clone().text();
    const error = await errorOf(response);
    expect(error).toMatchObject({ status: 401, code: 'invalid_api_key' });
    expect(error.message).toContain('not a gateway API key');
    expect(error.message).toContain("'Authorization: Bearer <key>'");
    expect(error.message).toContain("'x-gateway-api-key'");
    expect(error.message).toContain('virtual key');
    expect(text).not.toContain(PROVIDER_KEY);
    expect(text).not.toContain(PROVIDER_KEY.slice(0, 12));
    expect(gateway.logs.join('\n')).not.toContain(PROVIDER_KEY);
    // The same advice when the provider key comes in the header.
    const inHeader = await errorOf(await call({ 'x-gateway-api-key': PROVIDER_KEY }));
    expect(inHeader.message).toBe(error.message);
    // A gateway-shaped key that is wrong is the plain answer, as before.
    const unknown = await errorOf(await call(bearer('gk_' + 'B'.repeat(43))));
    expect(unknown.message).toBe('Incorrect, unknown or revoked API key provided.');
  });

  it('a revoked key stops working at once as a bearer token too', async () => {
    const fresh = await gateway.tenant();
    expect((await call(bearer(fresh.workspaceKey))).status).toBe(200);
    await revokeApiKey(gateway.database.db, fresh.workspaceKeyId, gateway.clock.now());
    expect(await errorOf(await call(bearer(fresh.workspaceKey)))).toMatchObject({
      status: 401,
      code: 'invalid_api_key',
    });
  });

  it('is missing when absent, empty or another scheme, and the message names both ways', async () => {
    const cases: Record<string, string>[] = [
      {},
      { authorization: '' },
      { authorization: 'Bearer ' },
      { authorization: `Basic ${btoa('user:pass')}` },
      { authorization: tenant.workspaceKey },
    ];
    for (const headers of cases) {
      const error = await errorOf(await call(headers));
      expect({ headers, ...error }).toMatchObject({ headers, status: 401, code: 'missing_api_key', param: null });
      expect(error.message).toContain("'Authorization: Bearer <key>'");
      expect(error.message).toContain("'x-gateway-api-key'");
    }
  });
});

describe('both x-gateway-api-key and Authorization', () => {
  it('uses the header and ignores the bearer token, whatever it holds', async () => {
    for (const token of [PROVIDER_KEY, revokedKey, 'garbage', tenant.orgKey]) {
      const response = await call({ 'x-gateway-api-key': tenant.workspaceKey, ...bearer(token) });
      expect(response.status).toBe(200);
    }
  });

  it('does not fall back to the bearer token when the header is wrong', async () => {
    for (const header of [revokedKey, 'gk_' + 'C'.repeat(43), PROVIDER_KEY]) {
      const error = await errorOf(await call({ 'x-gateway-api-key': header, ...bearer(tenant.workspaceKey) }));
      expect(error).toMatchObject({ status: 401, code: 'invalid_api_key' });
    }
  });

  it('uses the bearer token when the header is empty', async () => {
    const response = await call({ 'x-gateway-api-key': '', ...bearer(tenant.workspaceKey) });
    expect(response.status).toBe(200);
  });
});
