import OpenAI from 'openai';
import { fakeDirective, type FakeScenario, type FakeUpstreamServer } from '../../support/fake-upstream';
import type { Tenant, TestGateway } from '../../support/gateway';

/**
 * What the chat completions tests share: the official SDK configured as an application configures
 * it (a base URL and a key, its transport the in-process gateway), a tenant whose default virtual
 * key calls a fake provider, and the message that tells the fake how to answer.
 */

export const sdkClient = (gateway: TestGateway, tenant: Tenant) =>
  new OpenAI({
    apiKey: tenant.workspaceKey,
    baseURL: 'http://gateway.test/v1',
    maxRetries: 0,
    fetch: (url, init) => gateway.app.request(String(url), init),
  });

/** A new tenant whose default virtual key calls `provider`, with its SDK client. */
export async function tenantCalling(gateway: TestGateway, provider: FakeUpstreamServer) {
  const tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: provider.baseURL, default: true });
  return { tenant, slug, client: sdkClient(gateway, tenant) };
}

/** A user message that makes the fake answer with `scenario`. */
export const asking = (text: string, scenario?: FakeScenario) => ({
  role: 'user' as const,
  content: scenario ? `${text}\n${fakeDirective(scenario)}` : text,
});
