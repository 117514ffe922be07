import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defined } from '../../support/defined';
import { errorOf, json } from '../../support/envelope';
import {
  completionTokens,
  promptTokens,
  startFakeUpstream,
  type FakeUpstreamServer,
  type RecordedRequest,
} from '../../support/fake-upstream';
import { createTestGateway, sdkClient, type Tenant, type TestGateway } from '../../support/gateway';
import { componentErrors } from '../../support/openapi';
import { createPolicy, expectRefused, freshMinute, usedBy } from '../../support/ratelimit';
import { waitFor } from '../../support/wait';
import { asking, tenantCalling } from './clients';

/**
 * POST /v1/chat/completions passed through to the provider of the caller's virtual key, through the
 * official SDK configured only by base URL and key (its transport the in-process gateway), against
 * the fake provider over HTTP: answers as the provider sent them, fields passed on unchanged, the
 * usage chunk the gateway asks for withheld from a client that did not, policies, usage, and the
 * provider's refusals in the one envelope.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
/** A provider that takes only PROVIDER_KEY. */
let guarded: FakeUpstreamServer;
const PROVIDER_KEY = 'sk-test-provider-key';

beforeAll(async () => {
  fake = await startFakeUpstream();
  guarded = await startFakeUpstream({ apiKey: 'sk-the-only-key-it-takes' });
  gateway = await createTestGateway();
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
  await guarded.close();
});

const clientOf = (tenant: Tenant) => sdkClient(gateway, tenant);
const tenantWith = (provider: FakeUpstreamServer = fake) => tenantCalling(gateway, provider);

/** What the provider received last for this tenant's key (the fake records every request). */
function lastReceived(provider: FakeUpstreamServer = fake): RecordedRequest {
  return defined(provider.requests.at(-1));
}

/** The tenant's chat_completions usage this hour, from GET /v1/usage. */
async function usageOf(tenant: Tenant) {
  const response = await gateway.request('/v1/usage?bucket_width=1h&limit=1&group_by=kind', {
    key: tenant.workspaceKey,
  });
  expect(response.status).toBe(200);
  const [bucket] = (await json(response)).data;
  return bucket.results.find((result: { kind: string }) => result.kind === 'chat_completions') ?? null;
}

const TOOLS = [
  {
    type: 'function' as const,
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

describe('answers', () => {
  it('a non-streamed completion is the provider JSON, and every field reaches the provider unchanged', async () => {
    const { client } = await tenantWith();
    // Fields the gateway never reads, an image part and a field no SDK knows: all passed on as sent.
    const passedOn = {
      seed: 7,
      logprobs: true,
      top_logprobs: 2,
      n: 1,
      temperature: 0.3,
      response_format: { type: 'json_object' as const },
      metadata: { team: 'search' },
      user: 'someone',
      x_provider_specific: { beam: [1, 2, { deep: null }] },
    };
    const messages = [
      { role: 'system' as const, content: 'Be brief.' },
      {
        role: 'user' as const,
        content: [
          { type: 'text' as const, text: 'What is in this picture' },
          { type: 'image_url' as const, image_url: { url: 'https://example.com/cat.png', detail: 'low' as const } },
        ],
      },
    ];
    const completion = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages,
      max_completion_tokens: 50,
      ...passedOn,
    });
    const received = lastReceived();
    expect(received.body).toEqual({ model: 'gpt-4o-mini', messages, max_completion_tokens: 50, ...passedOn });
    expect(received.headers.authorization).toBe(`Bearer ${PROVIDER_KEY}`);
    expect(componentErrors('CreateChatCompletionResponse', completion)).toEqual([]);
    const reply = defined(completion.choices[0]).message.content ?? '';
    expect(JSON.parse(reply)).toEqual({ reply: 'You said: What is in this picture' });
    expect(completion.usage).toMatchObject({
      prompt_tokens: promptTokens(messages),
      completion_tokens: completionTokens(reply),
    });
  });

  it('a streamed completion is relayed chunk by chunk, without the usage chunk the client did not ask for', async () => {
    const { tenant, client } = await tenantWith();
    const stream = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('hello there', { reply: 'One two three four' })],
      stream: true,
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.flatMap((chunk) => componentErrors('CreateChatCompletionStreamResponse', chunk))).toEqual([]);
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('')).toBe('One two three four');
    expect(chunks.every((chunk) => chunk.choices.length === 1)).toBe(true);
    expect(chunks.some((chunk) => chunk.usage)).toBe(false);
    // The gateway asked for usage all the same, and counted it.
    expect(lastReceived().body?.stream_options).toEqual({ include_usage: true });
    const usage = await waitFor(
      () => usageOf(tenant),
      (result) => result !== null,
    );
    expect(usage).toMatchObject({ num_requests: 1, output_tokens: 4 });
  });

  it('a streamed tool call, with the usage chunk a client that asks for it gets', async () => {
    const { client } = await tenantWith();
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    const runner = client.chat.completions.stream({
      model: 'gpt-4o',
      messages: [asking('weather in Paris?', { tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] })],
      tools: TOOLS,
      tool_choice: 'required',
      stream_options: { include_usage: true },
    });
    runner.on('chunk', (chunk) => chunks.push(chunk));
    const completion = await runner.finalChatCompletion();
    expect(chunks.flatMap((chunk) => componentErrors('CreateChatCompletionStreamResponse', chunk))).toEqual([]);
    const message = defined(completion.choices[0]).message;
    expect(message.tool_calls).toEqual([
      expect.objectContaining({ type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }),
    ]);
    expect(defined(completion.choices[0]).finish_reason).toBe('tool_calls');
    const last = defined(chunks.at(-1));
    expect(last.choices).toEqual([]);
    expect(last.usage?.completion_tokens).toBeGreaterThan(0);
    expect(lastReceived().body).toMatchObject({ tools: TOOLS, tool_choice: 'required' });
  });

  it("structured output: a json_schema response_format reaches the provider, and the SDK's parse reads its answer", async () => {
    const { client } = await tenantWith();
    const schema = {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city', 'days'],
      additionalProperties: false,
    };
    const completion = await client.chat.completions.parse({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'The forecast for Oslo, please.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'forecast', schema, strict: true } },
    });
    expect(lastReceived().body?.response_format).toEqual({
      type: 'json_schema',
      json_schema: { name: 'forecast', schema, strict: true },
    });
    const parsed = defined(completion.choices[0]).message.parsed;
    expect(parsed).toEqual({ city: expect.any(String), days: expect.any(Number) });
  });

  it('a non-streamed tool call', async () => {
    const { client } = await tenantWith();
    const completion = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('weather in Oslo?', { tool_calls: [{ name: 'get_weather', arguments: { city: 'Oslo' } }] })],
      tools: TOOLS,
    });
    expect(componentErrors('CreateChatCompletionResponse', completion)).toEqual([]);
    const choice = defined(completion.choices[0]);
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls?.[0]).toMatchObject({
      function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
    });
  });
});

describe('a client that leaves', () => {
  it('mid-stream ends the provider call at once, and the call is logged as such', async () => {
    const { tenant } = await tenantWith();
    const response = await gateway.request('/v1/chat/completions', {
      key: tenant.workspaceKey,
      body: { model: 'gpt-4o', messages: [asking('stall', { reply: 'a b c', stall_after_chunks: 2 })], stream: true },
    });
    const reader = defined(response.body).getReader();
    expect((await reader.read()).done).toBe(false);
    const call = lastReceived();
    expect(call.outcome).toBe('open');
    await reader.cancel();
    // The stalled provider would hold the call for the idle timeout (a minute): it ends now.
    expect(
      await waitFor(
        () => call.outcome,
        (outcome) => outcome !== 'open',
      ),
    ).toBe('cancelled');
    const logged = await waitFor(
      () => gateway.logs.filter((line) => line.includes(tenant.workspace.id) && line.includes('client_left')),
      (lines) => lines.length > 0,
    );
    expect(logged).toHaveLength(1);
  });
});

describe('providers', () => {
  it("an Azure OpenAI key sends to its deployment's path with its api-version and api-key, and counts the deployment's model", async () => {
    const tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, {
      base_url: fake.url,
      provider: 'azure-openai',
      deployment: 'prod-4o',
      api_version: '2024-10-21',
      model: 'gpt-4o-2024-08-06',
      default: true,
    });
    const completion = await clientOf(tenant).chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('hello azure')],
    });
    expect(defined(completion.choices[0]).message.content).toBe('You said: hello azure');
    const received = lastReceived();
    expect(received.path).toBe('/openai/deployments/prod-4o/chat/completions');
    expect(received.query).toEqual({ 'api-version': '2024-10-21' });
    expect(received.headers['api-key']).toBe(PROVIDER_KEY);
    expect(received.headers.authorization).toBeUndefined();
    const response = await gateway.request('/v1/usage?bucket_width=1h&limit=1&group_by=model,kind', {
      key: tenant.workspaceKey,
    });
    expect((await json(response)).data[0].results).toEqual([
      expect.objectContaining({ kind: 'chat_completions', model: 'gpt-4o-2024-08-06', num_requests: 1 }),
    ]);
  });
});

describe('usage and policies', () => {
  it('every call is counted in /v1/usage with the usage the provider reported', async () => {
    const { tenant, client } = await tenantWith();
    const messages = [asking('count these words please', { reply: 'Counted them all' })];
    await client.chat.completions.create({ model: 'gpt-4o', messages });
    const stream = await client.chat.completions.create({ model: 'gpt-4o', messages, stream: true });
    for await (const _ of stream);
    const prompt = promptTokens(messages);
    const usage = await waitFor(
      () => usageOf(tenant),
      (result) => result?.num_requests === 2,
    );
    expect(usage).toMatchObject({
      num_requests: 2,
      input_tokens: 2 * prompt,
      output_tokens: 2 * 3,
      total_tokens: 2 * (prompt + 3),
    });
  });

  it("a requests policy refuses past its limit with OpenAI's 429 and headers, and nothing reaches the provider", async () => {
    const { tenant, client } = await tenantWith();
    freshMinute(gateway.clock);
    await createPolicy(gateway, tenant, { value: 1 });
    const first = await client.chat.completions.create({ model: 'gpt-4o', messages: [asking('one')] }).asResponse();
    expect(first.status).toBe(200);
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe('1');
    const sent = fake.requests.length;
    const refused = await gateway.request('/v1/chat/completions', {
      key: tenant.workspaceKey,
      body: { model: 'gpt-4o', messages: [asking('two')] },
    });
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    await expectRefused(refused, 'requests');
    expect(fake.requests.length).toBe(sent);
    await expect(client.chat.completions.create({ model: 'gpt-4o', messages: [asking('three')] })).rejects.toThrow(
      OpenAI.RateLimitError,
    );
  });

  it("a tokens policy is charged the call's reported usage, streamed or not", async () => {
    const { tenant, client } = await tenantWith();
    freshMinute(gateway.clock);
    const policy = await createPolicy(gateway, tenant, { type: 'tokens', value: 100_000 });
    const messages = [asking('tokens for the policy', { reply: 'Five words in this reply' })];
    const completion = await client.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 500 });
    const charged = defined(completion.usage).total_tokens;
    expect(await usedBy(gateway.database.client, policy)).toBe(charged);
    const stream = await client.chat.completions.create({ model: 'gpt-4o', messages, stream: true });
    for await (const _ of stream);
    // Settled when the stream ends, just after its last byte.
    expect(
      await waitFor(
        () => usedBy(gateway.database.client, policy),
        (used) => used === 2 * charged,
      ),
    ).toBe(2 * charged);
  });

  it('a tokens policy reserves the completion cap once per choice (n) until the answer settles it', async () => {
    const { tenant, client } = await tenantWith();
    freshMinute(gateway.clock);
    const policy = await createPolicy(gateway, tenant, { type: 'tokens', value: 100_000 });
    const gate = `choices-${crypto.randomUUID()}`;
    const messages = [asking('three answers', { hold: gate })];
    const answered = client.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 400, n: 3 });
    const prompt = Math.ceil(JSON.stringify(messages).length / 4);
    const reserved = await waitFor(
      () => usedBy(gateway.database.client, policy),
      (used) => used > 0,
    );
    expect(reserved).toBe(prompt + 3 * 400);
    fake.openGate(gate);
    const completion = await answered;
    expect(await usedBy(gateway.database.client, policy)).toBe(defined(completion.usage).total_tokens);
  });

  it('a tokens policy releases the reservation of a call the provider refused', async () => {
    const { tenant, client } = await tenantWith();
    freshMinute(gateway.clock);
    const policy = await createPolicy(gateway, tenant, { type: 'tokens', value: 100_000 });
    await expect(
      client.chat.completions.create({ model: 'gpt-4o', messages: [asking('fail', { status: 500 })] }),
    ).rejects.toThrow(OpenAI.InternalServerError);
    expect(await usedBy(gateway.database.client, policy)).toBe(0);
    expect(await usageOf(tenant)).toBeNull();
  });
});

describe('failures', () => {
  it("the provider's 500 comes back as a 500 in the envelope", async () => {
    const { client } = await tenantWith();
    const error = await client.chat.completions
      .create({ model: 'gpt-4o', messages: [asking('fail', { status: 500 })] })
      .catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect(error).toMatchObject({ status: 500, code: 'upstream_error', type: 'server_error', param: null });
    expect((error as Error).message).toContain('HTTP 500');
  });

  it("the provider's 401 comes back as a 401 naming the provider key, which it never echoes", async () => {
    const { client } = await tenantWith(guarded);
    const error = await client.chat.completions
      .create({ model: 'gpt-4o', messages: [asking('hello')], stream: true })
      .catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(error).toMatchObject({ status: 401, code: 'upstream_error' });
    expect((error as Error).message).toContain("refused the virtual key's provider API key");
    expect((error as Error).message).not.toContain(PROVIDER_KEY);
    expect(gateway.logs.join('\n')).not.toContain(PROVIDER_KEY);
  });

  it('a malformed body is a 400 naming the field, and nothing reaches the provider', async () => {
    const { tenant } = await tenantWith();
    const sent = fake.requests.length;
    const cases: [unknown, string][] = [
      [{ messages: [asking('hi')] }, 'model'],
      [{ model: '', messages: [asking('hi')] }, 'model'],
      [{ model: 'gpt-4o', messages: [] }, 'messages'],
      [{ model: 'gpt-4o', messages: [{ content: 'no role' }] }, 'messages[0].role'],
      [{ model: 'gpt-4o', messages: ['text'] }, 'messages[0]'],
      [{ model: 'gpt-4o', messages: [asking('hi')], stream: 'yes' }, 'stream'],
      [{ model: 'gpt-4o', messages: [asking('hi')], max_tokens: -1 }, 'max_tokens'],
      [{ model: 'gpt-4o', messages: [asking('hi')], max_completion_tokens: 1.5 }, 'max_completion_tokens'],
      [{ model: 'gpt-4o', messages: [asking('hi')], stream_options: 'on' }, 'stream_options'],
    ];
    for (const [body, param] of cases) {
      const response = await gateway.request('/v1/chat/completions', { key: tenant.workspaceKey, body });
      expect(await errorOf(response), JSON.stringify(body)).toMatchObject({ status: 400, param });
    }
    expect(fake.requests.length).toBe(sent);
  });

  it('a workspace without a virtual key for the model is a 400 missing_virtual_key', async () => {
    const tenant = await gateway.tenant();
    const error = await clientOf(tenant)
      .chat.completions.create({ model: 'gpt-4o', messages: [asking('hi')] })
      .catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error).toMatchObject({ status: 400, code: 'missing_virtual_key', param: 'x-gateway-virtual-key' });
  });
});

describe('a provider that goes silent', () => {
  let impatient: TestGateway;
  beforeAll(async () => {
    impatient = await createTestGateway({
      env: { GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: '300', GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS: '300' },
    });
  });
  afterAll(() => impatient.close());

  async function impatientClient() {
    const tenant = await impatient.tenant();
    await impatient.virtualKey(tenant, { base_url: fake.baseURL, default: true });
    return new OpenAI({
      apiKey: tenant.workspaceKey,
      baseURL: 'http://gateway.test/v1',
      maxRetries: 0,
      fetch: (url, init) => impatient.app.request(String(url), init),
    });
  }

  it('before its first byte is a 504 upstream_timeout', async () => {
    const client = await impatientClient();
    const error = await client.chat.completions
      .create({ model: 'gpt-4o', messages: [asking('hold on', { hold: `never-${crypto.randomUUID()}` })] })
      .catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error).toMatchObject({ status: 504, code: 'upstream_timeout' });
    expect((error as Error).message).toContain('sent no first byte within 300 ms');
  });

  it('mid-stream ends the stream with the error envelope, which the SDK raises after the chunks before it', async () => {
    const client = await impatientClient();
    const stream = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('stall', { reply: 'a b c d e', stall_after_chunks: 3 })],
      stream: true,
    });
    const texts: string[] = [];
    const error = await (async () => {
      for await (const chunk of stream) texts.push(chunk.choices[0]?.delta.content ?? '');
    })().catch((thrown: unknown) => thrown);
    expect(texts.join('')).toBe('a b');
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as Error).message).toContain('went silent');
  });
});
