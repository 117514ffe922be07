import { createHash, randomBytes } from 'node:crypto';
import { createClient, type Client } from '@libsql/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../../scripts/sqld';
import { DatabaseProxy, whileDatabaseHeld } from '../../support/database-proxy';
import { defined } from '../../support/defined';
import { errorOf, json } from '../../support/envelope';
import { createFakeUpstream, fakeDirective } from '../../support/fake-upstream';
import { createTestGateway, type Tenant, type TestGateway } from '../../support/gateway';
import { createPolicy } from '../../support/ratelimit';
import { parseEventStream } from '../../support/sse';
import { waitFor } from '../../support/wait';

/**
 * A call passed through to a provider on a database server (LIBSQL_URL), started on the settings
 * this process last saw (identities/guessed.ts): the provider is called while the settings'
 * generation is read, and its answer is given only once they are confirmed. The changes that must
 * make it serve the request again are made as another gateway or the CLI would, straight in the
 * database (or through another gateway on it), after a call that left the settings in memory.
 */

let sqld: RunningSqld;
let proxy: DatabaseProxy & { url: string };
let gateway: TestGateway;
/** Another gateway on the same database, whose changes this one learns only from the database. */
let other: TestGateway;
let elsewhere: Client;
const upstream = createFakeUpstream();
const encryptionKey = randomBytes(32).toString('base64');

beforeAll(async () => {
  sqld = await startSqld();
  proxy = await DatabaseProxy.start({ target: sqld.url });
  gateway = await createTestGateway({
    env: { LIBSQL_URL: proxy.url, GATEWAY_ENCRYPTION_KEY: encryptionKey },
    deps: { fetch: upstream.fetch },
  });
  other = await createTestGateway({
    env: { LIBSQL_URL: sqld.url, GATEWAY_ENCRYPTION_KEY: encryptionKey },
    deps: { fetch: upstream.fetch },
  });
  elsewhere = createClient({ url: sqld.url });
});
afterAll(async () => {
  elsewhere.close();
  await other.close();
  await gateway.close();
  await proxy.close();
  await sqld.stop();
});
afterEach(async () => {
  expect(await gateway.tasks.drain(30_000)).toBe(true);
});

const FIRST_SECRET = 'sk-first-provider-key';
const SECOND_SECRET = 'sk-second-provider-key';

/** A tenant whose default virtual key `first` calls the fake with FIRST_SECRET; `second` (not default) with SECOND_SECRET. */
async function setup() {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, {
    slug: 'first',
    base_url: 'http://fake.test/v1',
    api_key: FIRST_SECRET,
    default: true,
  });
  await gateway.virtualKey(tenant, { slug: 'second', base_url: 'http://fake.test/v1', api_key: SECOND_SECRET });
  // The first call reads the settings; the second finds them held, as every call after it.
  for (let i = 0; i < 2; i++) expect((await complete(tenant, { stream: false })).status).toBe(200);
  return tenant;
}

function complete(tenant: Tenant, options: { stream: boolean; content?: string; store?: boolean }) {
  return gateway.request('/v1/chat/completions', {
    key: tenant.workspaceKey,
    body: {
      model: 'fake-model',
      stream: options.stream,
      ...(options.store && { store: true }),
      messages: [{ role: 'user', content: options.content ?? 'hello' }],
    },
  });
}

/** The requests the workspace's usage counts. */
async function usageRequests(tenant: Tenant): Promise<number> {
  const { rows } = await elsewhere.execute({
    sql: 'SELECT coalesce(sum(requests), 0) AS n FROM usage WHERE workspace_id = ?',
    args: [tenant.workspace.id],
  });
  return Number(defined(rows[0]).n);
}

const secretOf = (call: { headers: Record<string, string> }) => call.headers.authorization?.replace(/^Bearer /, '');

/** The text of a streamed chat completion's deltas. */
function streamedText(body: string): string {
  return parseEventStream(body)
    .map((event) => event.data as { choices?: { delta?: { content?: string } }[] })
    .map((chunk) => chunk.choices?.[0]?.delta?.content ?? '')
    .join('');
}

describe('a call passed through, started on the settings last seen', () => {
  it('calls the provider while the settings are being read, and answers once they are confirmed', async () => {
    const tenant = await setup();
    const { seen, answer, calls } = await whileDatabaseHeld(
      proxy,
      upstream,
      () => complete(tenant, { stream: true, content: 'quick' }),
      { atDatabase: true },
    );
    // The provider was called while the settings' generation waited at the database.
    expect(seen.called).toBe(1);
    expect(seen.waiting).toBeGreaterThan(0);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-gateway-virtual-key-used')).toBe('first');
    expect(streamedText(await answer.text())).toBe('You said: quick');
    expect(calls.map(secretOf)).toEqual([FIRST_SECRET]);
    await gateway.tasks.drain(10_000);
    expect(await usageRequests(tenant)).toBe(3);
  });

  it('answers 401 for a key revoked elsewhere: the provider call made on it is aborted, and counted nowhere', async () => {
    const tenant = await setup();
    const hash = createHash('sha256').update(tenant.workspaceKey).digest('hex');
    await elsewhere.execute({ sql: 'UPDATE api_keys SET revoked_at = ? WHERE hash = ?', args: [Date.now(), hash] });
    proxy.statements.length = 0;
    proxy.keepStatements = true;
    const { answer, calls } = await whileDatabaseHeld(proxy, upstream, () => complete(tenant, { stream: true }));
    proxy.keepStatements = false;
    expect(answer.status).toBe(401);
    // The generation is read once: the key is looked up again at the generation that read found.
    const generationReads = proxy.statements
      .flat()
      .filter((sql) => /^select\b/i.test(sql) && sql.includes('settings_generation'));
    expect(generationReads).toHaveLength(1);
    expect(await errorOf(answer)).toMatchObject({ code: 'invalid_api_key' });
    // The provider was called on the key as last seen, and that call was ended unanswered.
    expect(calls).toHaveLength(1);
    await waitFor(
      () => defined(calls[0]).outcome,
      (outcome) => outcome !== 'open',
    );
    expect(defined(calls[0]).outcome).toBe('cancelled');
    await gateway.tasks.drain(10_000);
    expect(await usageRequests(tenant)).toBe(2);
  });

  it("serves a call again with the virtual key changed elsewhere: the guessed key's answer is dropped, the new key's given", async () => {
    const tenant = await setup();
    /** Makes `slug` the workspace's default key, as another gateway or the CLI would. */
    const defaultElsewhere = (slug: string) =>
      elsewhere.batch(
        [
          { sql: 'UPDATE virtual_keys SET is_default = 0 WHERE workspace_id = ?', args: [tenant.workspace.id] },
          {
            sql: 'UPDATE virtual_keys SET is_default = 1 WHERE workspace_id = ? AND slug = ?',
            args: [tenant.workspace.id, slug],
          },
        ],
        'write',
      );
    // Streamed, and whole: this one's guess has its whole answer before the settings are back.
    const cases = [
      { stream: true, to: 'second', secrets: [FIRST_SECRET, SECOND_SECRET] },
      { stream: false, to: 'first', secrets: [SECOND_SECRET, FIRST_SECRET] },
    ];
    for (const { stream, to, secrets } of cases) {
      await defaultElsewhere(to);
      const { answer, calls } = await whileDatabaseHeld(
        proxy,
        upstream,
        () =>
          complete(tenant, { stream, store: true, content: `which key?\n${fakeDirective({ reply: 'the answer' })}` }),
        { answered: !stream },
      );
      expect(answer.status).toBe(200);
      expect(answer.headers.get('x-gateway-virtual-key-used')).toBe(to);
      const text = stream ? streamedText(await answer.text()) : (await json(answer)).choices[0].message.content;
      expect(text).toBe('the answer');
      // The first call, on the key as last seen, was dropped; the second, on the key as read, answered.
      expect(calls.map(secretOf)).toEqual(secrets);
      await waitFor(
        () => defined(calls[0]).outcome,
        (outcome) => outcome !== 'open',
      );
      expect(defined(calls[0]).outcome).toBe(stream ? 'cancelled' : 'completed');
    }
    await gateway.tasks.drain(10_000);
    // The two warm-up calls and the two answered: the dropped guesses counted nothing, and kept nothing.
    expect(await usageRequests(tenant)).toBe(4);
    const stored = await elsewhere.execute({
      sql: 'SELECT count(*) AS n FROM stored_chat_completions WHERE workspace_id = ?',
      args: [tenant.workspace.id],
    });
    expect(Number(defined(stored.rows[0]).n)).toBe(2);
  });

  it('applies a policy made by another gateway to the call that guessed without it, and refuses the next before its provider', async () => {
    const tenant = await setup();
    await createPolicy(other, tenant, { value: 1, unit: 'rpm' });
    const { answer, calls } = await whileDatabaseHeld(proxy, upstream, () => complete(tenant, { stream: true }));
    expect(answer.status).toBe(200);
    // Admitted under the policy as read: the guess, admitted without it, was dropped.
    expect(answer.headers.get('x-ratelimit-limit-requests')).toBe('1');
    expect(answer.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    await answer.text();
    expect(calls).toHaveLength(2);
    const before = upstream.requests.length;
    const refused = await complete(tenant, { stream: true });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-ratelimit-limit-requests')).toBe('1');
    expect(await errorOf(refused)).toMatchObject({ code: 'rate_limit_exceeded' });
    expect(upstream.requests.length).toBe(before);
  });
});
