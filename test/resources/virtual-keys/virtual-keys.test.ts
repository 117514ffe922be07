import { defined } from '../../support/defined';
import { createClient } from '@libsql/client';
import { eq } from 'drizzle-orm';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli as runCliInProcess } from '../../../src/cli/run';
import { virtualKeys } from '../../../src/db/schema';
import { checkUpstreamUrl } from '../../../src/lib/upstream-url';
import { decryptVirtualKeySecret, getVirtualKey } from '../../../src/resources/virtual-keys/commands';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * Virtual keys: the upstream URL rules, the API (create, list, revoke) with workspace and
 * organisation keys, encryption at rest, the CLI, and the x-gateway-virtual-key middleware.
 */

let gateway: TestGateway;
let tenant: Tenant;
/** Every response body seen, to prove no provider secret ever leaves. */
const seen: string[] = [];
/** Provider secrets used in this file: none may appear in a response, a log line or the database. */
const SECRETS = new Set<string>();

const secret = (label: string) => {
  const value = `sk-test-${label}-${crypto.randomUUID()}`;
  SECRETS.add(value);
  return value;
};

beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
});
afterAll(() => gateway.close());

async function call(path: string, init: Parameters<TestGateway['request']>[1]) {
  const response = await gateway.request(path, init);
  seen.push(await response.clone().text());
  return response;
}

/** The gateway's clock, in the seconds its objects' timestamps count. */
const nowSeconds = () => Math.floor(gateway.clock.now() / 1000);

const create = (key: string, body: Record<string, unknown>) =>
  call('/v1/virtual-keys', { key, body: { api_key: secret('create'), ...body } });

describe('checkUpstreamUrl', () => {
  // [url, answer when private addresses are refused, answer when they are allowed]
  type Verdict = 'ok' | 'metadata' | 'private' | 'scheme' | 'credentials' | 'fragment' | 'invalid';
  const table: [string, Verdict, Verdict][] = [
    ['https://api.openai.com/v1', 'ok', 'ok'],
    ['https://myres.openai.azure.com', 'ok', 'ok'],
    ['http://8.8.8.8:8080/v1', 'ok', 'ok'],
    ['http://[2001:db8::1]/v1', 'ok', 'ok'],
    ['http://[::ffff:8.8.8.8]/', 'ok', 'ok'],
    ['http://172.15.0.1/', 'ok', 'ok'],
    ['http://172.32.0.1/', 'ok', 'ok'],
    ['http://100.128.0.1/', 'ok', 'ok'],
    ['http://127.0.0.1.nip.io/', 'ok', 'ok'], // a name: resolved at fetch time, not judged here
    ['https://example.com/v1?x=1', 'ok', 'ok'],
    // cloud metadata and link-local: never
    ['http://169.254.169.254/latest/meta-data/', 'metadata', 'metadata'],
    ['http://169.254.0.1/', 'metadata', 'metadata'],
    ['http://169.254.255.255/', 'metadata', 'metadata'],
    ['http://2852039166/', 'metadata', 'metadata'], // decimal 169.254.169.254
    ['http://0xA9FEA9FE/', 'metadata', 'metadata'], // hexadecimal
    ['http://0251.0376.0251.0376/', 'metadata', 'metadata'], // octal
    ['http://169.254.169.254./', 'metadata', 'metadata'], // trailing dot
    ['http://[::ffff:169.254.169.254]/', 'metadata', 'metadata'], // IPv4-mapped
    ['http://[::ffff:a9fe:a9fe]/', 'metadata', 'metadata'],
    ['http://[64:ff9b::169.254.169.254]/', 'metadata', 'metadata'], // NAT64
    ['http://[fd00:ec2::254]/', 'metadata', 'metadata'],
    ['http://[FD00:0EC2:0000::0254]/', 'metadata', 'metadata'],
    ['http://[fe80::1]/', 'metadata', 'metadata'],
    ['http://[febf:ffff::1]/', 'metadata', 'metadata'],
    ['http://metadata.google.internal/computeMetadata/v1/', 'metadata', 'metadata'],
    ['http://METADATA.google.internal./', 'metadata', 'metadata'],
    ['http://100.100.100.200/', 'metadata', 'metadata'],
    // loopback, private, CGNAT, unspecified: only when allowed
    ['http://127.0.0.1:11434/v1', 'private', 'ok'],
    ['http://127.1/', 'private', 'ok'],
    ['http://127.255.255.254/', 'private', 'ok'],
    ['http://localhost:8000/v1', 'private', 'ok'],
    ['http://LOCALHOST./', 'private', 'ok'],
    ['http://vllm.localhost/', 'private', 'ok'],
    ['http://[::1]:8080/', 'private', 'ok'],
    ['http://[0:0:0:0:0:0:0:1]/', 'private', 'ok'],
    ['http://[::ffff:127.0.0.1]/', 'private', 'ok'],
    ['http://[::ffff:10.1.2.3]/', 'private', 'ok'],
    ['http://10.0.0.5/', 'private', 'ok'],
    ['http://172.16.0.1/', 'private', 'ok'],
    ['http://172.31.255.255/', 'private', 'ok'],
    ['http://192.168.1.20:1234/', 'private', 'ok'],
    ['http://100.64.0.1/', 'private', 'ok'],
    ['http://100.127.255.255/', 'private', 'ok'],
    ['http://0.0.0.0:11434/', 'private', 'ok'],
    ['http://0/', 'private', 'ok'],
    ['http://[::]/', 'private', 'ok'],
    ['http://[fc00::1]/', 'private', 'ok'],
    ['http://[fdff:1234::5]/', 'private', 'ok'],
    // not an upstream URL at all
    ['ftp://example.com/', 'scheme', 'scheme'],
    ['file:///etc/passwd', 'scheme', 'scheme'],
    ['javascript:alert(1)', 'scheme', 'scheme'],
    ['https://user:pass@example.com/', 'credentials', 'credentials'],
    ['https://token@example.com/', 'credentials', 'credentials'],
    ['https://example.com/v1#frag', 'fragment', 'fragment'],
    ['https://example.com/v1#', 'fragment', 'fragment'],
    ['api.openai.com/v1', 'invalid', 'invalid'],
    ['/v1/chat/completions', 'invalid', 'invalid'],
    ['', 'invalid', 'invalid'],
    ['http://[fe80::1%25eth0]/', 'invalid', 'invalid'],
  ];
  const patterns: Record<Exclude<Verdict, 'ok'>, RegExp> = {
    metadata: /cloud metadata and link-local addresses are never allowed/,
    private: /refused as upstreams unless GATEWAY_ALLOW_PRIVATE_UPSTREAMS/,
    scheme: /expected an http or https URL/,
    credentials: /must not contain credentials/,
    fragment: /must not contain a fragment/,
    invalid: /expected an absolute http or https URL/,
  };
  const expectVerdict = (answer: string | null, verdict: Verdict) =>
    verdict === 'ok' ? expect(answer).toBeNull() : expect(answer).toMatch(patterns[verdict]);

  for (const [url, refused, allowed] of table) {
    it(`${url || '(empty)'}: ${refused} / ${allowed} with private upstreams allowed`, () => {
      expectVerdict(checkUpstreamUrl(url, { allowPrivate: false }), refused);
      expectVerdict(checkUpstreamUrl(url, { allowPrivate: true }), allowed);
    });
  }
});

describe('POST /v1/virtual-keys', () => {
  it('creates an openai key in the workspace of a workspace key, with the default base_url', async () => {
    const apiKey = secret('openai');
    const before = nowSeconds();
    const response = await call('/v1/virtual-keys', {
      key: tenant.workspaceKey,
      body: { slug: 'openai-main', provider: 'openai', api_key: apiKey },
    });
    const after = nowSeconds();
    expect(response.status).toBe(200);
    const body = await json(response);
    expect(Object.keys(body).sort()).toEqual(
      [
        'base_url',
        'created_at',
        'default',
        'fallbacks',
        'id',
        'models',
        'object',
        'provider',
        'retry',
        'revoked_at',
        'slug',
        'workspace_id',
      ].sort(),
    );
    expect(body).toMatchObject({
      object: 'virtual_key',
      slug: 'openai-main',
      provider: 'openai',
      base_url: 'https://api.openai.com/v1',
      workspace_id: tenant.workspace.id,
      revoked_at: null,
      models: [],
      default: false,
    });
    // The clock's second when the key was written: between the request's start and its answer.
    expect(body.created_at).toBeGreaterThanOrEqual(before);
    expect(body.created_at).toBeLessThanOrEqual(after);
  });

  it('creates an azure-openai key with its options, and keeps base_url without a trailing slash', async () => {
    const response = await create(tenant.orgKey, {
      workspace_id: tenant.workspace.slug,
      slug: 'azure',
      provider: 'azure-openai',
      base_url: 'https://myres.openai.azure.com/',
      api_version: '2024-10-21',
      deployment: 'gpt-4o-prod',
    });
    expect(response.status).toBe(200);
    expect(await json(response)).toMatchObject({
      slug: 'azure',
      provider: 'azure-openai',
      base_url: 'https://myres.openai.azure.com',
      api_version: '2024-10-21',
      deployment: 'gpt-4o-prod',
      // The model the deployment serves: by default its name.
      model: 'gpt-4o-prod',
      workspace_id: tenant.workspace.id,
    });
  });

  it('stores the model an azure-openai deployment serves, shown with the key', async () => {
    const response = await create(tenant.workspaceKey, {
      slug: 'azure-model',
      provider: 'azure-openai',
      base_url: 'https://myres.openai.azure.com',
      api_version: '2024-10-21',
      deployment: 'prod-east',
      model: 'gpt-4o-2024-08-06',
    });
    expect(await json(response)).toMatchObject({ deployment: 'prod-east', model: 'gpt-4o-2024-08-06' });
    const listed = (await json(await call('/v1/virtual-keys', { key: tenant.workspaceKey }))).data.find(
      (item: { slug: string }) => item.slug === 'azure-model',
    );
    expect(listed).toMatchObject({ deployment: 'prod-east', model: 'gpt-4o-2024-08-06' });
  });

  it('accepts a local server whose key is a placeholder ("none"), where private upstreams are allowed', async () => {
    const response = await call('/v1/virtual-keys', {
      key: tenant.workspaceKey,
      body: { slug: 'ollama', provider: 'openai', base_url: 'http://127.0.0.1:11434/v1', api_key: 'none' },
    });
    expect(response.status).toBe(200);
    expect((await json(response)).base_url).toBe('http://127.0.0.1:11434/v1');
  });

  it('needs workspace_id with an organisation key, and refuses another workspace', async () => {
    const missing = await errorOf(await create(tenant.orgKey, { slug: 'x', provider: 'openai' }));
    expect(missing).toMatchObject({ status: 400, code: 'missing_required_parameter', param: 'workspace_id' });

    const other = await gateway.tenant();
    const foreign = await errorOf(
      await create(tenant.orgKey, { slug: 'x', provider: 'openai', workspace_id: other.workspace.id }),
    );
    expect(foreign).toMatchObject({ status: 403, code: 'workspace_forbidden', param: 'workspace_id' });
    const sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    const notOwn = await errorOf(
      await create(tenant.workspaceKey, { slug: 'x', provider: 'openai', workspace_id: sibling.workspace.slug }),
    );
    expect(notOwn).toMatchObject({ status: 403, code: 'workspace_forbidden', param: 'workspace_id' });
    const own = await create(tenant.workspaceKey, {
      slug: 'own-ws',
      provider: 'openai',
      workspace_id: tenant.workspace.id,
    });
    expect(own.status).toBe(200);
  });

  const azure = {
    provider: 'azure-openai',
    base_url: 'https://r.openai.azure.com',
    api_version: '2024-10-21',
    deployment: 'd1',
  };
  const invalid: [string, Record<string, unknown>, string, string][] = [
    ['slug missing', { provider: 'openai' }, 'missing_required_parameter', 'slug'],
    ['slug empty', { slug: '', provider: 'openai' }, 'string_below_min_length', 'slug'],
    ['slug too long', { slug: 'a'.repeat(65), provider: 'openai' }, 'string_above_max_length', 'slug'],
    ['slug uppercase', { slug: 'Main', provider: 'openai' }, 'invalid_value', 'slug'],
    ['slug leading hyphen', { slug: '-main', provider: 'openai' }, 'invalid_value', 'slug'],
    ['slug leading dot', { slug: '.main', provider: 'openai' }, 'invalid_value', 'slug'],
    ['slug with a space', { slug: 'my key', provider: 'openai' }, 'invalid_value', 'slug'],
    ['slug with a slash', { slug: 'a/b', provider: 'openai' }, 'invalid_value', 'slug'],
    ['slug a number', { slug: 12, provider: 'openai' }, 'invalid_type', 'slug'],
    ['provider missing', { slug: 'p' }, 'missing_required_parameter', 'provider'],
    ['provider unknown', { slug: 'p', provider: 'anthropic' }, 'invalid_value', 'provider'],
    ['provider in capitals', { slug: 'p', provider: 'OpenAI' }, 'invalid_value', 'provider'],
    ['azure without base_url', { ...azure, slug: 'p', base_url: undefined }, 'missing_required_parameter', 'base_url'],
    [
      'azure without api_version',
      { ...azure, slug: 'p', api_version: undefined },
      'missing_required_parameter',
      'api_version',
    ],
    [
      'azure without deployment',
      { ...azure, slug: 'p', deployment: undefined },
      'missing_required_parameter',
      'deployment',
    ],
    ['azure deployment with a slash', { ...azure, slug: 'p', deployment: '../admin' }, 'invalid_value', 'deployment'],
    ['azure deployment ..', { ...azure, slug: 'p', deployment: '..' }, 'invalid_value', 'deployment'],
    ['azure api_version with &', { ...azure, slug: 'p', api_version: '2024&x=1' }, 'invalid_value', 'api_version'],
    [
      'openai with api_version',
      { slug: 'p', provider: 'openai', api_version: '2024-10-21' },
      'unknown_parameter',
      'api_version',
    ],
    ['openai with deployment', { slug: 'p', provider: 'openai', deployment: 'd' }, 'unknown_parameter', 'deployment'],
    ['openai with model', { slug: 'p', provider: 'openai', model: 'gpt-4o' }, 'unknown_parameter', 'model'],
    ['azure model empty', { ...azure, slug: 'p', model: '' }, 'string_below_min_length', 'model'],
    ['azure model too long', { ...azure, slug: 'p', model: 'm'.repeat(257) }, 'string_above_max_length', 'model'],
    ['api_key missing', { slug: 'p', provider: 'openai', api_key: undefined }, 'missing_required_parameter', 'api_key'],
    ['api_key empty', { slug: 'p', provider: 'openai', api_key: '' }, 'string_below_min_length', 'api_key'],
    [
      'api_key too long',
      { slug: 'p', provider: 'openai', api_key: 'k'.repeat(4097) },
      'string_above_max_length',
      'api_key',
    ],
    ['api_key not a string', { slug: 'p', provider: 'openai', api_key: 42 }, 'invalid_type', 'api_key'],
    ['base_url empty', { slug: 'p', provider: 'openai', base_url: '' }, 'string_below_min_length', 'base_url'],
    [
      'base_url relative',
      { slug: 'p', provider: 'openai', base_url: 'api.openai.com/v1' },
      'invalid_value',
      'base_url',
    ],
    ['base_url ftp', { slug: 'p', provider: 'openai', base_url: 'ftp://example.com' }, 'invalid_value', 'base_url'],
    [
      'base_url with credentials',
      { slug: 'p', provider: 'openai', base_url: 'https://u:p@example.com/v1' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url with a fragment',
      { slug: 'p', provider: 'openai', base_url: 'https://example.com/v1#x' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url with a query',
      { slug: 'p', provider: 'openai', base_url: 'https://example.com/v1?a=b' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url metadata',
      { slug: 'p', provider: 'openai', base_url: 'http://169.254.169.254/latest' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url metadata, decimal',
      { slug: 'p', provider: 'openai', base_url: 'http://2852039166/' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url metadata, IPv6',
      { slug: 'p', provider: 'openai', base_url: 'http://[fd00:ec2::254]/' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url metadata name',
      { slug: 'p', provider: 'openai', base_url: 'http://metadata.google.internal/' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url azure metadata',
      { ...azure, slug: 'p', base_url: 'http://[::ffff:169.254.169.254]' },
      'invalid_value',
      'base_url',
    ],
    [
      'base_url too long',
      { slug: 'p', provider: 'openai', base_url: `https://e.com/${'a'.repeat(2048)}` },
      'string_above_max_length',
      'base_url',
    ],
    ['unknown field', { slug: 'p', provider: 'openai', organisation: 'x' }, 'unknown_parameter', 'organisation'],
  ];
  for (const [name, body, code, param] of invalid) {
    it(`400 ${code} naming ${param}: ${name}`, async () => {
      const error = await errorOf(await create(tenant.workspaceKey, body));
      expect(error).toMatchObject({ status: 400, code, param, type: 'invalid_request_error' });
      expect(error.message).toContain(param);
    });
  }

  it('accepts the bounds: a 1- and a 64-character slug, dots and underscores, a 4096-character key', async () => {
    for (const slug of ['a', '9', 'a'.repeat(64), 'team.a_b-c']) {
      expect((await create(tenant.workspaceKey, { slug, provider: 'openai' })).status).toBe(200);
    }
    const long = await create(tenant.workspaceKey, { slug: 'long-key', provider: 'openai', api_key: 'k'.repeat(4096) });
    expect(long.status).toBe(200);
  });

  it('refuses loopback and private base URLs where GATEWAY_ALLOW_PRIVATE_UPSTREAMS is false', async () => {
    const strict = await createTestGateway({ env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'false' } });
    try {
      const strictTenant = await strict.tenant();
      const post = (slug: string, base_url: string) =>
        strict.request('/v1/virtual-keys', {
          key: strictTenant.workspaceKey,
          body: { slug, provider: 'openai', base_url, api_key: 'none' },
        });
      for (const url of [
        'http://127.0.0.1:11434/v1',
        'http://localhost/v1',
        'http://10.0.0.2/v1',
        'http://[::1]/',
        'http://0.0.0.0/',
      ]) {
        const error = await errorOf(await post('local', url));
        expect(error).toMatchObject({ status: 400, code: 'invalid_value', param: 'base_url' });
        expect(error.message).toContain('GATEWAY_ALLOW_PRIVATE_UPSTREAMS');
      }
      expect((await errorOf(await post('meta', 'http://169.254.169.254/'))).message).toContain('never allowed');
      expect((await post('public', 'https://api.together.xyz/v1')).status).toBe(200);
    } finally {
      await strict.close();
    }
  });

  it('answers 409 for a live slug taken in the workspace; other workspaces and revoked slugs are free', async () => {
    const first = await create(tenant.workspaceKey, { slug: 'dup', provider: 'openai' });
    expect(first.status).toBe(200);
    const duplicate = await errorOf(await create(tenant.workspaceKey, { slug: 'dup', provider: 'openai' }));
    expect(duplicate).toMatchObject({ status: 409, code: 'already_exists', param: 'slug' });
    expect(duplicate.message).toContain("'dup'");

    const other = await gateway.tenant({ organisationId: tenant.organisationId });
    expect((await create(other.workspaceKey, { slug: 'dup', provider: 'openai' })).status).toBe(200);

    const revoked = await call('/v1/virtual-keys/dup', { key: tenant.workspaceKey, method: 'DELETE' });
    expect(revoked.status).toBe(200);
    const again = await create(tenant.workspaceKey, { slug: 'dup', provider: 'openai' });
    expect(again.status).toBe(200);
    const [firstId, againId] = [(await json(first)).id, (await json(again)).id];
    expect(againId).not.toBe(firstId);

    const all = await json(await call('/v1/virtual-keys?include_revoked=true', { key: tenant.workspaceKey }));
    const dups = all.data.filter((key: { slug: string }) => key.slug === 'dup');
    expect(dups.map((key: { id: string }) => key.id)).toEqual([againId, firstId]);
    expect(dups[1].revoked_at).toEqual(expect.any(Number));
  });
});

describe('GET /v1/virtual-keys', () => {
  let org: Tenant;
  let sibling: Tenant;
  beforeAll(async () => {
    org = await gateway.tenant();
    sibling = await gateway.tenant({ organisationId: org.organisationId });
    for (const slug of ['one', 'two', 'three']) await create(org.workspaceKey, { slug, provider: 'openai' });
    await create(sibling.workspaceKey, { slug: 'sib', provider: 'openai' });
    await call('/v1/virtual-keys/two', { key: org.workspaceKey, method: 'DELETE' });
    await create((await gateway.tenant()).workspaceKey, { slug: 'stranger', provider: 'openai' });
  });

  const slugs = async (path: string, key: string) => {
    const response = await call(path, { key });
    expect(response.status).toBe(200);
    const body = await json(response);
    expect(body.object).toBe('list');
    return body.data.map((item: { slug: string }) => item.slug);
  };

  it('lists the live keys of a workspace key’s workspace, newest first', async () => {
    expect(await slugs('/v1/virtual-keys', org.workspaceKey)).toEqual(['three', 'one']);
    expect(await slugs('/v1/virtual-keys?include_revoked=true', org.workspaceKey)).toEqual(['three', 'two', 'one']);
    expect(await slugs('/v1/virtual-keys?include_revoked=false', org.workspaceKey)).toEqual(['three', 'one']);
  });

  it('lists the whole organisation for an organisation key, or one workspace it names', async () => {
    expect(await slugs('/v1/virtual-keys', org.orgKey)).toEqual(['sib', 'three', 'one']);
    expect(await slugs(`/v1/virtual-keys?workspace_id=${sibling.workspace.slug}`, org.orgKey)).toEqual(['sib']);
    expect(await slugs(`/v1/virtual-keys?workspace_id=${org.workspace.id}`, org.orgKey)).toEqual(['three', 'one']);
  });

  it('refuses other workspaces and bad query parameters', async () => {
    const foreign = await errorOf(
      await call(`/v1/virtual-keys?workspace_id=${tenant.workspace.id}`, { key: org.orgKey }),
    );
    expect(foreign).toMatchObject({ status: 403, code: 'workspace_forbidden', param: 'workspace_id' });
    const sib = await errorOf(
      await call(`/v1/virtual-keys?workspace_id=${sibling.workspace.id}`, { key: org.workspaceKey }),
    );
    expect(sib).toMatchObject({ status: 403, param: 'workspace_id' });
    const flag = await errorOf(await call('/v1/virtual-keys?include_revoked=yes', { key: org.workspaceKey }));
    expect(flag).toMatchObject({ status: 400, code: 'invalid_value', param: 'include_revoked' });
    const unknown = await errorOf(await call('/v1/virtual-keys?limit=5', { key: org.workspaceKey }));
    expect(unknown).toMatchObject({ status: 400, code: 'unknown_parameter', param: 'limit' });
  });
});

describe('DELETE /v1/virtual-keys/{slug}', () => {
  it('revokes a live key, then 404s; unknown and other workspaces’ slugs are 404', async () => {
    const owner = await gateway.tenant();
    const neighbour = await gateway.tenant({ organisationId: owner.organisationId });
    await create(owner.workspaceKey, { slug: 'doomed', provider: 'openai' });
    await create(neighbour.workspaceKey, { slug: 'theirs', provider: 'openai' });

    gateway.clock.advance(5_000);
    const before = nowSeconds();
    const response = await call('/v1/virtual-keys/doomed', { key: owner.workspaceKey, method: 'DELETE' });
    const after = nowSeconds();
    expect(response.status).toBe(200);
    const revoked = await json(response);
    expect(revoked).toMatchObject({ object: 'virtual_key', slug: 'doomed', workspace_id: owner.workspace.id });
    expect(revoked.revoked_at).toBeGreaterThanOrEqual(before);
    expect(revoked.revoked_at).toBeLessThanOrEqual(after);
    expect(revoked.revoked_at).toBeGreaterThan(revoked.created_at);

    for (const [slug, key] of [
      ['doomed', owner.workspaceKey],
      ['nothing', owner.workspaceKey],
      ['theirs', owner.workspaceKey],
    ] as const) {
      const error = await errorOf(await call(`/v1/virtual-keys/${slug}`, { key, method: 'DELETE' }));
      expect(error).toMatchObject({ status: 404, code: 'virtual_key_not_found', param: 'slug' });
    }
    // The neighbour's key survived the attempt.
    expect((await json(await call('/v1/virtual-keys', { key: neighbour.workspaceKey }))).data[0].slug).toBe('theirs');
  });

  it('needs workspace_id with an organisation key', async () => {
    const owner = await gateway.tenant();
    await create(owner.workspaceKey, { slug: 'k', provider: 'openai' });
    const missing = await errorOf(await call('/v1/virtual-keys/k', { key: owner.orgKey, method: 'DELETE' }));
    expect(missing).toMatchObject({ status: 400, code: 'missing_required_parameter', param: 'workspace_id' });
    const ok = await call(`/v1/virtual-keys/k?workspace_id=${owner.workspace.slug}`, {
      key: owner.orgKey,
      method: 'DELETE',
    });
    expect(ok.status).toBe(200);
  });
});

describe('the provider secret', () => {
  it('is stored encrypted, bound to its row, and decrypts to what was sent', async () => {
    const owner = await gateway.tenant();
    const apiKey = secret('stored');
    const created = await json(await create(owner.workspaceKey, { slug: 'enc', provider: 'openai', api_key: apiKey }));
    const other = await json(await create(owner.workspaceKey, { slug: 'enc2', provider: 'openai' }));

    // Straight from the file, past every mapper of the app.
    const client = createClient({ url: `file:${join(gateway.dataDir, 'gateway.db')}` });
    const rows = await client.execute({ sql: 'SELECT * FROM virtual_keys WHERE id = ?', args: [created.id] });
    client.close();
    const row = defined(rows.rows[0]);
    expect(JSON.stringify(row)).not.toContain(apiKey);
    expect(String(row.secret_ciphertext)).toMatch(/^v1\./);

    const key = defined(await getVirtualKey(gateway.database.db, created.id));
    expect(await decryptVirtualKeySecret(gateway.deps.secrets, key)).toBe(apiKey);

    // The ciphertext copied onto another row does not open there.
    await gateway.database.db
      .update(virtualKeys)
      .set({ secretCiphertext: key.secretCiphertext })
      .where(eq(virtualKeys.id, other.id));
    const moved = defined(await getVirtualKey(gateway.database.db, other.id));
    await expect(decryptVirtualKeySecret(gateway.deps.secrets, moved)).rejects.toThrow(/Cannot decrypt/);
  });
});

describe('the CLI', () => {
  let owner: Tenant;
  beforeAll(async () => {
    owner = await gateway.tenant();
  });

  /** The CLI in-process on the gateway's own database and key file. */
  async function cli(args: string[], options: { stdin?: string; env?: Record<string, string> } = {}) {
    let stdout = '';
    let stderr = '';
    const code = await runCliInProcess(
      args,
      { DATA_DIR: gateway.dataDir, LOG_LEVEL: 'warn', ...options.env },
      {
        stdout: (text) => (stdout += text),
        stderr: (text) => (stderr += text),
        stdin: async () => options.stdin ?? '',
      },
    );
    seen.push(stdout, stderr);
    return { code, stdout, stderr };
  }

  it('creates a key from stdin; the gateway lists it and decrypts the trimmed secret', async () => {
    const apiKey = secret('cli-stdin');
    const result = await cli(
      [
        'virtual-keys',
        'create',
        '--workspace',
        owner.workspace.slug,
        '--slug',
        'from-stdin',
        '--provider',
        'openai',
        '--api-key-stdin',
        '--json',
      ],
      { stdin: `${apiKey}\n` },
    );
    expect(result).toMatchObject({ code: 0, stderr: '' });
    const created = JSON.parse(result.stdout);
    expect(created).toMatchObject({ object: 'virtual_key', slug: 'from-stdin', workspace_id: owner.workspace.id });

    const listed = await json(await call('/v1/virtual-keys', { key: owner.workspaceKey }));
    expect(listed.data.map((key: { id: string }) => key.id)).toContain(created.id);
    const key = defined(await getVirtualKey(gateway.database.db, created.id));
    expect(await decryptVirtualKeySecret(gateway.deps.secrets, key)).toBe(apiKey);
  });

  it('creates an azure key from a named environment variable, and prints text for people', async () => {
    const apiKey = secret('cli-env');
    const result = await cli(
      [
        'virtual-keys',
        'create',
        '--workspace',
        owner.workspace.id,
        '--slug',
        'from-env',
        '--provider',
        'azure-openai',
        '--base-url',
        'https://r.openai.azure.com',
        '--api-version',
        '2024-10-21',
        '--deployment',
        'gpt4o',
        '--model',
        'gpt-4o',
        '--api-key-env',
        'MY_AZURE_KEY',
      ],
      { env: { MY_AZURE_KEY: apiKey } },
    );
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("Created virtual key 'from-env' (azure-openai, https://r.openai.azure.com)");
    const key = (await json(await call('/v1/virtual-keys', { key: owner.workspaceKey }))).data.find(
      (item: { slug: string }) => item.slug === 'from-env',
    );
    expect(key).toMatchObject({
      provider: 'azure-openai',
      api_version: '2024-10-21',
      deployment: 'gpt4o',
      model: 'gpt-4o',
    });
    expect(
      await decryptVirtualKeySecret(gateway.deps.secrets, defined(await getVirtualKey(gateway.database.db, key.id))),
    ).toBe(apiKey);
  });

  it('refuses a key on the command line, both or neither source, and an unset variable (exit 2)', async () => {
    const base = [
      'virtual-keys',
      'create',
      '--workspace',
      owner.workspace.id,
      '--slug',
      'nope',
      '--provider',
      'openai',
    ];
    const flag = await cli([...base, '--api-key', 'sk-on-the-command-line']);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain('shell history');
    expect((await cli([...base])).stderr).toContain('exactly one of --api-key-stdin and --api-key-env');
    expect((await cli([...base, '--api-key-stdin', '--api-key-env', 'X'], { stdin: 'k' })).code).toBe(2);
    const unset = await cli([...base, '--api-key-env', 'SURELY_NOT_SET_ANYWHERE']);
    expect(unset).toMatchObject({ code: 2 });
    expect(unset.stderr).toContain('the environment variable that --api-key-env names is not set');
    const unknownWorkspace = await cli(
      ['virtual-keys', 'create', '--workspace', 'no-such-ws', '--slug', 'x', '--provider', 'openai', '--api-key-stdin'],
      { stdin: 'k' },
    );
    expect(unknownWorkspace.code).toBe(2);
    expect(
      (await json(await call('/v1/virtual-keys', { key: owner.workspaceKey }))).data.map(
        (k: { slug: string }) => k.slug,
      ),
    ).not.toContain('nope');
  });

  it('never prints what was given where a variable name belongs: a key there is not repeated (create and update)', async () => {
    // A key of each shape: one no variable could be named, one that could (Groq's gsk_…), as `=` and as the next word.
    const keys = [secret('pasted'), `gsk_${crypto.randomUUID().replaceAll('-', '')}`];
    SECRETS.add(defined(keys[1]));
    const commands = [
      ['virtual-keys', 'create', '--workspace', owner.workspace.id, '--slug', 'pasted', '--provider', 'openai'],
      ['virtual-keys', 'update', '--workspace', owner.workspace.id, 'from-stdin'],
    ];
    for (const command of commands) {
      for (const key of keys) {
        for (const given of [[`--api-key-env=${key}`], ['--api-key-env', key]]) {
          for (const json of [[], ['--json']]) {
            const result = await cli([...command, ...given, ...json]);
            expect(result.code).toBe(2);
            expect(result.stderr).toMatch(/--api-key-env (takes the name|names is not set)/);
            expect(result.stdout + result.stderr).not.toContain(key);
            expect(result.stdout + result.stderr).not.toContain(key.slice(4, 16));
          }
        }
      }
    }
    const malformed = await cli([...defined(commands[0]), '--api-key-env', defined(keys[0])]);
    expect(malformed.stderr).toContain('--api-key-env takes the name of an environment variable');
    expect(
      (await json(await call('/v1/virtual-keys', { key: owner.workspaceKey }))).data.map(
        (k: { slug: string }) => k.slug,
      ),
    ).not.toContain('pasted');
  });

  it('reports validation failures with the API’s own messages', async () => {
    const cases: [string[], Record<string, unknown>][] = [
      [['--slug', 'Bad Slug', '--provider', 'openai'], { slug: 'Bad Slug', provider: 'openai' }],
      [['--slug', 'ok', '--provider', 'mistral'], { slug: 'ok', provider: 'mistral' }],
      [
        ['--slug', 'ok', '--provider', 'azure-openai', '--base-url', 'https://r.openai.azure.com'],
        { slug: 'ok', provider: 'azure-openai', base_url: 'https://r.openai.azure.com' },
      ],
      [
        ['--slug', 'ok', '--provider', 'openai', '--base-url', 'http://169.254.169.254/'],
        { slug: 'ok', provider: 'openai', base_url: 'http://169.254.169.254/' },
      ],
    ];
    for (const [args, body] of cases) {
      const api = await errorOf(await create(owner.workspaceKey, body));
      const text = await cli(
        ['virtual-keys', 'create', '--workspace', owner.workspace.id, ...args, '--api-key-stdin'],
        { stdin: 'k' },
      );
      expect(text.code).toBe(1);
      expect(text.stderr).toBe(`error: ${api.message}\n`);
      const machine = await cli(
        ['virtual-keys', 'create', '--workspace', owner.workspace.id, ...args, '--api-key-stdin', '--json'],
        { stdin: 'k' },
      );
      expect(JSON.parse(machine.stdout).error).toEqual({
        message: api.message,
        type: api.type,
        param: api.param,
        code: api.code,
      });
    }
    const empty = await cli(
      [
        'virtual-keys',
        'create',
        '--workspace',
        owner.workspace.id,
        '--slug',
        'e',
        '--provider',
        'openai',
        '--api-key-stdin',
      ],
      { stdin: '\n' },
    );
    expect(empty).toMatchObject({ code: 1, stderr: "error: Invalid 'api_key': expected a non-empty string.\n" });
  });

  it('lists and revokes', async () => {
    const listed = await cli(['virtual-keys', 'list', '--workspace', owner.workspace.slug, '--json']);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout).map((key: { slug: string }) => key.slug)).toEqual(['from-env', 'from-stdin']);
    const table = await cli(['virtual-keys', 'list', '--workspace', owner.workspace.slug]);
    expect(table.stdout).toMatch(/^slug\s+provider\s+base_url/);
    expect(table.stdout).toContain('from-stdin');

    const revoked = await cli(['virtual-keys', 'revoke', '--workspace', owner.workspace.id, 'from-stdin', '--json']);
    expect(revoked.code).toBe(0);
    expect(JSON.parse(revoked.stdout)).toMatchObject({ slug: 'from-stdin', revoked_at: expect.any(Number) });
    const after = JSON.parse((await cli(['virtual-keys', 'list', '--workspace', owner.workspace.id, '--json'])).stdout);
    expect(after.map((key: { slug: string }) => key.slug)).toEqual(['from-env']);
    const withRevoked = JSON.parse(
      (await cli(['virtual-keys', 'list', '--workspace', owner.workspace.id, '--include-revoked', '--json'])).stdout,
    );
    expect(withRevoked).toHaveLength(2);

    const again = await cli(['virtual-keys', 'revoke', '--workspace', owner.workspace.id, 'from-stdin']);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("No virtual key found with slug 'from-stdin'");
    expect((await cli(['virtual-keys', 'revoke', '--workspace', owner.workspace.id])).code).toBe(2);
  });
});

describe('x-gateway-virtual-key (through GET /v1/assistants/{id})', () => {
  let owner: Tenant;
  let assistantId: string;
  beforeAll(async () => {
    owner = await gateway.tenant();
    await create(owner.workspaceKey, { slug: 'live', provider: 'openai' });
    await create(owner.workspaceKey, { slug: 'gone', provider: 'openai' });
    await call('/v1/virtual-keys/gone', { key: owner.workspaceKey, method: 'DELETE' });
    const neighbour = await gateway.tenant({ organisationId: owner.organisationId });
    await create(neighbour.workspaceKey, { slug: 'neighbours', provider: 'openai' });
    const created = await call('/v1/assistants', { key: owner.workspaceKey, body: { model: 'gpt-4o' } });
    assistantId = (await json(created)).id;
  });

  const retrieve = (virtualKey?: string) =>
    call(`/v1/assistants/${assistantId}`, {
      key: owner.workspaceKey,
      headers: virtualKey === undefined ? {} : { 'x-gateway-virtual-key': virtualKey },
    });

  it('answers with a live key of the workspace', async () => {
    const response = await retrieve('live');
    expect(response.status).toBe(200);
    expect((await json(response)).id).toBe(assistantId);
  });

  it('is required: missing or empty is 400 missing_virtual_key naming the header', async () => {
    for (const value of [undefined, '', '   ']) {
      const error = await errorOf(await retrieve(value));
      expect(error).toMatchObject({ status: 400, code: 'missing_virtual_key', param: 'x-gateway-virtual-key' });
    }
  });

  it('unknown, revoked and another workspace’s keys are one indistinguishable 401', async () => {
    const errors = [];
    for (const value of ['nobody', 'gone', 'neighbours']) {
      const error = await errorOf(await retrieve(value));
      expect(error).toMatchObject({ status: 401, code: 'invalid_virtual_key', param: 'x-gateway-virtual-key' });
      expect(error.message).not.toContain(value);
      errors.push(error);
    }
    expect(new Set(errors.map((error) => error.message)).size).toBe(1);
  });
});

describe('secrecy', () => {
  it('never shows a provider secret in a response, a CLI output or a log line', () => {
    expect(SECRETS.size).toBeGreaterThan(5);
    expect(seen.length).toBeGreaterThan(50);
    const everything = [...seen, ...gateway.logs].join('\n');
    for (const value of SECRETS) expect(everything).not.toContain(value);
    expect(everything).not.toContain('secret_ciphertext');
    expect(everything).not.toContain('secretCiphertext');
  });
});
