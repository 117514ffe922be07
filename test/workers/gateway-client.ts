import { exports } from 'cloudflare:workers';
import OpenAI from 'openai';
import { expect, inject } from 'vitest';

/**
 * What the workerd tests reach the Worker under test with: its entry (a service binding to its
 * default export) called as an application's SDK calls its base URL.
 */

/** The official SDK configured as an application is, by base URL and these headers, never retrying. */
export function gatewayClient(headers: Record<string, string>): OpenAI {
  return new OpenAI({
    apiKey: 'unused-by-the-gateway',
    baseURL: 'http://gateway/v1',
    defaultHeaders: headers,
    maxRetries: 0,
    fetch: (url, init) => exports.default.fetch(url, init),
  });
}

/**
 * A virtual key of the workspace to the fake provider in Node (test/support/workers-global-setup.ts),
 * created through the API as a user would (the fake listens on loopback, which
 * GATEWAY_ALLOW_PRIVATE_UPSTREAMS allows here), with `fields` besides; answers the key as created.
 */
export async function fakeProviderKey(
  workspaceKey: string,
  slug: string,
  fields: Record<string, unknown> = {},
): Promise<unknown> {
  const created = await exports.default.fetch('http://gateway/v1/virtual-keys', {
    method: 'POST',
    headers: { 'x-gateway-api-key': workspaceKey, 'content-type': 'application/json' },
    body: JSON.stringify({
      slug,
      provider: 'openai',
      base_url: inject('upstreamUrl'),
      api_key: 'sk-fake-provider-key',
      ...fields,
    }),
  });
  expect(created.status).toBe(200);
  return created.json();
}
