import { defined } from '../support/defined';
import { join } from 'node:path';
import { createClient, type Client } from '@libsql/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SettingsCache } from '../../src/db/settings-cache';
import { settingsLoaders } from '../../src/runtime/settings-loaders';
import { fakeThread, startFakeUpstream, type FakeUpstreamServer } from '../support/fake-upstream';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../support/gateway';
import { createPolicy, freshMinute } from '../support/ratelimit';

/**
 * The settings cache (db/settings-cache.ts): API keys, assistants and virtual keys are kept in
 * memory for one generation of the database's settings, and a change made anywhere, here by plain
 * SQL on a connection of its own as the CLI or a second gateway would make it, governs the next
 * request.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let tenant: Tenant;
let slug: string;
let other: Client;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
  slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL, default: true });
  other = createClient({ url: `file:${join(gateway.dataDir, 'gateway.db')}` });
});
afterAll(async () => {
  other.close();
  await gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());

const assistant = async (instructions: string) =>
  (
    await json(
      await gateway.request('/v1/assistants', {
        key: tenant.workspaceKey,
        body: { model: 'fake-model', instructions },
      }),
    )
  ).id as string;

/** Runs `assistantId` to its end, not streamed; answers the run and the system prompt the provider got. */
async function run(assistantId: string, headers: Record<string, string> = {}) {
  const response = await gateway.request('/v1/threads/runs', {
    key: tenant.workspaceKey,
    headers,
    body: { assistant_id: assistantId, thread: fakeThread('Hi', { reply: 'Hello.' }) },
  });
  const created = await json(response);
  if (response.status !== 200) return { status: response.status, error: created.error, system: undefined };
  await gateway.tasks.drain(10_000);
  const ended = await json(
    await gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}`, { key: tenant.workspaceKey }),
  );
  return {
    status: ended.status as string,
    error: null,
    system: fake.requests.at(-1)?.body?.messages[0]?.content as string | undefined,
  };
}

/** Changes a row with the generation put back as it was, in the same transaction: only a kept row hides the change. */
async function behindTheGeneration(change: { sql: string; args: (string | number)[] }) {
  const generation = Number(
    defined((await other.execute('SELECT value FROM settings_generation WHERE id = 0')).rows[0]).value,
  );
  await other.batch([change, { sql: 'UPDATE settings_generation SET value = ? WHERE id = 0', args: [generation] }]);
}

describe('what a request reads', () => {
  it('is kept while the generation stays: a row changed without it is not seen, until the generation moves', async () => {
    const id = await assistant('First instructions.');
    expect((await run(id)).system).toBe('First instructions.');
    await behindTheGeneration({
      sql: 'UPDATE assistants SET instructions = ? WHERE id = ?',
      args: ['Second instructions.', id],
    });
    expect((await run(id)).system).toBe('First instructions.');
    await other.execute('UPDATE settings_generation SET value = value + 1 WHERE id = 0');
    expect((await run(id)).system).toBe('Second instructions.');
  });

  it('follows a change made by another connection at the very next request: an assistant', async () => {
    const id = await assistant('Before.');
    expect((await run(id)).system).toBe('Before.');
    await other.execute({ sql: 'UPDATE assistants SET instructions = ? WHERE id = ?', args: ['After.', id] });
    expect((await run(id)).system).toBe('After.');
    await other.execute({ sql: 'UPDATE assistants SET deleted_at = 1 WHERE id = ?', args: [id] });
    expect(await run(id)).toMatchObject({ status: 404, error: { code: 'assistant_not_found' } });
  });

  it('follows a change made by another connection at the very next request: a virtual key', async () => {
    const id = await assistant('Keyed.');
    const named = await gateway.virtualKey(tenant, { base_url: fake.baseURL });
    expect((await run(id, { 'x-gateway-virtual-key': named })).status).toBe('completed');
    await other.execute({ sql: 'UPDATE virtual_keys SET revoked_at = 1 WHERE slug = ?', args: [named] });
    expect(await run(id, { 'x-gateway-virtual-key': named })).toMatchObject({
      status: 401,
      error: { code: 'invalid_virtual_key' },
    });
    // The default key, kept for its model, is refused once revoked too.
    expect((await run(id)).status).toBe('completed');
    await other.execute({ sql: 'UPDATE virtual_keys SET revoked_at = 1 WHERE slug = ?', args: [slug] });
    expect(await run(id)).toMatchObject({ status: 400, error: { code: 'missing_virtual_key' } });
    await other.execute({ sql: 'UPDATE virtual_keys SET revoked_at = NULL WHERE slug = ?', args: [slug] });
    expect((await run(id)).status).toBe('completed');
  });

  it('follows a change made by another connection at the very next request: an API key', async () => {
    const extra = await gateway.tenant();
    const ask = () => gateway.request('/v1/assistants', { key: extra.workspaceKey });
    expect((await ask()).status).toBe(200);
    await other.execute({ sql: 'UPDATE api_keys SET revoked_at = 1 WHERE id = ?', args: [extra.workspaceKeyId] });
    const refused = await ask();
    expect(refused.status).toBe(401);
    expect((await errorOf(refused)).code).toBe('invalid_api_key');
  });

  it('keeps nothing when the generation row is gone, and still answers', async () => {
    const id = await assistant('Without a generation.');
    await other.execute('DELETE FROM settings_generation');
    try {
      expect((await run(id)).system).toBe('Without a generation.');
      await other.execute({ sql: 'UPDATE assistants SET instructions = ? WHERE id = ?', args: ['Read again.', id] });
      // The trigger updates no row now: only reading the row every time sees the change.
      expect(Number(defined((await other.execute('SELECT count(*) AS n FROM settings_generation')).rows[0]).n)).toBe(0);
      expect((await run(id)).system).toBe('Read again.');
    } finally {
      await other.execute('INSERT INTO settings_generation (id, value) VALUES (0, 1000)');
    }
  });
});

describe("a run's rate-limit policies", () => {
  it('are read again only when the generation moves, and follow a policy changed elsewhere', async () => {
    // The policy's counts are per minute: all of them fall in one, whenever the test runs.
    freshMinute(gateway.clock);
    const limited = (
      await json(
        await gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'limited-model' } }),
      )
    ).id as string;
    expect((await run(limited)).status).toBe('completed');
    const policy = await createPolicy(gateway, tenant, { conditions: [{ key: 'model', value: 'limited-model' }] });
    expect((await run(limited)).status).toBe('completed');
    expect(await run(limited)).toMatchObject({ status: 429, error: { code: 'rate_limit_exceeded' } });
    await other.execute({ sql: "UPDATE rate_limit_policies SET status = 'archived' WHERE id = ?", args: [policy] });
    expect((await run(limited)).status).toBe('completed');
    // Active again, with the generation put back: the index kept for the generation does not see it.
    await behindTheGeneration({ sql: "UPDATE rate_limit_policies SET status = 'active' WHERE id = ?", args: [policy] });
    expect((await run(limited)).status).toBe('completed');
    await other.execute('UPDATE settings_generation SET value = value + 1 WHERE id = 0');
    expect(await run(limited)).toMatchObject({ status: 429, error: { code: 'rate_limit_exceeded' } });
    await other.execute({ sql: "UPDATE rate_limit_policies SET status = 'archived' WHERE id = ?", args: [policy] });
  });
});

describe('the cache', () => {
  it('stays within its weight, dropping the least recently used', async () => {
    const cache = new SettingsCache(gateway.deps.db, settingsLoaders(gateway.deps.db), { maxWeight: 8 * 4096 });
    const ids = [];
    for (let i = 0; i < 12; i++) ids.push(await assistant(`${i} ${'x'.repeat(2000)}`));
    const settings = await cache.now();
    for (const id of ids) expect((await settings.assistant(tenant.workspace.id, id)).instructions).toMatch(/^\d+ x+$/);
    // Assistants get 5/8 of the weight: 20 KiB, about nine of these.
    expect(cache.weight).toBeGreaterThan(4 * 2000);
    expect(cache.weight).toBeLessThanOrEqual((8 * 4096 * 5) / 8);
  });

  it('starts no request on the generation it last read once it changed the settings itself, until it reads it again', async () => {
    const cache = new SettingsCache(gateway.deps.db, settingsLoaders(gateway.deps.db), { provisional: true });
    const settings = await cache.now();
    expect(await settings.apiKey(tenant.workspaceKey)).not.toBeNull();
    expect(cache.provisional(tenant.workspaceKey, 'on demand')).not.toBeNull();
    // A read under way when the change is made does not make its generation current again.
    const reading = cache.now();
    cache.changed();
    await reading;
    expect(cache.provisional(tenant.workspaceKey, 'on demand')).toBeNull();
    await cache.now();
    expect(cache.provisional(tenant.workspaceKey, 'on demand')).not.toBeNull();
  });

  it('hands out frozen values, shared by the requests that read them', async () => {
    const cache = new SettingsCache(gateway.deps.db, settingsLoaders(gateway.deps.db));
    const id = await assistant('Frozen.');
    const first = await (await cache.now()).assistant(tenant.workspace.id, id);
    const second = await (await cache.now()).assistant(tenant.workspace.id, id);
    expect(second).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(() => {
      (first as { instructions: string | null }).instructions = 'changed';
    }).toThrow(TypeError);
  });
});
