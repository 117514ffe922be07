import { randomBytes } from 'node:crypto';
import { createClient, type Client } from '@libsql/client';
import { startSqld } from '../../scripts/sqld';
import { DatabaseProxy } from './database-proxy';
import type { FakeUpstream } from './fake-upstream';
import { createTestGateway, type TestGateway } from './gateway';

/**
 * Two gateways on one real sqld, as a deployment of several processes has them: `gateway` reaches
 * it through `proxy` (which counts and can hold its round trips: database-proxy.ts), `other`
 * straight, and `elsewhere` is a plain client of it, as the CLI or plain SQL would be. Changes made
 * through `other` or `elsewhere` reach `gateway` only through the database. Both gateways call
 * `upstream`; `close()` stops everything.
 */
export async function gatewaysOnSqld(upstream: FakeUpstream) {
  const encryptionKey = randomBytes(32).toString('base64');
  const sqld = await startSqld();
  const proxy = await DatabaseProxy.start({ target: sqld.url });
  const gateway: TestGateway = await createTestGateway({
    env: { LIBSQL_URL: proxy.url, GATEWAY_ENCRYPTION_KEY: encryptionKey },
    deps: { fetch: upstream.fetch },
  });
  const other: TestGateway = await createTestGateway({
    env: { LIBSQL_URL: sqld.url, GATEWAY_ENCRYPTION_KEY: encryptionKey },
    deps: { fetch: upstream.fetch },
  });
  const elsewhere: Client = createClient({ url: sqld.url });
  return {
    proxy,
    gateway,
    other,
    elsewhere,
    close: async () => {
      elsewhere.close();
      await other.close();
      await gateway.close();
      await proxy.close();
      await sqld.stop();
    },
  };
}

/**
 * The round trips to the database `task` makes through `proxy`, counted from a quiet database
 * until it is quiet again: the writes after an answer (a run's last ones) included.
 */
export async function roundTrips(
  gateway: TestGateway,
  proxy: DatabaseProxy,
  task: () => Promise<unknown>,
): Promise<number> {
  await gateway.tasks.drain(10_000);
  await proxy.quiet();
  const before = proxy.count;
  await task();
  await gateway.tasks.drain(10_000);
  await proxy.quiet();
  return proxy.count - before;
}

/**
 * A new tenant of `gateway` with a default virtual key to the fake provider (http://fake.test), an
 * assistant, and a run of it completed on a new thread; the SDK with the tenant's key.
 */
export async function tenantWithRun(gateway: TestGateway) {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  const openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
  const assistant = await openai.beta.assistants.create({ model: 'fake-model' });
  const run = await openai.beta.threads.createAndRunPoll(
    { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: 'hello' }] } },
    { pollIntervalMs: 10 },
  );
  if (run.status !== 'completed') throw new Error(`the set-up run ended ${run.status}`);
  return { tenant, openai, run };
}

/** Revokes the API key `id` as the CLI or another gateway would: in the database `client` reaches, not through a gateway. */
export function revokeElsewhere(client: Client, id: string) {
  return client.execute({ sql: 'UPDATE api_keys SET revoked_at = ? WHERE id = ?', args: [Date.now(), id] });
}
