import { defined } from '../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { embedTexts, vectorBlob } from '../../src/retrieval/embed';
import { embeddingKey } from '../../src/resources/virtual-keys/embedding-key';
import { findActiveVirtualKey, revokeVirtualKey } from '../../src/resources/virtual-keys/commands';
import { createFakeUpstream, fakeEmbedding, FAKE_EMBEDDINGS_STATUS } from '../support/fake-upstream';
import { createPolicy } from '../support/ratelimit';
import { createTestGateway, type Tenant, type TestGateway } from '../support/gateway';

/** embedTexts through the real deps and database: batches, the store's key, rate-limit policies. */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let keyId: string;

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', models: ['text-embedding-*'] });
  keyId = defined(await findActiveVirtualKey(gateway.database.db, tenant.workspace.id, slug)).id;
});
afterAll(() => gateway?.close());

const target = () => ({
  workspaceId: tenant.workspace.id,
  apiKeyId: tenant.workspaceKeyId,
  virtualKeyId: keyId,
  model: 'text-embedding-3-small',
  dimensions: null,
});

describe('embedTexts', () => {
  it('embeds in batches of 64, in order, with the dimensions asked of text-embedding-3 models', async () => {
    upstream.reset();
    const texts = Array.from({ length: 70 }, (_, i) => `text number ${i}`);
    const out = await embedTexts(gateway.deps, embeddingKey, target(), texts);
    expect(upstream.requests.map((request) => (defined(request.body).input as string[]).length)).toEqual([64, 6]);
    expect(defined(defined(upstream.requests[0]).body).dimensions).toBe(512);
    expect(out.dimensions).toBe(512);
    expect(out.vectors).toHaveLength(70);
    expect(Array.from(defined(out.vectors[69]))).toEqual(fakeEmbedding('text number 69', 512).map(Math.fround));
    expect(out.virtualKeyId).toBe(keyId);
    expect(out.promptTokens).toBe(70 * 3);
    expect(vectorBlob(defined(out.vectors[0])).byteLength).toBe(512 * 4);
  });

  it('asks other models for nothing and refuses vectors of another size than the store’s', async () => {
    upstream.reset();
    const other = { ...target(), model: 'text-embedding-nomic', dimensions: 768 };
    const error = await embedTexts(gateway.deps, embeddingKey, other, ['x']).catch((e: unknown) => e);
    expect(defined(defined(upstream.requests[0]).body).dimensions).toBeUndefined();
    expect((error as Error).message).toContain('256 dimensions for a store of 768');
  });

  it('does not retry what the provider refuses for good', async () => {
    upstream.reset();
    const error = await embedTexts(gateway.deps, embeddingKey, target(), [`${FAKE_EMBEDDINGS_STATUS} 400`]).catch(
      (e: unknown) => e,
    );
    expect((error as Error).message).toContain('HTTP 400');
    expect(upstream.requests).toHaveLength(1);
  });

  it('is refused by a tokens policy once its tokens are spent, and charges what the provider reports', async () => {
    const own = await gateway.tenant();
    const slug = await gateway.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
    expect(
      await createPolicy(gateway, own, {
        conditions: [{ key: 'model', value: 'text-embedding-3-small' }],
        type: 'tokens',
        unit: 'rpm',
        value: 10,
      }),
    ).toBeTruthy();
    const mine = { ...target(), workspaceId: own.workspace.id, apiKeyId: own.workspaceKeyId, virtualKeyId: null };
    const first = await embedTexts(gateway.deps, embeddingKey, mine, [
      'one two three four five six seven eight nine ten eleven twelve',
    ]);
    expect(first.promptTokens).toBe(12);
    expect(defined(await findActiveVirtualKey(gateway.database.db, own.workspace.id, slug)).id).toBe(
      first.virtualKeyId,
    );
    const error = await embedTexts(gateway.deps, embeddingKey, mine, ['again']).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'rate_limit_exceeded' });
  }, 20_000);

  it('falls back to the key the workspace would use now when the store’s key was revoked', async () => {
    const own = await gateway.tenant();
    const first = await gateway.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
    const firstId = defined(await findActiveVirtualKey(gateway.database.db, own.workspace.id, first)).id;
    await revokeVirtualKey(gateway.database.db, own.workspace.id, first, gateway.clock.now());
    const mine = { ...target(), workspaceId: own.workspace.id, apiKeyId: own.workspaceKeyId, virtualKeyId: firstId };
    await expect(embedTexts(gateway.deps, embeddingKey, mine, ['x'])).rejects.toMatchObject({
      code: 'missing_virtual_key',
    });
    const second = await gateway.virtualKey(own, {
      base_url: 'http://fake.test/v1',
      models: ['text-embedding-3-small'],
    });
    const out = await embedTexts(gateway.deps, embeddingKey, mine, ['x']);
    expect(out.virtualKeyId).toBe(
      defined(await findActiveVirtualKey(gateway.database.db, own.workspace.id, second)).id,
    );
  });
});
