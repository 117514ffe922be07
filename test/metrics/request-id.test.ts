import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestGateway, errorOf, type Tenant, type TestGateway } from '../support/gateway';
import { MAX_REQUEST_ID_CHARS } from '../../src/http/middleware/request-id';

/**
 * A client's X-Request-Id is kept and echoed when it is a valid id, replaced (never refused) when
 * it is not, and the access log says which id the request had and where it came from.
 */

let gateway: TestGateway;
let tenant: Tenant;

beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
});
afterAll(() => gateway?.close());

async function withId(id: string) {
  const response = await gateway.request('/v1/assistants', {
    key: tenant.workspaceKey,
    headers: { 'x-request-id': id },
  });
  expect(response.status).toBe(200);
  const used = response.headers.get('x-request-id');
  expect(response.headers.get('x-gateway-request-id')).toBe(used);
  const line = gateway.logs
    .map((text) => JSON.parse(text) as Record<string, unknown>)
    .find((entry) => entry.request_id === used && entry.message === 'request');
  return { used, line };
}

describe('X-Request-Id', () => {
  it.each([
    ['a UUID', '3f1c2e4a-9b7d-4c2e-8f3a-1b2c3d4e5f60'],
    ['a prefixed id', 'req_abc.DEF:42'],
    ['base64 with its padding', 'ab+/cd=='],
    ['the longest kept', 'x'.repeat(MAX_REQUEST_ID_CHARS)],
  ])('keeps and echoes %s, and logs it as the client’s', async (_, id) => {
    const { used, line } = await withId(id);
    expect(used).toBe(id);
    expect(line).toMatchObject({ request_id: id, request_id_source: 'client', status: 200 });
  });

  it.each([
    ['one too long', 'x'.repeat(MAX_REQUEST_ID_CHARS + 1)],
    ['one with a space', 'a b'],
    ['one with a quote', 'a"b'],
    ['one with a line break escaped by the client', 'a\\nb'],
    ['one with non-ASCII text', 'réq'],
    ['an empty one', ''],
  ])('replaces %s with its own, and logs the id it used', async (_, id) => {
    const { used, line } = await withId(id);
    expect(used).toMatch(/^req_[0-9A-Za-z]{24}$/);
    expect(line).toMatchObject({ request_id: used, request_id_source: 'replaced' });
    expect(JSON.stringify(line)).not.toContain(id || '""');
  });

  it('makes one when none is sent, and gives every request its own', async () => {
    const [a, b] = await Promise.all([gateway.request('/health'), gateway.request('/health')]);
    expect(a?.headers.get('x-request-id')).toMatch(/^req_/);
    expect(a?.headers.get('x-request-id')).not.toBe(b?.headers.get('x-request-id'));
    const line = gateway.logs
      .map((text) => JSON.parse(text) as Record<string, unknown>)
      .find((entry) => entry.request_id === a?.headers.get('x-request-id'));
    expect(line).toMatchObject({ request_id_source: 'gateway' });
  });

  it('keeps the id on an error, in the header the SDK reads', async () => {
    const response = await gateway.request('/v1/assistants', { headers: { 'x-request-id': 'client-id-1' } });
    expect(response.status).toBe(401);
    expect(response.headers.get('x-request-id')).toBe('client-id-1');
    expect((await errorOf(response)).code).toBe('missing_api_key');
  });
});
