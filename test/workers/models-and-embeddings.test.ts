import type OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * GET /v1/models and POST /v1/embeddings inside workerd, as on Cloudflare: the provider's own
 * list asked with the Workers fetch (a GET without a body), and embeddings passed through as the
 * provider encoded them.
 */

const API_KEY = inject('workersTenant').runsWorkspaceKey;

let openai: OpenAI;
let slug: string;

beforeAll(async () => {
  slug = `models-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, slug);
  openai = gatewayClient({ 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': slug });
});

describe('models and embeddings on workerd', () => {
  it("lists the named key's provider models, owned by the key, and retrieves one", async () => {
    const page = await openai.models.list();
    // The fake's list (test/support/fake-upstream.ts, FAKE_MODELS), sorted.
    expect(page.data.map((model) => model.id)).toEqual([
      'gpt-4o',
      'gpt-4o-mini',
      'omni-moderation-latest',
      'text-embedding-3-small',
    ]);
    expect(page.data.every((model) => model.owned_by === slug && model.object === 'model')).toBe(true);
    expect(await openai.models.retrieve('gpt-4o-mini')).toMatchObject({ id: 'gpt-4o-mini', owned_by: slug });
  });

  it('passes embeddings through, base64 as the SDK asks by default', async () => {
    const answer = await openai.embeddings.create({
      model: 'text-embedding-3-small',
      input: 'hello workerd',
      dimensions: 16,
    });
    const vector = answer.data[0]?.embedding ?? [];
    // The fake's vectors are of unit length: decoded from base64 by the SDK, they still are.
    expect(vector).toHaveLength(16);
    expect(Math.hypot(...vector)).toBeCloseTo(1, 5);
    expect(answer.usage.prompt_tokens).toBe(2);
  });
});
