import { randomBytes } from 'node:crypto';
import { createClient, type Client } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { createFakeUpstream } from '../support/fake-upstream';
import { createTestGateway, json, type TestGateway } from '../support/gateway';
import { revokeElsewhere } from '../support/gateways-on-sqld';

/**
 * On a database server, a read of a thread starts on the settings the gateway last saw and reads the
 * generation with its own reads (db/settings-cache.ts, ProvisionalSettings): a change made anywhere
 * else still governs the very next request. Here the changes are made as another gateway or the CLI
 * would, straight in the database.
 */

let sqld: RunningSqld;
let gateway: TestGateway;
let elsewhere: Client;
const upstream = createFakeUpstream();

beforeAll(async () => {
  sqld = await startSqld();
  gateway = await createTestGateway({
    env: { LIBSQL_URL: sqld.url, GATEWAY_ENCRYPTION_KEY: randomBytes(32).toString('base64') },
    deps: { fetch: upstream.fetch },
  });
  elsewhere = createClient({ url: sqld.url });
});
afterAll(async () => {
  elsewhere.close();
  await gateway.close();
  await sqld.stop();
});

describe('settings assumed unchanged by a read, on a database server', () => {
  it('answers a key revoked elsewhere 401, and a key still live as before, whatever changed meanwhile', async () => {
    const tenant = await gateway.tenant();
    const key = tenant.workspaceKey;
    const thread = await json(
      await gateway.request('/v1/threads', { key, body: { messages: [{ role: 'user', content: 'hello' }] } }),
    );
    const list = () => gateway.request(`/v1/threads/${thread.id}/messages`, { key });
    // The first read finds the key; the next ones start from it.
    expect((await list()).status).toBe(200);
    expect((await list()).status).toBe(200);

    // Another change to the settings (an assistant created elsewhere): the key is still live.
    const other = await gateway.tenant();
    await gateway.request('/v1/assistants', { key: other.workspaceKey, body: { model: 'fake-model', name: 'x' } });
    const after = await list();
    expect(after.status).toBe(200);
    expect(
      (await json(after)).data.map(
        (message: { content: { text: { value: string } }[] }) => message.content[0]?.text.value,
      ),
    ).toEqual(['hello']);

    // A message added after another change elsewhere: its insert's guard fails, writing nothing; the
    // key is found live again, and the message written once.
    await gateway.request('/v1/assistants', { key: other.workspaceKey, body: { model: 'fake-model', name: 'y' } });
    const added = (content: string) =>
      gateway.request(`/v1/threads/${thread.id}/messages`, { key, body: { role: 'user', content } });
    expect((await added('moved')).status).toBe(200);
    expect((await added('held')).status).toBe(200);
    const texts = async () =>
      (await json(await list())).data.map(
        (message: { content: { text: { value: string } }[] }) => message.content[0]?.text.value,
      );
    expect(await texts()).toEqual(['held', 'moved', 'hello']);

    // Revoked by someone else: the very next read is refused, and the one after it, and a message
    // is refused without being written.
    await revokeElsewhere(elsewhere, tenant.workspaceKeyId);
    const refused = await list();
    expect(refused.status).toBe(401);
    expect((await json(refused)).error).toMatchObject({ code: 'invalid_api_key' });
    expect((await list()).status).toBe(401);
    const unwritten = await added('revoked');
    expect(unwritten.status).toBe(401);
    const [row] = (
      await elsewhere.execute({ sql: 'SELECT count(*) AS n FROM messages WHERE thread_id = ?', args: [thread.id] })
    ).rows;
    expect(Number(row?.n)).toBe(3);
  });

  it('lists the models on settings assumed unchanged, and asks no provider for its list once the key is revoked elsewhere', async () => {
    const tenant = await gateway.tenant();
    const key = tenant.workspaceKey;
    // Each key's base URL a path of its own (a list the fake does not serve: left out, still asked).
    const asked = (base: string) => upstream.requests.filter((request) => request.path === `/${base}/v1/models`).length;
    const models = () => gateway.request('/v1/models', { key });
    await gateway.virtualKey(tenant, { slug: 'first', base_url: 'http://fake.test/first/v1', default: true });
    expect((await models()).status).toBe(200);
    expect(asked('first')).toBe(1);

    // A key whose provider was never asked; the API key then held at the settings' generation.
    await gateway.virtualKey(tenant, { slug: 'second', base_url: 'http://fake.test/second/v1', models: ['second-*'] });
    expect((await gateway.request('/v1/assistants', { key })).status).toBe(200);
    await revokeElsewhere(elsewhere, tenant.workspaceKeyId);
    const refused = await models();
    expect(refused.status).toBe(401);
    expect((await json(refused)).error).toMatchObject({ code: 'invalid_api_key' });
    expect(asked('second')).toBe(0);
  });

  it('runs on a thread while the key is live, and refuses a run 401, writing nothing, once it is revoked elsewhere', async () => {
    const tenant = await gateway.tenant();
    const key = tenant.workspaceKey;
    await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
    const assistant = await json(await gateway.request('/v1/assistants', { key, body: { model: 'fake-model' } }));
    const thread = await json(await gateway.request('/v1/threads', { key, body: {} }));
    const run = () =>
      gateway.request(`/v1/threads/${thread.id}/runs`, {
        key,
        body: { assistant_id: assistant.id, additional_messages: [{ role: 'user', content: 'hi' }] },
      });
    const runs = async () => {
      const [row] = (
        await elsewhere.execute({ sql: 'SELECT count(*) AS n FROM runs WHERE thread_id = ?', args: [thread.id] })
      ).rows;
      return Number(row?.n);
    };
    // The first request finds the key; the second starts from it, and so does the third after an
    // unrelated change (a workspace's assistant created elsewhere: the generation moved).
    expect((await gateway.request(`/v1/threads/${thread.id}`, { key })).status).toBe(200);
    expect((await run()).status).toBe(200);
    await gateway.tasks.drain(10_000);
    await gateway.request('/v1/assistants', {
      key: (await gateway.tenant()).workspaceKey,
      body: { model: 'fake-model' },
    });
    expect((await run()).status).toBe(200);
    await gateway.tasks.drain(10_000);
    expect(await runs()).toBe(2);

    await revokeElsewhere(elsewhere, tenant.workspaceKeyId);
    const refused = await run();
    expect(refused.status).toBe(401);
    expect((await json(refused)).error).toMatchObject({ code: 'invalid_api_key' });
    expect(await runs()).toBe(2);
  });
});
