import { defined } from '../support/defined';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstreamServer } from '../support/fake-upstream';
import { createTestGateway, serveOverHttp, type Tenant, type TestGateway } from '../support/gateway';

/**
 * `OPENAI_BASE_URL=<gateway>/v1 OPENAI_API_KEY=<gateway key>` is all an application sets: the
 * official SDK built from those two alone (no default headers, no custom fetch), over real HTTP to
 * the gateway served as `npm start` serves it, its runs resolved to a virtual key by the workspace
 * (its default key, or the key whose models match).
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let served: { url: string; close(): Promise<void> };
let baseURL: string;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
  served = await serveOverHttp(gateway);
  baseURL = `${served.url}/v1`;
});
afterAll(async () => {
  await served.close();
  await gateway.close();
  await fake.close();
});

/** A workspace whose only virtual key is given `routing` (its default, or models), with its provider key. */
async function workspace(
  routing: { default: true } | { models: string[] },
): Promise<{ tenant: Tenant; providerKey: string }> {
  const tenant = await gateway.tenant();
  const providerKey = `sk-drop-in-${crypto.randomUUID()}`;
  const response = await gateway.request('/v1/virtual-keys', {
    key: tenant.workspaceKey,
    body: { slug: 'provider', provider: 'openai', base_url: fake.baseURL, api_key: providerKey, ...routing },
  });
  expect(response.status).toBe(200);
  return { tenant, providerKey };
}

/** The quickstart: an assistant, a thread run to its end, its messages. */
async function quickstart(client: OpenAI, model: string) {
  const assistant = await client.beta.assistants.create({ model, name: 'Drop-in', instructions: 'Answer briefly.' });
  expect(await client.beta.assistants.retrieve(assistant.id)).toMatchObject({ id: assistant.id, model });
  const marker = crypto.randomUUID();
  const run = await client.beta.threads.createAndRunPoll(
    { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: `Hello ${marker}` }] } },
    { pollIntervalMs: 50 },
  );
  expect(run).toMatchObject({ status: 'completed', model });
  const messages = await client.beta.threads.messages.list(run.thread_id);
  expect(messages.data.map((message) => message.role)).toEqual(['assistant', 'user']);
  const answer = defined(messages.data[0]).content[0];
  expect(answer?.type === 'text' && answer.text.value).toBe(`You said: Hello ${marker}`);
  return fake.requests.find((request) => request.rawBody.includes(marker));
}

describe('a client configured by base URL and API key alone', () => {
  it('runs the quickstart against a workspace whose virtual key is its default', async () => {
    const { tenant, providerKey } = await workspace({ default: true });
    const client = new OpenAI({ baseURL, apiKey: tenant.workspaceKey });
    const upstream = await quickstart(client, 'gpt-4o');
    expect(upstream?.headers.authorization).toBe(`Bearer ${providerKey}`);
  });

  it('runs the quickstart against a workspace whose virtual key matches the model', async () => {
    const { tenant, providerKey } = await workspace({ models: ['llama3.*'] });
    const client = new OpenAI({ baseURL, apiKey: tenant.workspaceKey });
    const upstream = await quickstart(client, 'llama3.2');
    expect(upstream?.headers.authorization).toBe(`Bearer ${providerKey}`);
    // A model no key serves: the SDK's BadRequestError, saying what the workspace serves and how to configure one.
    const other = await client.beta.assistants.create({ model: 'qwen2.5' });
    const refused = await client.beta.threads
      .createAndRun({ assistant_id: other.id, thread: { messages: [{ role: 'user', content: 'hi' }] } })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toContain(
      "Its virtual keys serve 'llama3.*'.",
    );
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('{"models":[…,"qwen2.5"]}');
  });

  it('reads OPENAI_BASE_URL and OPENAI_API_KEY from the environment', async () => {
    const { tenant } = await workspace({ default: true });
    const saved = { base: process.env.OPENAI_BASE_URL, key: process.env.OPENAI_API_KEY };
    process.env.OPENAI_BASE_URL = baseURL;
    process.env.OPENAI_API_KEY = tenant.workspaceKey;
    try {
      await quickstart(new OpenAI(), 'gpt-4o-mini');
    } finally {
      restore('OPENAI_BASE_URL', saved.base);
      restore('OPENAI_API_KEY', saved.key);
    }
  });

  it('is told what to do when its key is a provider key', async () => {
    const client = new OpenAI({ baseURL, apiKey: 'sk-proj-not-a-gateway-key', maxRetries: 0 });
    const error = await client.beta.assistants.list().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((error as InstanceType<typeof OpenAI.AuthenticationError>).message).toContain('not a gateway API key');
  });
});

function restore(name: string, value: string | undefined) {
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
}
