import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defined } from '../support/defined';
import { fakeDirective, startFakeUpstream, type FakeUpstreamServer } from '../support/fake-upstream';
import { createTestGateway, serveOverHttp, type TestGateway } from '../support/gateway';

/**
 * LangChain JS's OpenAI integration as an application uses it (ChatOpenAI, OpenAIEmbeddings):
 * `OPENAI_BASE_URL` and `OPENAI_API_KEY` in the environment, the models built with nothing but a model name, over real
 * HTTP to the gateway, whose workspace sends them to its default virtual key.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let served: { url: string; close(): Promise<void> };
const saved = { OPENAI_BASE_URL: process.env.OPENAI_BASE_URL, OPENAI_API_KEY: process.env.OPENAI_API_KEY };
const PROVIDER_KEY = 'sk-langchain-provider';

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
  served = await serveOverHttp(gateway);
  const tenant = await gateway.tenant();
  const response = await gateway.request('/v1/virtual-keys', {
    key: tenant.workspaceKey,
    body: { slug: 'provider', provider: 'openai', base_url: fake.baseURL, api_key: PROVIDER_KEY, default: true },
  });
  expect(response.status).toBe(200);
  process.env.OPENAI_BASE_URL = `${served.url}/v1`;
  process.env.OPENAI_API_KEY = tenant.workspaceKey;
});
afterAll(async () => {
  for (const [name, value] of Object.entries(saved)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  await served.close();
  await gateway.close();
  await fake.close();
});

describe("LangChain's ChatOpenAI, configured by the environment alone", () => {
  it('invokes, streams and calls a tool through the workspace default key', async () => {
    const model = new ChatOpenAI({ model: 'gpt-4o-mini', maxRetries: 0 });

    const answer = await model.invoke('Name a colour.');
    expect(answer.content).toBe('You said: Name a colour.');
    expect(answer.usage_metadata?.total_tokens).toBeGreaterThan(0);

    let streamed = '';
    for await (const chunk of await model.stream('Count to three.')) streamed += String(chunk.content);
    expect(streamed).toBe('You said: Count to three.');

    const withTool = model.bindTools([
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'The weather in a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ]);
    const called = await withTool.invoke(
      `Weather in Oslo?\n${fakeDirective({ tool_calls: [{ name: 'get_weather', arguments: { city: 'Oslo' } }] })}`,
    );
    expect(called.tool_calls).toEqual([expect.objectContaining({ name: 'get_weather', args: { city: 'Oslo' } })]);

    const sent = fake.requests.filter((request) => request.path === '/v1/chat/completions');
    expect(sent).toHaveLength(3);
    expect(sent.every((request) => request.headers.authorization === `Bearer ${PROVIDER_KEY}`)).toBe(true);
    expect(defined(sent[1]?.body).stream).toBe(true);
  });
});

describe("LangChain's OpenAIEmbeddings, configured by the environment alone", () => {
  it('embeds documents and a query through the workspace default key', async () => {
    const embeddings = new OpenAIEmbeddings({ model: 'text-embedding-3-small', dimensions: 16, maxRetries: 0 });
    const documents = await embeddings.embedDocuments(['the first', 'the second']);
    expect(documents).toHaveLength(2);
    expect(documents.every((vector) => vector.length === 16 && vector.every(Number.isFinite))).toBe(true);
    const query = await embeddings.embedQuery('the first');
    // The fake's vectors are a function of the text: the same text, the same vector.
    expect(query).toEqual(documents[0]);
    const sent = fake.requests.filter((request) => request.path === '/v1/embeddings');
    expect(sent.map((request) => defined(request.body).input)).toEqual([['the first', 'the second'], 'the first']);
    expect(sent.every((request) => request.headers.authorization === `Bearer ${PROVIDER_KEY}`)).toBe(true);
  });
});
