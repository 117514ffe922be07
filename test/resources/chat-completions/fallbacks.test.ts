import OpenAI from 'openai';
import { closedBaseUrl } from '../../support/ports';
import { runCli } from '../../../src/cli/run';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defined } from '../../support/defined';
import { json } from '../../support/envelope';
import {
  fakeDirective,
  startFakeUpstream,
  type FakeScenario,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { createTestGateway, type Tenant, type TestGateway } from '../../support/gateway';
import { createPolicy, freshMinute, usedBy } from '../../support/ratelimit';
import { waitFor } from '../../support/wait';

/**
 * Retries and fallbacks of POST /v1/chat/completions and of a run's turn (providers/attempts.ts),
 * through the official SDK: a key that fails before its answer began is tried again or passes the
 * call to its fallback keys, each attempt counted, the answer's headers naming the key that served
 * it; nothing is tried again once the answer began.
 */

let gateway: TestGateway;
/** Answers what each test queues: a failure, then the built-in reply. */
let first: FakeUpstreamServer;
let second: FakeUpstreamServer;

beforeAll(async () => {
  [first, second] = await Promise.all([startFakeUpstream(), startFakeUpstream()]);
  gateway = await createTestGateway();
});
afterAll(async () => {
  await gateway.close();
  await first.close();
  await second.close();
});

/** The official SDK, the tenant's workspace key in the gateway's header. */
const clientOf = (tenant: Tenant) => gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });

/** A tenant whose default key calls `primary` (with `settings`), falling back to a key calling `second`. */
async function tenantWithFallback(primary: string, settings: Record<string, unknown> = {}) {
  const tenant = await gateway.tenant();
  const backup = await gateway.virtualKey(tenant, { slug: 'backup', base_url: second.baseURL });
  const main = await gateway.virtualKey(tenant, {
    slug: 'main',
    base_url: primary,
    default: true,
    fallbacks: [backup],
    ...settings,
  });
  return { tenant, main, backup, client: clientOf(tenant) };
}

/** How many requests each fake received during `act`. */
async function received(act: () => Promise<void>): Promise<{ first: number; second: number }> {
  const before = { first: first.requests.length, second: second.requests.length };
  await act();
  return { first: first.requests.length - before.first, second: second.requests.length - before.second };
}

/** The tenant's requests of `kind` this hour by virtual key (its slug), from GET /v1/usage. */
async function requestsByKey(tenant: Tenant, kind = 'chat_completions'): Promise<Record<string, number>> {
  const response = await gateway.request('/v1/usage?bucket_width=1h&limit=1&group_by=virtual_key,kind', {
    key: tenant.workspaceKey,
  });
  expect(response.status).toBe(200);
  const [bucket] = (await json(response)).data;
  const results = (bucket?.results ?? []) as { kind: string; virtual_key: string; num_requests: number }[];
  return Object.fromEntries(
    results.filter((result) => result.kind === kind).map((r) => [r.virtual_key, r.num_requests]),
  );
}

const asking = (text: string, scenario?: FakeScenario) => ({
  role: 'user' as const,
  content: scenario ? `${text}\n${fakeDirective(scenario)}` : text,
});

describe('chat completions', () => {
  it('a 500 from the first provider passes the call to the fallback key, and the headers name it', async () => {
    const { tenant, client } = await tenantWithFallback(first.baseURL);
    first.enqueue({ status: 500 });
    let answer: { data: OpenAI.ChatCompletion; response: Response } | undefined;
    const counts = await received(async () => {
      answer = await client.chat.completions.create({ model: 'gpt-4o', messages: [asking('hello')] }).withResponse();
    });
    const { data, response } = defined(answer);
    expect(counts).toEqual({ first: 1, second: 1 });
    expect(defined(data.choices[0]).message.content).toContain('hello');
    expect(response.headers.get('x-gateway-virtual-key-used')).toBe('backup');
    expect(response.headers.get('x-gateway-attempts')).toBe('2');
    const logged = gateway.logs.map((text) => JSON.parse(text) as Record<string, unknown>);
    expect(
      logged.find(
        (line) =>
          line.message === 'chat completion attempt failed; trying again' && line.workspace_id === tenant.workspace.id,
      ),
    ).toMatchObject({ virtual_key: 'main', next_virtual_key: 'backup', attempt: 1 });
    expect(
      logged.find((line) => line.message === 'chat completion' && line.workspace_id === tenant.workspace.id),
    ).toMatchObject({ virtual_key: 'backup', attempts: 2 });
    // Both attempts are counted, each on its own key; only the one that answered has tokens.
    const usage = await waitFor(
      () => requestsByKey(tenant),
      (byKey) => Object.keys(byKey).length === 2,
    );
    expect(usage).toEqual({ main: 1, backup: 1 });
  });

  it('a refused connection passes the call to the fallback key, streamed', async () => {
    const { client } = await tenantWithFallback(await closedBaseUrl());
    const counts = await received(async () => {
      const { data: stream, response } = await client.chat.completions
        .create({ model: 'gpt-4o', messages: [asking('streamed')], stream: true })
        .withResponse();
      expect(response.headers.get('x-gateway-virtual-key-used')).toBe('backup');
      expect(response.headers.get('x-gateway-attempts')).toBe('2');
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).toContain('streamed');
    });
    expect(counts).toEqual({ first: 0, second: 1 });
  });

  it('an embeddings call falls back the same way, each attempt counted as embeddings on its key', async () => {
    const { tenant, client } = await tenantWithFallback(await closedBaseUrl());
    const { data, response } = await client.embeddings
      .create({ model: 'text-embedding-3-small', input: 'fall back' })
      .withResponse();
    expect(data.data).toHaveLength(1);
    expect(response.headers.get('x-gateway-virtual-key-used')).toBe('backup');
    expect(response.headers.get('x-gateway-attempts')).toBe('2');
    const usage = await waitFor(
      () => requestsByKey(tenant, 'embeddings'),
      (byKey) => Object.keys(byKey).length === 2,
    );
    expect(usage).toEqual({ main: 1, backup: 1 });
    expect(await requestsByKey(tenant)).toEqual({});
  });

  it("a 429 is tried again with the same key after the provider's Retry-After", async () => {
    const { client } = await tenantWithFallback(first.baseURL, {
      retry: { attempts: 2, backoff_base_ms: 0, backoff_max_ms: 0 },
    });
    first.enqueue({ status: 429, retry_after: 1 });
    const counts = await received(async () => {
      const { response } = await client.chat.completions
        .create({ model: 'gpt-4o', messages: [asking('again')] })
        .withResponse();
      expect(response.headers.get('x-gateway-virtual-key-used')).toBe('main');
      expect(response.headers.get('x-gateway-attempts')).toBe('2');
    });
    expect(counts).toEqual({ first: 2, second: 0 });
    const [refused, served] = first.requests.slice(-2).map((request) => request.receivedAt);
    // Without Retry-After the backoff would have been 0 ms: the second attempt waited for the second asked.
    expect(defined(served) - defined(refused)).toBeGreaterThanOrEqual(900);
  });

  it('a Retry-After longer than the key honours moves the call to the fallback at once', async () => {
    const { client } = await tenantWithFallback(first.baseURL, {
      retry: { attempts: 3, max_retry_after_ms: 500 },
    });
    first.enqueue({ status: 503, retry_after: 30 });
    const counts = await received(async () => {
      const { response } = await client.chat.completions
        .create({ model: 'gpt-4o', messages: [asking('x')] })
        .withResponse();
      expect(response.headers.get('x-gateway-virtual-key-used')).toBe('backup');
    });
    expect(counts).toEqual({ first: 1, second: 1 });
  });

  it('a refusal that is not retryable (400) is answered as it is, the fallback not tried', async () => {
    const { client } = await tenantWithFallback(first.baseURL, { retry: { attempts: 3 } });
    first.enqueue({ status: 400 });
    const counts = await received(async () => {
      const refused = await client.chat.completions
        .create({ model: 'gpt-4o', messages: [asking('bad')] })
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect(refused instanceof OpenAI.APIError && refused.headers.get('x-gateway-attempts')).toBe('1');
    });
    expect(counts).toEqual({ first: 1, second: 0 });
  });

  it('when every key fails, the last failure is answered, naming the key of the last attempt', async () => {
    const { client } = await tenantWithFallback(first.baseURL);
    first.enqueue({ status: 500 });
    second.enqueue({ status: 503 });
    const counts = await received(async () => {
      const failed = await client.chat.completions
        .create({ model: 'gpt-4o', messages: [asking('nobody')] })
        .catch((error: unknown) => error);
      expect(failed).toBeInstanceOf(OpenAI.InternalServerError);
      if (!(failed instanceof OpenAI.APIError)) throw new Error('not an API error');
      expect(failed.status).toBe(503);
      expect(failed.headers.get('x-gateway-virtual-key-used')).toBe('backup');
      expect(failed.headers.get('x-gateway-attempts')).toBe('2');
    });
    expect(counts).toEqual({ first: 1, second: 1 });
  });

  it('a stream that fails once it began is not tried again', async () => {
    const { client } = await tenantWithFallback(first.baseURL, { retry: { attempts: 3 } });
    const counts = await received(async () => {
      const stream = await client.chat.completions.create({
        model: 'gpt-4o',
        messages: [asking('fail midway', { reply: 'one two three four five', error_after_chunks: 3 })],
        stream: true,
      });
      await expect(
        (async () => {
          for await (const _ of stream);
        })(),
      ).rejects.toThrow();
    });
    expect(counts).toEqual({ first: 1, second: 0 });
  });

  it('each further attempt is counted by the requests policies that match its key', async () => {
    const { tenant, client } = await tenantWithFallback(first.baseURL, {
      retry: { attempts: 2, backoff_base_ms: 0, backoff_max_ms: 0 },
    });
    freshMinute(gateway.clock);
    const policy = await createPolicy(gateway, tenant, { value: 10 });
    first.enqueue({ status: 500 }, { status: 502 });
    const { response } = await client.chat.completions
      .create({ model: 'gpt-4o', messages: [asking('counted')] })
      .withResponse();
    expect(response.headers.get('x-gateway-attempts')).toBe('3');
    expect(await usedBy(gateway.database.client, policy)).toBe(3);
  });
});

describe('runs', () => {
  it("a run whose key's provider fails before its first event falls back", async () => {
    const { tenant } = await tenantWithFallback(first.baseURL);
    const openai = clientOf(tenant);
    const assistant = await openai.beta.assistants.create({ model: 'fake-model', instructions: 'Be brief.' });
    first.enqueue({ status: 500 });
    const counts = await received(async () => {
      const run = await openai.beta.threads.createAndRunPoll({
        assistant_id: assistant.id,
        thread: { messages: [{ role: 'user', content: 'hello run' }] },
      });
      expect(run.status).toBe('completed');
      const messages = await openai.beta.threads.messages.list(run.thread_id);
      const reply = defined(messages.data[0]).content[0];
      expect(reply?.type === 'text' && reply.text.value).toContain('hello run');
    });
    expect(counts).toEqual({ first: 1, second: 1 });
    // The run's log line names the key that answered.
    const lines = gateway.logs.map((text) => JSON.parse(text) as Record<string, unknown>);
    const ended = lines.filter((line) => line.message === 'run ended' && line.workspace_id === tenant.workspace.id);
    expect(ended.map((line) => line.virtual_key)).toEqual(['backup']);
    // So does its trace, with both attempts: the main key's refused, the backup's answer.
    const [run] = (await json(await gateway.request('/v1/runs', { key: tenant.workspaceKey }))).data;
    const trace = await json(await gateway.request(`/v1/runs/${run.id}/trace`, { key: tenant.workspaceKey }));
    expect(trace.log).toMatchObject({ run_id: run.id, virtual_key: 'backup', status: 'completed' });
    expect(trace.attempts_total).toBe(2);
    expect(trace.attempts).toMatchObject([
      { virtual_key: 'main', model: 'fake-model', outcome: 'http_5xx', status: 500, duration_ms: expect.any(Number) },
      { virtual_key: 'backup', model: 'fake-model', outcome: 'ok', status: 200, first_byte_ms: expect.any(Number) },
    ]);
    expect(trace.events.map((event: { type: string }) => event.type)).toEqual(
      expect.arrayContaining(['created', 'started', 'attempt', 'step_created', 'step_ended', 'ended']),
    );
  });
});

describe('virtual key fields', () => {
  const create = (tenant: Tenant, body: Record<string, unknown>) =>
    gateway.request('/v1/virtual-keys', {
      key: tenant.workspaceKey,
      body: { provider: 'openai', api_key: 'sk-x', base_url: second.baseURL, ...body },
    });
  const update = (tenant: Tenant, slug: string, body: Record<string, unknown>) =>
    gateway.request(`/v1/virtual-keys/${slug}`, { key: tenant.workspaceKey, body });

  async function expectInvalid(response: Response, param: string) {
    expect(response.status).toBe(400);
    const { error } = await json(response);
    expect(error.param).toBe(param);
    expect(error.message).toContain(param.replace(/\[\d+\]$/, ''));
  }

  it('are shown on the key, the retry settings with their defaults', async () => {
    const tenant = await gateway.tenant();
    await create(tenant, { slug: 'b' });
    const response = await create(tenant, { slug: 'a', fallbacks: ['b'], retry: { attempts: 3 } });
    expect(response.status).toBe(200);
    expect(await json(response)).toMatchObject({
      fallbacks: ['b'],
      retry: {
        attempts: 3,
        on_statuses: [429, 500, 502, 503, 504],
        on_network_errors: true,
        backoff_base_ms: 250,
        backoff_max_ms: 4000,
        max_retry_after_ms: 10000,
      },
    });
    // An update changes what it sends and keeps the rest; null restores the defaults.
    const changed = await json(await update(tenant, 'a', { retry: { on_statuses: [503] } }));
    expect(changed.retry).toMatchObject({ attempts: 3, on_statuses: [503] });
    const reset = await json(await update(tenant, 'a', { retry: null, fallbacks: [] }));
    expect(reset).toMatchObject({ fallbacks: [], retry: { attempts: 1, on_statuses: [429, 500, 502, 503, 504] } });
  });

  it('bad values are a 400 naming the field', async () => {
    const tenant = await gateway.tenant();
    await create(tenant, { slug: 'other' });
    await expectInvalid(await create(tenant, { slug: 'k', retry: { attempts: 6 } }), 'retry.attempts');
    await expectInvalid(await create(tenant, { slug: 'k', retry: { attempts: 0 } }), 'retry.attempts');
    await expectInvalid(await create(tenant, { slug: 'k', retry: { on_statuses: [200] } }), 'retry.on_statuses[0]');
    await expectInvalid(
      await create(tenant, { slug: 'k', retry: { backoff_max_ms: 600_000 } }),
      'retry.backoff_max_ms',
    );
    await expectInvalid(await create(tenant, { slug: 'k', retry: { jitter: true } }), 'retry.jitter');
    await expectInvalid(
      await create(tenant, { slug: 'k', retry: { backoff_base_ms: 5000, backoff_max_ms: 1000 } }),
      'retry.backoff_base_ms',
    );
    await expectInvalid(await create(tenant, { slug: 'k', fallbacks: 'other' }), 'fallbacks');
    await expectInvalid(await create(tenant, { slug: 'k', fallbacks: ['other', 'other'] }), 'fallbacks[1]');
    await expectInvalid(await create(tenant, { slug: 'k', fallbacks: ['a', 'b', 'c', 'd', 'e', 'f'] }), 'fallbacks');
    await expectInvalid(await create(tenant, { slug: 'k', fallbacks: ['nobody'] }), 'fallbacks[0]');
    await expectInvalid(await create(tenant, { slug: 'k', fallbacks: ['k'] }), 'fallbacks[0]');
  });

  it("a fallback that leads back to the key is a cycle; another workspace's slug is unknown", async () => {
    const tenant = await gateway.tenant();
    await create(tenant, { slug: 'x' });
    expect((await create(tenant, { slug: 'y', fallbacks: ['x'] })).status).toBe(200);
    expect((await create(tenant, { slug: 'z', fallbacks: ['y'] })).status).toBe(200);
    const cycle = await update(tenant, 'x', { fallbacks: ['z'] });
    await expectInvalid(cycle, 'fallbacks[0]');
    const other = await gateway.tenant();
    await expectInvalid(await create(other, { slug: 'w', fallbacks: ['x'] }), 'fallbacks[0]');
  });

  it('the CLI sets them as the API does, and refuses what it refuses', async () => {
    const tenant = await gateway.tenant();
    await create(tenant, { slug: 'spare' });
    const cli = async (args: string[]) => {
      let stdout = '';
      let stderr = '';
      const code = await runCli(
        ['virtual-keys', ...args, '--workspace', tenant.workspace.slug],
        { DATA_DIR: gateway.dataDir, LOG_LEVEL: 'warn', GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' },
        { stdout: (text) => (stdout += text), stderr: (text) => (stderr += text), stdin: async () => 'sk-cli' },
      );
      return { code, stdout, stderr };
    };
    const created = await cli([
      'create',
      '--slug',
      'cli',
      '--provider',
      'openai',
      '--base-url',
      second.baseURL,
      '--fallbacks',
      'spare',
      '--retry',
      '{"attempts":2}',
      '--api-key-stdin',
      '--json',
    ]);
    expect(created.code).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({ fallbacks: ['spare'], retry: { attempts: 2 } });
    const cleared = await cli(['update', 'cli', '--fallbacks', '', '--retry', 'null', '--json']);
    expect(JSON.parse(cleared.stdout)).toMatchObject({ fallbacks: [], retry: { attempts: 1 } });
    const refused = await cli(['update', 'cli', '--retry', '{"attempts":9}']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('retry.attempts');
    const malformed = await cli(['update', 'cli', '--retry', '{attempts']);
    expect(malformed.code).not.toBe(0);
    expect(malformed.stderr).toContain('--retry takes a JSON object');
  });
});
