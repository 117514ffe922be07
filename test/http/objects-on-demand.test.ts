import { describe, expect, it, vi } from 'vitest';

/**
 * The schemas of what the routes answer (resources/<name>/objects.ts, declared with http/objects.ts's
 * onDemand) are built when the OpenAPI document asks for them: loading the app and serving its
 * requests builds none of them, so a server holds no heap for them (docs/development.md, "Known limits").
 */

describe('the objects the API answers', () => {
  it('are built by the OpenAPI document, not by loading the app or serving its requests', async () => {
    // A module graph of this test's own: the node project's files share theirs (vitest.config.ts),
    // and a file before this one may have generated the document already.
    vi.resetModules();
    const { onDemandBuilt } = await import('../../src/http/objects');
    const { createTestGateway } = await import('../support/gateway');
    const { startFakeUpstream, fakeThread } = await import('../support/fake-upstream');
    const { openApiDocument } = await import('../../src/http/openapi/generate');
    const fake = await startFakeUpstream();
    const gateway = await createTestGateway();
    try {
      const tenant = await gateway.tenant();
      const key = tenant.workspaceKey;
      await gateway.virtualKey(tenant, { base_url: fake.baseURL, default: true });
      const ok = async (path: string, body?: unknown, method?: string) => {
        const response = await gateway.request(path, { key, body, method });
        expect(response.status, `${method ?? (body ? 'POST' : 'GET')} ${path}`).toBe(200);
        return (await response.json()) as { id: string };
      };
      const assistant = await ok('/v1/assistants', { model: 'gpt-4o' });
      const thread = await ok('/v1/threads', {});
      await ok(`/v1/threads/${thread.id}/messages`, { role: 'user', content: 'Hello' });
      const streamed = await gateway.request(`/v1/threads/${thread.id}/runs`, {
        key,
        body: { assistant_id: assistant.id, stream: true },
      });
      expect(await streamed.text()).toContain('thread.run.completed');
      const run = await ok('/v1/threads/runs', { assistant_id: assistant.id, thread: fakeThread('Hi') });
      for (const path of [
        '/health',
        '/v1/assistants',
        `/v1/assistants/${assistant.id}`,
        `/v1/threads/${thread.id}/messages`,
        `/v1/threads/${thread.id}/runs`,
        `/v1/runs/${run.id}/trace`,
        '/v1/runs',
        '/v1/models',
        '/v1/virtual-keys',
        '/v1/policies/rate-limits',
        '/v1/usage?start_time=0',
        '/v1/workspaces',
      ])
        await ok(path);
      await ok(`/v1/threads/${thread.id}`, undefined, 'DELETE');
      expect(onDemandBuilt()).toBe(0);

      const document = await openApiDocument(gateway.app);
      expect(document.components?.schemas).toHaveProperty('RunObject');
      expect(onDemandBuilt()).toBeGreaterThan(50);
    } finally {
      await gateway.close();
      await fake.close();
    }
  });
});
