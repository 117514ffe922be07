import { fakeDirective, type FakeScenario, type FakeUpstreamServer } from '../../support/fake-upstream';
import { sdkClient, type TestGateway } from '../../support/gateway';

/**
 * What the chat completions tests share: a tenant whose default virtual key calls a fake provider,
 * with the official SDK configured as an application configures it (support/gateway.ts's
 * sdkClient), and the message that tells the fake how to answer.
 */

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
