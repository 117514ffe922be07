import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { revokeApiKey } from '../../../src/resources/identities/api-keys';
import { apiRoutes, createTestGateway, errorOf, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * The auth suite for every protected route. The routes come from the app itself, so a route added
 * later is covered without touching this file.
 */

let gateway: TestGateway;
let tenant: Tenant;
let revokedKey: string;
beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
  const doomed = await gateway.tenant({ organisationId: tenant.organisationId });
  await revokeApiKey(gateway.database.db, doomed.workspaceKeyId, gateway.clock.now());
  revokedKey = doomed.workspaceKey;
});
afterAll(() => gateway.close());

function protectedRoutes() {
  // Path parameters get a plausible value: auth must fail before anything looks them up.
  return apiRoutes(gateway.app).map(({ method, path }) => ({
    method,
    path: path.replace(/:(\w+)/g, (_m, name: string) => `${name}_0000000000000000`),
  }));
}

describe('x-gateway-api-key on every /v1 route', () => {
  it('covers the routes of the app', () => {
    const names = protectedRoutes().map((route) => `${route.method} ${route.path}`);
    expect(names).toContain('GET /v1/policies/rate-limits');
    expect(names).toContain('POST /v1/policies/rate-limits');
    expect(names.length).toBeGreaterThanOrEqual(5);
  });

  const cases: [string, () => string | undefined, string][] = [
    ['missing', () => undefined, 'missing_api_key'],
    ['empty', () => '', 'missing_api_key'],
    ['unknown', () => 'gk_' + 'A'.repeat(43), 'invalid_api_key'],
    ['not a gateway key', () => 'sk-proj-abc123', 'invalid_api_key'],
    [
      'a workspace key with a character changed',
      () => tenant.workspaceKey.slice(0, -1) + (tenant.workspaceKey.endsWith('A') ? 'B' : 'A'),
      'invalid_api_key',
    ],
    ['revoked', () => revokedKey, 'invalid_api_key'],
  ];

  for (const [name, key, code] of cases) {
    it(`answers 401 ${code} when the key is ${name}`, async () => {
      for (const route of protectedRoutes()) {
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        const value = key();
        if (value !== undefined) headers['x-gateway-api-key'] = value;
        const response = await gateway.app.request(route.path, {
          method: route.method,
          headers,
          body: route.method === 'GET' ? undefined : '{}',
        });
        const error = await errorOf(response);
        expect({ route, ...error }).toMatchObject({ route, status: 401, code, param: null });
        expect(response.headers.get('x-gateway-request-id')).toMatch(/^req_/);
      }
    });
  }

  it('never echoes the presented key', async () => {
    const presented = 'gk_' + 'Z'.repeat(43);
    const response = await gateway.request('/v1/policies/rate-limits', { key: presented });
    expect(await response.text()).not.toContain(presented);
    expect(gateway.logs.join('\n')).not.toContain(presented);
  });

  it('lets the same request through with a valid workspace key and organisation key', async () => {
    for (const key of [tenant.workspaceKey, tenant.orgKey]) {
      const response = await gateway.request('/v1/policies/rate-limits', { key });
      expect(response.status).toBe(200);
    }
  });

  it('stops a key as soon as it is revoked', async () => {
    const fresh = await gateway.tenant();
    expect((await gateway.request('/v1/policies/rate-limits', { key: fresh.workspaceKey })).status).toBe(200);
    await revokeApiKey(gateway.database.db, fresh.workspaceKeyId, gateway.clock.now());
    const error = await errorOf(await gateway.request('/v1/policies/rate-limits', { key: fresh.workspaceKey }));
    expect(error).toMatchObject({ status: 401, code: 'invalid_api_key' });
    // The organisation key of the same organisation is unaffected.
    expect((await gateway.request('/v1/policies/rate-limits', { key: fresh.orgKey })).status).toBe(200);
  });
});
