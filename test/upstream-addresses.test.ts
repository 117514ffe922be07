import { eq } from 'drizzle-orm';
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { virtualKeys } from '../src/db/schema';
import { checkUpstreamUrl } from '../src/lib/upstream-url';
import { upstreamFetch } from '../src/node-runtime';
import { fakeDirective, startFakeUpstream, type FakeScenario, type FakeUpstreamServer } from './support/fake-upstream';
import { createTestGateway, json, type Tenant, type TestGateway } from './support/gateway';
import { recordTally } from './support/tally';

/**
 * Where the gateway may send a provider request, beyond the hand-picked table of
 * test/virtual-keys.test.ts: every spelling of an address is judged as the address itself
 * (generated), the rules hold again when a run executes (a key stored earlier, a setting changed
 * since, a row edited in the database), and an upstream's redirect is never followed.
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 200);
let inputsTried = 0;

// ── Generated spellings ─────────────────────────────────────────────────────────────────────

const octets = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
const hex = (n: number, upper: boolean) => (upper ? n.toString(16).toUpperCase() : n.toString(16));

/** Every way a URL host can name the IPv4 address `n` (WHATWG URL parsing turns each into `n`). */
const ipv4Spelling = (n: number) =>
  fc.oneof(
    fc.constant(octets(n).join('.')),
    fc.constant(String(n)),
    fc.boolean().map((upper) => `0${upper ? 'X' : 'x'}${hex(n, upper)}`),
    fc.constant(octets(n).map((o) => `0${o.toString(8)}`).join('.')),
    // Each octet in its own base.
    fc
      .tuple(...octets(n).map((o) => fc.constantFrom(String(o), `0${o.toString(8)}`, `0x${hex(o, false)}`, `0X${hex(o, true)}`)))
      .map((parts) => parts.join('.')),
    // a.b.16bits and a.24bits
    fc.constant(`${n >>> 24}.${(n >>> 16) & 255}.${n & 0xffff}`),
    fc.constant(`${n >>> 24}.${n & 0xffffff}`),
    fc.constant(`${octets(n).join('.')}.`),
    // IPv6 forms that reach the same IPv4 address.
    fc.constantFrom(
      `[::ffff:${octets(n).join('.')}]`,
      `[::FFFF:${hex(n >>> 16, true)}:${hex(n & 0xffff, true)}]`,
      `[0:0:0:0:0:ffff:${octets(n).join('.')}]`,
      `[0000:0000:0000:0000:0000:ffff:${hex(n >>> 16, false).padStart(4, '0')}:${hex(n & 0xffff, false).padStart(4, '0')}]`,
      `[64:ff9b::${octets(n).join('.')}]`,
    ),
  );

const inRange = (base: string, bits: number) => {
  const start = base.split('.').reduce((value, octet) => value * 256 + Number(octet), 0);
  return fc.integer({ min: 0, max: 2 ** (32 - bits) - 1 }).map((offset) => start + offset);
};

const urlAround = (host: string) =>
  fc
    .tuple(fc.constantFrom('http', 'https', 'HTTP'), fc.option(fc.integer({ min: 1, max: 65535 })), fc.constantFrom('', '/', '/v1', '/latest/meta-data/'))
    .map(([scheme, port, path]) => `${scheme}://${host}${port === null ? '' : `:${port}`}${path}`);

const verdicts = (url: string) => {
  inputsTried += 1;
  return { strict: checkUpstreamUrl(url, { allowPrivate: false }), lenient: checkUpstreamUrl(url, { allowPrivate: true }) };
};

const METADATA = /cloud metadata and link-local addresses are never allowed/;
const PRIVATE = /unless GATEWAY_ALLOW_PRIVATE_UPSTREAMS/;

describe('checkUpstreamUrl, generated', () => {
  it('judges every spelling of an IPv4 address as its dotted form', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 32 - 1 }).chain((n) => fc.tuple(fc.constant(n), ipv4Spelling(n))),
        ([n, spelling]) => {
          expect(verdicts(`http://${spelling}/v1`)).toEqual(verdicts(`http://${octets(n).join('.')}/v1`));
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('refuses link-local (169.254.0.0/16, with 169.254.169.254) and Alibaba’s metadata address, however spelt, allowed private or not', () => {
    const address = fc.oneof(inRange('169.254.0.0', 16), fc.constant(0xa9fea9fe), fc.constant(0x6464_64c8));
    fc.assert(
      fc.property(address.chain(ipv4Spelling).chain(urlAround), (url) => {
        const { strict, lenient } = verdicts(url);
        expect(strict).toMatch(METADATA);
        expect(lenient).toMatch(METADATA);
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses loopback, private, CGNAT and "this network" addresses, however spelt, unless private upstreams are allowed', () => {
    const address = fc.oneof(
      inRange('127.0.0.0', 8),
      inRange('10.0.0.0', 8),
      inRange('172.16.0.0', 12),
      inRange('192.168.0.0', 16),
      inRange('100.64.0.0', 10).filter((n) => n !== 0x646464c8),
      inRange('0.0.0.0', 8),
    );
    fc.assert(
      fc.property(address.chain(ipv4Spelling).chain(urlAround), (url) => {
        const { strict, lenient } = verdicts(url);
        expect(strict).toMatch(PRIVATE);
        expect(lenient).toBeNull();
      }),
      { numRuns: RUNS },
    );
  });

  /** An IPv6 address of eight groups, in any textual form: full, compressed, padded, upper case. */
  const ipv6Spelling = (groups: readonly number[]) =>
    fc.tuple(fc.boolean(), fc.boolean(), fc.boolean()).map(([compress, pad, upper]) => {
      let parts = groups.map((g) => (pad ? g.toString(16).padStart(4, '0') : g.toString(16)));
      if (upper) parts = parts.map((part) => part.toUpperCase());
      let text = parts.join(':');
      if (compress) {
        // The longest run of zero groups (if any) becomes `::`.
        const zero = (i: number) => groups[i] === 0;
        let best = [-1, 0];
        for (let i = 0; i < 8; i++) {
          let j = i;
          while (j < 8 && zero(j)) j++;
          if (j - i > best[1]!) best = [i, j - i];
        }
        if (best[1]! > 0) text = `${parts.slice(0, best[0]).join(':')}::${parts.slice(best[0]! + best[1]!).join(':')}`;
      }
      return `[${text}]`;
    });
  const group = fc.integer({ min: 0, max: 0xffff });

  it('refuses IPv6 link-local (fe80::/10) and AWS’s fd00:ec2::254, however spelt', () => {
    const linkLocal = fc.tuple(fc.integer({ min: 0xfe80, max: 0xfebf }), fc.array(group, { minLength: 7, maxLength: 7 }));
    const address = fc.oneof(
      linkLocal.map(([first, rest]) => [first, ...rest]),
      fc.constant([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254]),
    );
    fc.assert(
      fc.property(address.chain(ipv6Spelling).chain(urlAround), (url) => {
        const { strict, lenient } = verdicts(url);
        expect(strict).toMatch(METADATA);
        expect(lenient).toMatch(METADATA);
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses IPv6 loopback, unspecified and unique-local addresses unless private upstreams are allowed', () => {
    const uniqueLocal = fc
      .tuple(fc.integer({ min: 0xfc00, max: 0xfdff }), fc.array(group, { minLength: 7, maxLength: 7 }))
      .map(([first, rest]) => [first, ...rest])
      .filter((g) => g.join(':') !== [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254].join(':'));
    const address = fc.oneof(fc.constant([0, 0, 0, 0, 0, 0, 0, 1]), fc.constant([0, 0, 0, 0, 0, 0, 0, 0]), uniqueLocal);
    fc.assert(
      fc.property(address.chain(ipv6Spelling).chain(urlAround), (url) => {
        const { strict, lenient } = verdicts(url);
        expect(strict).toMatch(PRIVATE);
        expect(lenient).toBeNull();
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses every scheme but http and https', () => {
    const scheme = fc
      .stringMatching(/^[a-z][a-z0-9+.-]{0,10}$/)
      .filter((s) => s !== 'http' && s !== 'https');
    fc.assert(
      fc.property(scheme, fc.constantFrom('api.openai.com/v1', '169.254.169.254/', 'localhost/'), (s, rest) => {
        const { strict, lenient } = verdicts(`${s}://${rest}`);
        for (const answer of [strict, lenient]) expect(answer).toMatch(/expected an (absolute )?http or https URL/);
      }),
      { numRuns: RUNS },
    );
  });
});

// ── At run time ──────────────────────────────────────────────────────────────────────────────

let fake: FakeUpstreamServer;
/** Where a followed redirect would land: it must never be reached. */
let elsewhere: FakeUpstreamServer;
let gateway: TestGateway;
let tenant: Tenant;
let assistantId: string;

beforeAll(async () => {
  fake = await startFakeUpstream();
  elsewhere = await startFakeUpstream();
  gateway = await createTestGateway({ env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' } });
  tenant = await gateway.tenant();
  const assistant = await json(await gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'fake-model' } }));
  assistantId = assistant.id;
});
afterAll(async () => {
  recordTally('upstream-addresses', { inputsTried });
  await gateway?.close();
  await fake?.close();
  await elsewhere?.close();
});
beforeEach(() => {
  fake.reset();
  elsewhere.reset();
});

async function runTo(target: TestGateway, owner: Tenant, slug: string, assistant: string, scenario: FakeScenario = {}) {
  const created = await json(
    await target.request('/v1/threads/runs', {
      key: owner.workspaceKey,
      headers: { 'x-gateway-virtual-key': slug },
      body: { assistant_id: assistant, thread: { messages: [{ role: 'user', content: `hi\n${fakeDirective(scenario)}` }] } },
    }),
  );
  expect(created.status).toBe('queued');
  await target.tasks.drain(10_000);
  return json(await target.request(`/v1/threads/${created.thread_id}/runs/${created.id}`, { key: owner.workspaceKey }));
}

describe('the address of a run’s upstream', () => {
  it('is checked again when the run executes: a loopback key stored while allowed fails once private upstreams are refused', async () => {
    const strict = await createTestGateway({ env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'false' } });
    try {
      const owner = await strict.tenant();
      const slug = await strict.virtualKey(owner, { base_url: fake.baseURL }); // stored as allowed
      const assistant = await json(await strict.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'fake-model' } }));
      const run = await runTo(strict, owner, slug, assistant.id);
      expect(run).toMatchObject({ status: 'failed', last_error: { code: 'server_error', message: expect.stringMatching(PRIVATE) } });
      expect(fake.requests).toHaveLength(0);
    } finally {
      await strict.close();
    }
  });

  it('is checked again when the run executes: a metadata address written into the database is never fetched', async () => {
    const fetched: string[] = [];
    const spying = await createTestGateway({
      env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' },
      deps: { fetch: (input, init) => (fetched.push(String(input)), fetch(input, init)) },
    });
    try {
      const owner = await spying.tenant();
      const assistant = await json(await spying.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'fake-model' } }));
      for (const address of ['http://169.254.169.254/latest/meta-data', 'http://[::ffff:a9fe:a9fe]/', 'http://metadata.google.internal/']) {
        const slug = await spying.virtualKey(owner, { base_url: fake.baseURL });
        await spying.database.db.update(virtualKeys).set({ baseUrl: address }).where(eq(virtualKeys.slug, slug));
        const run = await runTo(spying, owner, slug, assistant.id);
        expect(run).toMatchObject({ status: 'failed', last_error: { code: 'server_error', message: expect.stringMatching(METADATA) } });
      }
      expect(fetched).toEqual([]);
    } finally {
      await spying.close();
    }
  });

  for (const status of [301, 302, 303, 307, 308]) {
    it(`never follows a ${status} redirect: the run fails and the Location is not fetched`, async () => {
      const slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL });
      const location = `${elsewhere.baseURL}/chat/completions`;
      const run = await runTo(gateway, tenant, slug, assistantId, { status, headers: { location } });
      expect(run).toMatchObject({
        status: 'failed',
        last_error: { code: 'server_error', message: expect.stringContaining(`HTTP ${status}`) },
      });
      expect(fake.requests).toHaveLength(1);
      expect(elsewhere.requests).toHaveLength(0);
      inputsTried += 1;
    });
  }
});

describe('a name, resolved on Node just before the fetch', () => {
  const resolvingTo =
    (table: Record<string, string[]>) =>
    async (hostname: string) =>
      (table[hostname] ?? []).map((address) => ({ address }));

  it('fails the run when the name resolves to a metadata address, even with private upstreams allowed', async () => {
    const target = await createTestGateway({
      env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' },
      deps: {
        fetch: upstreamFetch({
          allowPrivate: true,
          resolve: resolvingTo({ 'metadata.attacker.test': ['93.184.216.34', '::ffff:169.254.169.254'] }),
        }),
      },
    });
    try {
      const owner = await target.tenant();
      const assistant = await json(await target.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'fake-model' } }));
      const slug = await target.virtualKey(owner, { base_url: 'http://metadata.attacker.test/v1' });
      const run = await runTo(target, owner, slug, assistant.id);
      expect(run).toMatchObject({ status: 'failed', last_error: { code: 'server_error', message: expect.stringMatching(/resolves to a cloud metadata/) } });
      // The gateway's view of its network stays its own.
      expect(run.last_error.message).not.toContain('169.254');
    } finally {
      await target.close();
    }
  });

  it('refuses names of private addresses unless private upstreams are allowed (the real resolver, on localhost)', async () => {
    const strict = upstreamFetch({ allowPrivate: false });
    await expect(strict(`${fake.baseURL.replace('127.0.0.1', 'localhost')}/models`)).rejects.toThrow(/resolves to a loopback, private/);
    expect(fake.requests).toHaveLength(0);

    const lenient = upstreamFetch({ allowPrivate: true });
    const response = await lenient(`${fake.baseURL.replace('127.0.0.1', 'localhost')}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-test' },
      body: JSON.stringify({ model: 'fake-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(response.status).toBe(200);
  });

  it('leaves literal addresses and unresolvable names to the checks before it and to fetch', async () => {
    const resolve = vi.fn(resolvingTo({}));
    const guarded = upstreamFetch({ allowPrivate: true, resolve });
    await expect(guarded('http://127.0.0.1:1/')).rejects.toThrow(TypeError); // connection refused, from fetch
    expect(resolve).not.toHaveBeenCalled();
    await expect(guarded('http://nowhere.invalid:1/')).rejects.not.toThrow(/not allowed/);
    expect(resolve).toHaveBeenCalledWith('nowhere.invalid');
  });
});
