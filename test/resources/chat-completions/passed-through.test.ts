import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defined } from '../../support/defined';
import { errorOf, json } from '../../support/envelope';
import {
  countTokens,
  FAKE_EMBEDDING_DIMENSIONS,
  FAKE_FLAGGED_WORD,
  fakeDirective,
  fakeEmbedding,
  startFakeUpstream,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { createTestGateway, sdkClient, type Tenant, type TestGateway } from '../../support/gateway';
import { createPolicy, expectRefused, freshMinute, usedBy } from '../../support/ratelimit';
import { waitFor } from '../../support/wait';

/**
 * POST /v1/embeddings, /v1/completions (legacy) and /v1/moderations, passed through to the provider
 * of the caller's virtual key by the pipeline of chat completions, through the official SDK
 * configured only by base URL and key: answers as the provider sent them, usage counted under each
 * kind, policies, and a provider without the endpoint.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
/** A provider that has neither moderations nor legacy completions (as many OpenAI-compatible servers). */
let partial: FakeUpstreamServer;

beforeAll(async () => {
  fake = await startFakeUpstream();
  partial = await startFakeUpstream({ without: ['moderations', 'completions'] });
  gateway = await createTestGateway();
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
  await partial.close();
});

/** A tenant whose default virtual key calls `provider`, with the SDK as an application configures it. */
async function tenantWith(provider: FakeUpstreamServer = fake) {
  const tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: provider.baseURL, default: true });
  return { tenant, slug, client: sdkClient(gateway, tenant) };
}

/** The tenant's usage of `kind` this hour, from GET /v1/usage. */
async function usageOf(tenant: Tenant, kind: string) {
  const response = await gateway.request('/v1/usage?bucket_width=1h&limit=1&group_by=kind', {
    key: tenant.workspaceKey,
  });
  expect(response.status).toBe(200);
  const [bucket] = (await json(response)).data;
  return bucket.results.find((result: { kind: string }) => result.kind === kind) ?? null;
}

const closeTo = (values: ArrayLike<number>, expected: readonly number[]) => {
  expect(values.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) expect(values[i]).toBeCloseTo(defined(expected[i]), 5);
};

describe('embeddings', () => {
  it('float vectors with dimensions, as the provider sent them, counted as embeddings', async () => {
    const { tenant, client } = await tenantWith();
    const input = ['the quick brown fox', 'jumps over the lazy dog'];
    const answer = await client.embeddings.create({
      model: 'text-embedding-3-small',
      input,
      dimensions: 64,
      encoding_format: 'float',
    });
    expect(fake.requests.at(-1)?.body).toEqual({
      model: 'text-embedding-3-small',
      input,
      dimensions: 64,
      encoding_format: 'float',
    });
    expect(answer.data.map((item) => item.index)).toEqual([0, 1]);
    closeTo(defined(answer.data[1]).embedding, fakeEmbedding(defined(input[1]), 64));
    const tokens = countTokens(input.join(' '));
    expect(answer.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    const usage = await usageOf(tenant, 'embeddings');
    expect(usage).toMatchObject({ num_requests: 1, input_tokens: tokens, output_tokens: 0 });
  });

  it('base64 vectors (what the SDK asks for by default) pass through as the provider encoded them', async () => {
    const { client } = await tenantWith();
    const answer = await client.embeddings.create({ model: 'text-embedding-3-small', input: 'hello world' });
    expect(fake.requests.at(-1)?.body?.encoding_format).toBe('base64');
    // The SDK decoded the provider's base64 into floats.
    closeTo(defined(answer.data[0]).embedding, fakeEmbedding('hello world', FAKE_EMBEDDING_DIMENSIONS));

    const raw = await client.embeddings.create({
      model: 'text-embedding-3-small',
      input: 'hello world',
      encoding_format: 'base64',
    });
    const base64 = defined(raw.data[0]).embedding as unknown as string;
    const bytes = Uint8Array.from(atob(base64), (char) => char.charCodeAt(0));
    closeTo(new Float32Array(bytes.buffer), fakeEmbedding('hello world'));
  });

  it("a requests policy refuses past its limit with OpenAI's 429, and nothing reaches the provider", async () => {
    const { tenant, client } = await tenantWith();
    freshMinute(gateway.clock);
    await createPolicy(gateway, tenant, { value: 1 });
    await client.embeddings.create({ model: 'text-embedding-3-small', input: 'one' });
    const sent = fake.requests.length;
    const refused = await gateway.request('/v1/embeddings', {
      key: tenant.workspaceKey,
      body: { model: 'text-embedding-3-small', input: 'two' },
    });
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    await expectRefused(refused, 'requests');
    await expect(client.embeddings.create({ model: 'text-embedding-3-small', input: 'three' })).rejects.toThrow(
      OpenAI.RateLimitError,
    );
    expect(fake.requests.length).toBe(sent);
  });

  it('a malformed body is a 400 naming the field, and nothing reaches the provider', async () => {
    const { tenant } = await tenantWith();
    const sent = fake.requests.length;
    const cases: [unknown, string][] = [
      [{ input: 'hi' }, 'model'],
      [{ model: 'text-embedding-3-small' }, 'input'],
      [{ model: 'text-embedding-3-small', input: [] }, 'input'],
      [{ model: 'text-embedding-3-small', input: 'hi', encoding_format: 'hex' }, 'encoding_format'],
      [{ model: 'text-embedding-3-small', input: 'hi', dimensions: 0 }, 'dimensions'],
    ];
    for (const [body, param] of cases) {
      const response = await gateway.request('/v1/embeddings', { key: tenant.workspaceKey, body });
      expect(await errorOf(response), JSON.stringify(body)).toMatchObject({ status: 400, param });
    }
    expect(fake.requests.length).toBe(sent);
  });
});

describe('embeddings past the answer bound', () => {
  let bounded: TestGateway;
  beforeAll(async () => {
    bounded = await createTestGateway({ env: { GATEWAY_MAX_ANSWER_BYTES: '4096' } });
  });
  afterAll(() => bounded.close());

  it("an answer over GATEWAY_MAX_ANSWER_BYTES is a 502, charged its input's estimate: the provider did answer", async () => {
    const tenant = await bounded.tenant();
    await bounded.virtualKey(tenant, { base_url: fake.baseURL, default: true });
    freshMinute(bounded.clock);
    const policy = await createPolicy(bounded, tenant, { type: 'tokens', value: 100_000 });
    const error = await sdkClient(bounded, tenant)
      .embeddings.create({
        model: 'text-embedding-3-small',
        input: ['a', 'b', 'c'],
        dimensions: 1024,
        encoding_format: 'float',
      })
      .catch((thrown: unknown) => thrown);
    expect(error).toMatchObject({ status: 502, code: 'upstream_error' });
    expect((error as Error).message).toContain('GATEWAY_MAX_ANSWER_BYTES');
    // Four characters a token of the input as it travels, `["a","b","c"]`; nothing of the bound's reservation kept.
    expect(await usedBy(bounded.database.client, policy)).toBe(Math.ceil(JSON.stringify(['a', 'b', 'c']).length / 4));
  });
});

describe('legacy completions', () => {
  it('not streamed: the provider JSON, counted as completions', async () => {
    const { tenant, client } = await tenantWith();
    const prompt = 'Say something short';
    const completion = await client.completions.create({ model: 'gpt-3.5-turbo-instruct', prompt, max_tokens: 3 });
    expect(completion.object).toBe('text_completion');
    expect(defined(completion.choices[0])).toMatchObject({ text: 'You said: Say', finish_reason: 'length' });
    expect(fake.requests.at(-1)?.body).toEqual({ model: 'gpt-3.5-turbo-instruct', prompt, max_tokens: 3 });
    const usage = await usageOf(tenant, 'completions');
    expect(usage).toMatchObject({ num_requests: 1, input_tokens: countTokens(prompt), output_tokens: 3 });
  });

  it('streamed: relayed chunk by chunk, the usage the gateway asked for withheld, and counted', async () => {
    const { tenant, client } = await tenantWith();
    const prompt = `Go\n${fakeDirective({ reply: 'one two three four' })}`;
    const stream = await client.completions.create({ model: 'gpt-3.5-turbo-instruct', prompt, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((chunk) => chunk.choices[0]?.text ?? '').join('')).toBe('one two three four');
    expect(chunks.some((chunk) => chunk.usage)).toBe(false);
    expect(fake.requests.at(-1)?.body?.stream_options).toEqual({ include_usage: true });
    const usage = await waitFor(
      () => usageOf(tenant, 'completions'),
      (result) => result !== null,
    );
    expect(usage).toMatchObject({ num_requests: 1, input_tokens: countTokens(prompt), output_tokens: 4 });
  });
});

describe('moderations', () => {
  it("the provider's results, counted as moderations by the estimate of their input", async () => {
    const { tenant, client } = await tenantWith();
    const input = ['a kind word', `an ${FAKE_FLAGGED_WORD} on the castle`];
    const moderation = await client.moderations.create({ input });
    expect(moderation.results.map((result) => result.flagged)).toEqual([false, true]);
    expect(defined(moderation.results[1]).categories.violence).toBe(true);
    // No model in the request: it goes on without one, and the provider chose its default.
    expect(fake.requests.at(-1)?.body).toEqual({ input });
    expect(moderation.model).toBe('omni-moderation-latest');
    const usage = await usageOf(tenant, 'moderations');
    expect(usage).toMatchObject({
      num_requests: 1,
      input_tokens: Math.ceil(JSON.stringify(input).length / 4),
      output_tokens: 0,
    });
  });
});

describe('a provider without the endpoint', () => {
  it("answers as the provider does: its 404, in OpenAI's envelope naming the virtual key, counted nowhere", async () => {
    const { tenant, slug, client } = await tenantWith(partial);
    const error = await client.moderations.create({ input: 'hello' }).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect(error).toMatchObject({ status: 404, code: 'upstream_error' });
    expect((error as Error).message).toContain(`Virtual key '${slug}'`);
    expect((error as Error).message).toContain('no Moderations');
    await expect(client.completions.create({ model: 'gpt-3.5-turbo-instruct', prompt: 'hi' })).rejects.toThrow(
      OpenAI.NotFoundError,
    );
    // What it has still works.
    const embedded = await client.embeddings.create({ model: 'text-embedding-3-small', input: 'hi' });
    expect(embedded.data).toHaveLength(1);
    expect(await usageOf(tenant, 'moderations')).toBeNull();
  });
});
