import type OpenAI from 'openai';
import { startFakeUpstream, type FakeUpstreamServer } from './fake-upstream';
import { createTestGateway, type Tenant, type TestGateway } from './gateway';

/** The function tool of the runs suites, which the fake calls when a `#fake` directive says so. */
export const WEATHER_TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

export interface RunsSetup {
  fake: FakeUpstreamServer;
  gateway: TestGateway;
  tenant: Tenant;
  /** The tenant's workspace key and its virtual key `fake`, whose base_url is the fake provider. */
  headers: Record<string, string>;
  /** The official SDK with those headers. */
  openai: OpenAI;
  /** An assistant of the fake model with WEATHER_TOOL. */
  assistantId: string;
}

/**
 * What a file of runs starts from (in its beforeAll): the fake provider, a gateway with one tenant
 * whose virtual key calls it, and an assistant. The file closes `gateway` and `fake` after all.
 */
export async function startRunsSetup(assistant: { name?: string; instructions: string }): Promise<RunsSetup> {
  const fake = await startFakeUpstream();
  const gateway = await createTestGateway();
  const tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL, slug: 'fake' });
  const headers = { 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug };
  const openai = gateway.openai(headers);
  const { id } = await openai.beta.assistants.create({ model: 'fake-model', ...assistant, tools: [WEATHER_TOOL] });
  return { fake, gateway, tenant, headers, openai, assistantId: id };
}
