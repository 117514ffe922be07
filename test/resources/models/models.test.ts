import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorOf } from '../../support/envelope';
import { FAKE_MODEL_CREATED, startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { createTestGateway, sdkClient, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * GET /v1/models and /v1/models/{model} through the official SDK configured only by base URL and
 * key: the models a workspace's virtual keys serve, each owned by the key a request for it goes
 * to: exact names as they are, patterns and the default key filtered from the provider's own list,
 * a provider that fails left out (and logged), revoked keys serving nothing.
 */

let gateway: TestGateway;
/** Lists gpt-4o, gpt-4o-mini, text-embedding-3-small, omni-moderation-latest. */
let fake: FakeUpstreamServer;
/** Its own models, behind its own key. */
let local: FakeUpstreamServer;
/** A provider whose list fails (500), though it would answer completions. */
let failing: FakeUpstreamServer;
const LOCAL_KEY = 'sk-local-provider-key-0001';

beforeAll(async () => {
  fake = await startFakeUpstream();
  local = await startFakeUpstream({ apiKey: LOCAL_KEY, models: ['llama-3.1-8b', 'llama-3.1-70b', 'qwen-2.5-7b'] });
  failing = await startFakeUpstream({ models: null });
  gateway = await createTestGateway();
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
  await local.close();
  await failing.close();
});

const clientOf = (tenant: Tenant) => sdkClient(gateway, tenant);

/** The tenant's models as the SDK lists them: id -> owned_by. */
async function modelsOf(tenant: Tenant): Promise<Record<string, string>> {
  const page = await clientOf(tenant).models.list();
  return Object.fromEntries(page.data.map((model) => [model.id, model.owned_by]));
}

describe('GET /v1/models', () => {
  it('lists exact names as they are, and of the provider list what patterns and the default key serve', async () => {
    const tenant = await gateway.tenant();
    const exact = await gateway.virtualKey(tenant, {
      base_url: fake.baseURL,
      slug: 'exact',
      models: ['my-fine-tune', 'gpt-4o'],
    });
    const llama = await gateway.virtualKey(tenant, {
      base_url: local.baseURL,
      api_key: LOCAL_KEY,
      slug: 'llama',
      models: ['llama-*'],
    });
    const fallback = await gateway.virtualKey(tenant, { base_url: fake.baseURL, slug: 'fallback', default: true });
    expect(await modelsOf(tenant)).toEqual({
      // An exact name beats the default key, listed or not by its provider.
      'gpt-4o': exact,
      'my-fine-tune': exact,
      // The pattern's key lists what its provider has that matches: not qwen.
      'llama-3.1-8b': llama,
      'llama-3.1-70b': llama,
      // The default key lists the rest of its provider's.
      'gpt-4o-mini': fallback,
      'text-embedding-3-small': fallback,
      'omni-moderation-latest': fallback,
    });
    // The provider was asked with the key's own secret, and nothing else was sent to it.
    const asked = local.requests.filter((request) => request.path === '/v1/models');
    expect(asked.at(-1)?.headers.authorization).toBe(`Bearer ${LOCAL_KEY}`);
    expect(asked.at(-1)?.method).toBe('GET');
  });

  it('keeps a provider list a while: a second listing asks nobody', async () => {
    const tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: local.baseURL, api_key: LOCAL_KEY, default: true });
    const asked = () => local.requests.filter((request) => request.path === '/v1/models').length;
    const before = asked();
    const first = await modelsOf(tenant);
    expect(asked()).toBe(before + 1);
    expect(await modelsOf(tenant)).toEqual(first);
    expect(asked()).toBe(before + 1);
  });

  it("leaves out a provider whose list fails, says so in a log line, and lists the others' models", async () => {
    const tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: failing.baseURL, slug: 'broken', models: ['gpt-*'] });
    const works = await gateway.virtualKey(tenant, { base_url: fake.baseURL, slug: 'works', models: ['exact-one'] });
    expect(await modelsOf(tenant)).toEqual({ 'exact-one': works });
    const line = gateway.logs.find(
      (text) => text.includes('models list left out') && text.includes(tenant.workspace.id),
    );
    expect(JSON.parse(line ?? '{}')).toMatchObject({
      virtual_key: 'broken',
      reason: expect.stringContaining('HTTP 500'),
    });
  });

  it('serves nothing through a revoked key', async () => {
    const tenant = await gateway.tenant();
    const slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL, models: ['gone-model'] });
    expect(await modelsOf(tenant)).toEqual({ 'gone-model': slug });
    const revoked = await gateway.request(`/v1/virtual-keys/${slug}`, { key: tenant.workspaceKey, method: 'DELETE' });
    expect(revoked.status).toBe(200);
    expect(await modelsOf(tenant)).toEqual({});
    await expect(clientOf(tenant).models.retrieve('gone-model')).rejects.toThrow(OpenAI.NotFoundError);
  });

  it("lists a named key's whole provider list, and an Azure key its deployment's model", async () => {
    const tenant = await gateway.tenant();
    const azure = await gateway.virtualKey(tenant, {
      provider: 'azure-openai',
      base_url: fake.url,
      api_version: '2024-10-21',
      deployment: 'prod-4o',
      model: 'gpt-4o-2024-08-06',
      default: true,
    });
    await gateway.virtualKey(tenant, { base_url: local.baseURL, api_key: LOCAL_KEY, slug: 'named' });
    expect(await modelsOf(tenant)).toEqual({ 'gpt-4o-2024-08-06': azure });
    const named = clientOf(tenant).withOptions({ defaultHeaders: { 'x-gateway-virtual-key': 'named' } });
    const ids = (await named.models.list()).data.map((model) => model.id);
    expect(ids).toEqual(['llama-3.1-70b', 'llama-3.1-8b', 'qwen-2.5-7b']);
  });
});

describe('GET /v1/models/{model}', () => {
  it("retrieves a served model as OpenAI's Model, owned by its key, an id with slashes included", async () => {
    const tenant = await gateway.tenant();
    const slug = await gateway.virtualKey(tenant, {
      base_url: fake.baseURL,
      models: ['meta-llama/Llama-3.1-8B'],
      default: true,
    });
    const client = clientOf(tenant);
    expect(await client.models.retrieve('gpt-4o-mini')).toEqual({
      id: 'gpt-4o-mini',
      object: 'model',
      created: FAKE_MODEL_CREATED,
      owned_by: slug,
    });
    const slashed = await client.models.retrieve('meta-llama/Llama-3.1-8B');
    expect(slashed).toMatchObject({ id: 'meta-llama/Llama-3.1-8B', object: 'model', owned_by: slug });
    expect(slashed.created).toBeGreaterThan(0);
  });

  it('is a 404 model_not_found naming `model` for a model no key serves', async () => {
    const tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: fake.baseURL, models: ['only-this'] });
    const error = await clientOf(tenant)
      .models.retrieve('gpt-5-turbo')
      .catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect(error).toMatchObject({ status: 404, code: 'model_not_found', param: 'model' });
    expect(await errorOf(await gateway.request('/v1/models/nothing', { key: tenant.workspaceKey }))).toMatchObject({
      status: 404,
      code: 'model_not_found',
      param: 'model',
    });
  });
});
