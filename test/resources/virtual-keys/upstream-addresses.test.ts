import { defined } from '../../support/defined';
import { eq } from 'drizzle-orm';
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../../src/config';
import { virtualKeys } from '../../../src/db/schema';
import {
  checkResolvedAddress,
  checkUpstreamUrl,
  parseUpstreamHostPatterns,
  type UpstreamUrlOptions,
} from '../../../src/lib/upstream-url';
import { upstreamFetch } from '../../../src/runtime/node/upstream-fetch';
import { upstreamRules, WORKSPACE_COUNT_TTL_MS } from '../../../src/resources/virtual-keys/upstream-rules';
import {
  fakeDirective,
  startFakeUpstream,
  type FakeScenario,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { recordTally } from '../../support/tally';

/**
 * Where the gateway may send a provider request, beyond the hand-picked table of
 * test/resources/virtual-keys/virtual-keys.test.ts: every spelling of an address is judged as the address itself
 * (generated), IPv6 addresses that carry an IPv4 one (6to4, Teredo, NAT64) as that address, the
 * admin's allow-list, the default that follows the database's workspaces, the rules again when a
 * run executes (a key stored earlier, a setting changed since, a row edited in the database), and
 * an upstream's redirect is never followed.
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
    fc.constant(
      octets(n)
        .map((o) => `0${o.toString(8)}`)
        .join('.'),
    ),
    // Each octet in its own base.
    fc
      .tuple(
        ...octets(n).map((o) =>
          fc.constantFrom(String(o), `0${o.toString(8)}`, `0x${hex(o, false)}`, `0X${hex(o, true)}`),
        ),
      )
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
    .tuple(
      fc.constantFrom('http', 'https', 'HTTP'),
      fc.option(fc.integer({ min: 1, max: 65535 })),
      fc.constantFrom('', '/', '/v1', '/latest/meta-data/'),
    )
    .map(([scheme, port, path]) => `${scheme}://${host}${port === null ? '' : `:${port}`}${path}`);

const verdicts = (url: string) => {
  inputsTried += 1;
  return {
    strict: checkUpstreamUrl(url, { allowPrivate: false }),
    lenient: checkUpstreamUrl(url, { allowPrivate: true }),
  };
};

const METADATA = /cloud metadata and link-local addresses are never allowed/;
const PRIVATE = /unless GATEWAY_ALLOW_PRIVATE_UPSTREAMS/;

/** A verdict's kind: the words differ with the host (a refusal names it, to say how to allow it). */
const kindOf = (answer: string | null) =>
  answer === null ? 'ok' : METADATA.test(answer) ? 'metadata' : PRIVATE.test(answer) ? 'private' : answer;
const kinds = (url: string) => {
  const { strict, lenient } = verdicts(url);
  return { strict: kindOf(strict), lenient: kindOf(lenient) };
};

describe('checkUpstreamUrl, generated', () => {
  it('judges every spelling of an IPv4 address as its dotted form', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 32 - 1 }).chain((n) => fc.tuple(fc.constant(n), ipv4Spelling(n))),
        ([n, spelling]) => {
          expect(kinds(`http://${spelling}/v1`)).toEqual(kinds(`http://${octets(n).join('.')}/v1`));
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
          if (j - i > defined(best[1])) best = [i, j - i];
        }
        if (defined(best[1]) > 0)
          text = `${parts.slice(0, best[0]).join(':')}::${parts.slice(defined(best[0]) + defined(best[1])).join(':')}`;
      }
      return `[${text}]`;
    });
  const group = fc.integer({ min: 0, max: 0xffff });

  it('refuses IPv6 link-local (fe80::/10) and AWS’s fd00:ec2::254, however spelt', () => {
    const linkLocal = fc.tuple(
      fc.integer({ min: 0xfe80, max: 0xfebf }),
      fc.array(group, { minLength: 7, maxLength: 7 }),
    );
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

  /** An IPv4 address worth trying: metadata, private, or anything. */
  const interestingIpv4 = fc.oneof(
    inRange('169.254.0.0', 16),
    fc.constant(0xa9fea9fe),
    fc.constant(0x646464c8),
    inRange('127.0.0.0', 8),
    inRange('10.0.0.0', 8),
    inRange('192.168.0.0', 16),
    inRange('100.64.0.0', 10),
    inRange('0.0.0.0', 8),
    fc.integer({ min: 0, max: 2 ** 32 - 1 }),
  );
  const hi = (n: number) => n >>> 16;
  const lo = (n: number) => n & 0xffff;

  it('judges 6to4, Teredo and well-known NAT64 addresses as the IPv4 address they carry', () => {
    const carrying = (n: number) =>
      fc.oneof(
        // 6to4: 2002:<IPv4>::/48, any subnet and interface.
        fc.array(group, { minLength: 5, maxLength: 5 }).map((rest) => [0x2002, hi(n), lo(n), ...rest]),
        // Teredo: 2001:0:<server>:<flags>:<port>:<the client's IPv4 address, inverted>.
        fc.array(group, { minLength: 4, maxLength: 4 }).map((middle) => [0x2001, 0, ...middle, hi(~n), lo(~n)]),
        // NAT64's well-known prefix, 64:ff9b::/96.
        fc.constant([0x64, 0xff9b, 0, 0, 0, 0, hi(n), lo(n)]),
      );
    fc.assert(
      fc.property(
        interestingIpv4.chain((n) => fc.tuple(fc.constant(n), carrying(n).chain(ipv6Spelling))),
        ([n, spelling]) => {
          expect(kinds(`http://${spelling}/v1`)).toEqual(kinds(`http://${octets(n).join('.')}/v1`));
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('judges local-use NAT64 (64:ff9b:1::/48) as private at least, and as metadata when it carries a metadata address', () => {
    fc.assert(
      fc.property(
        interestingIpv4.chain((n) => fc.tuple(fc.constant(n), ipv6Spelling([0x64, 0xff9b, 1, 0, 0, 0, hi(n), lo(n)]))),
        ([n, spelling]) => {
          const ipv4 = kinds(`http://${octets(n).join('.')}/v1`);
          expect(kinds(`http://${spelling}/v1`)).toEqual(
            ipv4.lenient === 'metadata' ? ipv4 : { strict: 'private', lenient: 'ok' },
          );
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('refuses every scheme but http and https', () => {
    const scheme = fc.stringMatching(/^[a-z][a-z0-9+.-]{0,10}$/).filter((s) => s !== 'http' && s !== 'https');
    fc.assert(
      fc.property(scheme, fc.constantFrom('api.openai.com/v1', '169.254.169.254/', 'localhost/'), (s, rest) => {
        const { strict, lenient } = verdicts(`${s}://${rest}`);
        for (const answer of [strict, lenient]) expect(answer).toMatch(/expected an (absolute )?http or https URL/);
      }),
      { numRuns: RUNS },
    );
  });

  it('judges a URL it has judged before by the rules of each call (what a URL is is kept, not the verdict)', () => {
    const url = 'http://10.1.2.3:8000/v1';
    const listed = { allowPrivate: false, allowedHosts: patterns('10.1.2.3:8000') };
    for (let round = 0; round < 2; round++) {
      expect(checkUpstreamUrl(url, { allowPrivate: true })).toBeNull();
      expect(checkUpstreamUrl(url, { allowPrivate: false, privateRefusedBecause: `round ${round}` })).toContain(
        `(round ${round})`,
      );
      expect(checkUpstreamUrl(url, listed)).toBeNull();
    }
  });
});

describe('addresses that carry an IPv4 address, by example', () => {
  // [host, its kind: 'ok' is allowed either way, 'private' only with private upstreams allowed]
  const table: [string, 'ok' | 'private' | 'metadata'][] = [
    ['2002:a9fe:a9fe::', 'metadata'], // 6to4 of 169.254.169.254
    ['2002:a9fe:a9fe:1:2:3:4:5', 'metadata'],
    ['2002:6464:64c8::1', 'metadata'], // 100.100.100.200
    ['2002:7f00:1::', 'private'], // 127.0.0.1
    ['2002:a00:1::1', 'private'], // 10.0.0.1
    ['2002:808:808::', 'ok'], // 8.8.8.8
    ['2001:0:4136:e378:8000:63bf:5601:5601', 'metadata'], // Teredo, client 169.254.169.254 (inverted)
    ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'private'], // client 127.0.0.1
    ['2001:0:4136:e378:8000:63bf:f5ff:fffe', 'private'], // client 10.0.0.1
    ['2001:0:4136:e378:8000:63bf:f7f7:f7f7', 'ok'], // client 8.8.8.8
    ['64:ff9b::a9fe:a9fe', 'metadata'], // NAT64
    ['64:ff9b::7f00:1', 'private'],
    ['64:ff9b::808:808', 'ok'],
    ['64:ff9b:1::a9fe:a9fe', 'metadata'], // local-use NAT64, a /96 translator
    ['64:ff9b:1:0:a9:fea9:fe00:0', 'metadata'], // …a /64 translator (RFC 6052 skips bits 64 to 71)
    ['64:ff9b:1::a00:1', 'private'],
    ['64:ff9b:1::808:808', 'private'], // a network's own translator
    ['64:ff9b:1:808:8:808:808:808', 'private'], // 8.8.8.8 wherever a translator looks
    ['::ffff:0:a9fe:a9fe', 'metadata'], // IPv4-translated (RFC 6145)
    ['::a9fe:a9fe', 'metadata'], // the deprecated IPv4-compatible form
  ];
  const expected = {
    ok: { strict: 'ok', lenient: 'ok' },
    private: { strict: 'private', lenient: 'ok' },
    metadata: { strict: 'metadata', lenient: 'metadata' },
  };

  for (const [host, kind] of table) {
    it(`[${host}] is ${kind}, as a URL and as a resolved address`, () => {
      expect(kinds(`http://[${host}]/v1`)).toEqual(expected[kind]);
      const resolved = (allowPrivate: boolean) => {
        const answer = checkResolvedAddress(host, { allowPrivate });
        return answer === null
          ? 'ok'
          : /resolves to a cloud metadata/.test(answer)
            ? 'metadata'
            : /resolves to a loopback, private/.test(answer)
              ? 'private'
              : answer;
      };
      expect({ strict: resolved(false), lenient: resolved(true) }).toEqual(expected[kind]);
    });
  }
});

// ── The admin's allow-list ───────────────────────────────────────────────────────────────────

const patterns = (text: string) => {
  const parsed = parseUpstreamHostPatterns(text);
  if ('problem' in parsed) throw new Error(parsed.problem);
  return parsed.patterns;
};

describe('GATEWAY_ALLOWED_UPSTREAM_HOSTS', () => {
  it('reads comma-separated host[:port] patterns, hosts written as URLs write them', () => {
    expect(patterns(' localhost:11434, 127.1:8000 ,*.LAN,[0:0::1]:8080,ollama.lan.,')).toEqual([
      { host: 'localhost', wildcard: false, port: 11434 },
      { host: '127.0.0.1', wildcard: false, port: 8000 },
      { host: 'lan', wildcard: true, port: null },
      { host: '[::1]', wildcard: false, port: 8080 },
      { host: 'ollama.lan', wildcard: false, port: null },
    ]);
    expect(patterns('')).toEqual([]);
    expect(parseConfig({}).GATEWAY_ALLOWED_UPSTREAM_HOSTS).toEqual([]);
  });

  it('refuses what is not a host[:port] pattern, naming the entry and the variable', () => {
    const bad = [
      '*',
      '*.10.0.0.1',
      '*.[::1]',
      'a*b.lan',
      'localhost:0',
      'localhost:65536',
      'ollama.lan:',
      'http://localhost',
      'localhost/v1',
      'user@localhost',
      '[zz::1]',
      '[1.2.3.4]',
      '.',
    ];
    for (const entry of bad) {
      inputsTried += 1;
      expect(parseUpstreamHostPatterns(`localhost,${entry}`)).toEqual({
        problem: expect.stringContaining(`'${entry}'`),
      });
    }
    expect(() => parseConfig({ GATEWAY_ALLOWED_UPSTREAM_HOSTS: 'localhost,*' })).toThrow(
      /GATEWAY_ALLOWED_UPSTREAM_HOSTS: '\*' is not host\[:port\]/,
    );
  });

  it('lets the hosts it lists through when private addresses are refused: the same host, on the port given or any', () => {
    const rules: UpstreamUrlOptions = {
      allowPrivate: false,
      allowedHosts: patterns('localhost:11434,127.0.0.1:8000,[::1],10.0.0.5:443'),
    };
    const table: [string, boolean][] = [
      ['http://localhost:11434/v1', true],
      ['http://LOCALHOST.:11434/v1', true],
      ['http://localhost:8000/v1', false],
      ['http://127.0.0.1:11434/v1', false], // another host than the pattern's, whatever it resolves to
      ['http://127.1:8000/', true],
      ['http://127.0.0.1/', false], // port 80
      ['http://[::1]:9999/', true],
      ['http://[0:0:0:0:0:0:0:1]/', true],
      ['https://10.0.0.5/v1', true], // https: port 443
      ['http://10.0.0.5/v1', false],
      ['http://10.0.0.6:443/', false],
    ];
    for (const [url, allowed] of table) {
      inputsTried += 1;
      const answer = checkUpstreamUrl(url, rules);
      if (allowed) expect(answer, url).toBeNull();
      else
        expect(answer, url).toMatch(
          /refused as upstreams unless GATEWAY_ALLOW_PRIVATE_UPSTREAMS is true or the host is in GATEWAY_ALLOWED_UPSTREAM_HOSTS\. An admin can allow this host with GATEWAY_ALLOWED_UPSTREAM_HOSTS=\S+:\d+\.$/,
        );
    }
    expect(checkUpstreamUrl('http://localhost:8000/v1', rules)).toContain(
      'GATEWAY_ALLOWED_UPSTREAM_HOSTS=localhost:8000.',
    );
  });

  it('lets a listed name resolve to private addresses: `*.` covers the names under a domain', () => {
    const rules: UpstreamUrlOptions = { allowPrivate: false, allowedHosts: patterns('*.lan,gpu-box:8000') };
    const resolved = (url: string, address: string) => checkResolvedAddress(address, rules, new URL(url));
    expect(resolved('http://ollama.lan:11434/v1', '192.168.1.20')).toBeNull();
    expect(resolved('http://a.b.lan/v1', 'fd12::1')).toBeNull();
    expect(resolved('http://gpu-box:8000/v1', '10.0.0.7')).toBeNull();
    expect(resolved('http://lan/v1', '192.168.1.20')).toMatch(/resolves to a loopback, private/);
    expect(resolved('http://ollama.lan.attacker.test/v1', '192.168.1.20')).toMatch(/resolves to a loopback, private/);
    expect(resolved('http://gpu-box:8001/v1', '10.0.0.7')).toMatch(/GATEWAY_ALLOWED_UPSTREAM_HOSTS=gpu-box:8001\./);
    expect(resolved('http://ollama.lan/v1', '93.184.216.34')).toBeNull();
  });

  it('never lets a metadata address through, listed or not', () => {
    const rules: UpstreamUrlOptions = {
      allowPrivate: true,
      allowedHosts: patterns(
        '169.254.169.254,metadata.google.internal,[fe80::1],[fd00:ec2::254],100.100.100.200,[2002:a9fe:a9fe::],*.lan',
      ),
    };
    for (const url of [
      'http://169.254.169.254/',
      'http://metadata.google.internal/',
      'http://[fe80::1]/',
      'http://[fd00:ec2::254]/',
      'http://100.100.100.200/',
      'http://[2002:a9fe:a9fe::]/',
    ]) {
      expect(checkUpstreamUrl(url, rules), url).toMatch(METADATA);
    }
    for (const address of ['169.254.169.254', '::ffff:169.254.169.254', '64:ff9b::a9fe:a9fe', 'fe80::1%eth0']) {
      expect(checkResolvedAddress(address, rules, new URL('http://box.lan/'))).toMatch(/resolves to a cloud metadata/);
    }
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
  const assistant = await json(
    await gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'fake-model' } }),
  );
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
      body: {
        assistant_id: assistant,
        thread: { messages: [{ role: 'user', content: `hi\n${fakeDirective(scenario)}` }] },
      },
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
      const assistant = await json(
        await strict.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'fake-model' } }),
      );
      const run = await runTo(strict, owner, slug, assistant.id);
      expect(run).toMatchObject({
        status: 'failed',
        last_error: { code: 'server_error', message: expect.stringMatching(PRIVATE) },
      });
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
      const assistant = await json(
        await spying.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'fake-model' } }),
      );
      for (const address of [
        'http://169.254.169.254/latest/meta-data',
        'http://[::ffff:a9fe:a9fe]/',
        'http://metadata.google.internal/',
      ]) {
        const slug = await spying.virtualKey(owner, { base_url: fake.baseURL });
        await spying.database.db.update(virtualKeys).set({ baseUrl: address }).where(eq(virtualKeys.slug, slug));
        const run = await runTo(spying, owner, slug, assistant.id);
        expect(run).toMatchObject({
          status: 'failed',
          last_error: { code: 'server_error', message: expect.stringMatching(METADATA) },
        });
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
  const POST = { method: 'POST', headers: {}, body: '' } as const;
  const resolvingTo = (table: Record<string, string[]>) => async (hostname: string) =>
    (table[hostname] ?? []).map((address) => ({ address }));

  it('fails the run when the name resolves to a metadata address, even with private upstreams allowed', async () => {
    const target = await createTestGateway({
      env: { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' },
      deps: {
        fetch: upstreamFetch({
          rules: () => ({ allowPrivate: true }),
          resolve: resolvingTo({ 'metadata.attacker.test': ['93.184.216.34', '::ffff:169.254.169.254'] }),
        }),
      },
    });
    try {
      const owner = await target.tenant();
      const assistant = await json(
        await target.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'fake-model' } }),
      );
      const slug = await target.virtualKey(owner, { base_url: 'http://metadata.attacker.test/v1' });
      const run = await runTo(target, owner, slug, assistant.id);
      expect(run).toMatchObject({
        status: 'failed',
        last_error: { code: 'server_error', message: expect.stringMatching(/resolves to a cloud metadata/) },
      });
      // The gateway's view of its network stays its own.
      expect(run.last_error.message).not.toContain('169.254');
    } finally {
      await target.close();
    }
  });

  it('refuses names of private addresses unless private upstreams are allowed (the real resolver, on localhost)', async () => {
    const strict = upstreamFetch({ rules: () => ({ allowPrivate: false }) });
    await expect(strict(`${fake.baseURL.replace('127.0.0.1', 'localhost')}/models`, POST)).rejects.toThrow(
      /resolves to a loopback, private/,
    );
    expect(fake.requests).toHaveLength(0);

    const lenient = upstreamFetch({ rules: () => ({ allowPrivate: true }) });
    const response = await lenient(`${fake.baseURL.replace('127.0.0.1', 'localhost')}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-test' },
      body: JSON.stringify({ model: 'fake-model', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(response.status).toBe(200);
    for await (const chunk of response.body ?? []) expect(chunk.length).toBeGreaterThan(0);
  });

  it('leaves literal addresses and unresolvable names to the checks before it and to fetch', async () => {
    const resolve = vi.fn(resolvingTo({}));
    const guarded = upstreamFetch({ rules: () => ({ allowPrivate: true }), resolve });
    await expect(guarded('http://127.0.0.1:1/', POST)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    expect(resolve).not.toHaveBeenCalled();
    await expect(guarded('http://nowhere.invalid:1/', POST)).rejects.toMatchObject({ code: 'ENOTFOUND' });
    expect(resolve).toHaveBeenCalledWith('nowhere.invalid');
  });
});

// ── The default: private upstreams while the database holds one workspace ─────────────────────

describe('private upstreams with GATEWAY_ALLOW_PRIVATE_UPSTREAMS unset', () => {
  const UNSET = { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: '' };
  const createKey = (target: TestGateway, owner: Tenant, slug: string, base_url: string) =>
    target.request('/v1/virtual-keys', {
      key: owner.workspaceKey,
      body: { slug, provider: 'openai', base_url, api_key: 'none' },
    });
  const newAssistant = async (target: TestGateway, owner: Tenant) =>
    (await json(await target.request('/v1/assistants', { key: owner.workspaceKey, body: { model: 'fake-model' } })))
      .id as string;
  const SHARED =
    /GATEWAY_ALLOW_PRIVATE_UPSTREAMS is unset, which allows them only while the database holds a single workspace/;

  it('are allowed while the database holds one workspace; once it holds two, refused at creation and at run time', async () => {
    const target = await createTestGateway({ env: UNSET });
    try {
      const first = await target.tenant();
      expect((await createKey(target, first, 'local', fake.baseURL)).status).toBe(200);
      const assistant = await newAssistant(target, first);
      expect(await runTo(target, first, 'local', assistant)).toMatchObject({ status: 'completed' });
      expect(fake.requests).toHaveLength(1);

      const second = await target.tenant();
      const hostAndPort = new URL(fake.baseURL).host;
      for (const owner of [first, second]) {
        const refused = await errorOf(await createKey(target, owner, 'local-2', fake.baseURL));
        expect(refused).toMatchObject({ status: 400, code: 'invalid_value', param: 'base_url' });
        expect(refused.message).toMatch(PRIVATE);
        expect(refused.message).toMatch(SHARED);
        expect(refused.message).toContain(
          `An admin can allow this host with GATEWAY_ALLOWED_UPSTREAM_HOSTS=${hostAndPort}.`,
        );
      }
      expect((await createKey(target, second, 'public', 'https://api.together.xyz/v1')).status).toBe(200);

      // The key stored while it was allowed: runs read the workspace count at most this stale.
      target.clock.advance(WORKSPACE_COUNT_TTL_MS + 1);
      const run = await runTo(target, first, 'local', assistant);
      expect(run).toMatchObject({
        status: 'failed',
        last_error: { code: 'server_error', message: expect.stringMatching(PRIVATE) },
      });
      expect(run.last_error.message).toMatch(SHARED);
      expect(run.last_error.message).toContain(`GATEWAY_ALLOWED_UPSTREAM_HOSTS=${hostAndPort}`);
      expect(fake.requests).toHaveLength(1);
    } finally {
      await target.close();
    }
  });

  it('count a name that resolves to a private address as private, before every fetch on Node', async () => {
    // The gateway's own fetch and rules, with a resolver that knows the test's name.
    let target: TestGateway | undefined;
    const fetch = upstreamFetch({
      rules: () =>
        upstreamRules(defined(target).database.db, defined(target).deps.config, { now: defined(target).clock.now() }),
      resolve: async (hostname) => (hostname === 'llm.internal.test' ? [{ address: '10.1.2.3' }] : []),
    });
    target = await createTestGateway({ env: UNSET, deps: { fetch } });
    try {
      const first = await target.tenant();
      expect((await createKey(target, first, 'named', 'http://llm.internal.test/v1')).status).toBe(200);
      const assistant = await newAssistant(target, first);
      // One workspace: the name passes the check (and then fails to connect: it exists only here).
      const allowed = await runTo(target, first, 'named', assistant);
      expect(allowed).toMatchObject({ status: 'failed' });
      expect(allowed.last_error.message).not.toMatch(/not allowed/);

      await target.tenant();
      target.clock.advance(WORKSPACE_COUNT_TTL_MS + 1);
      const refused = await runTo(target, first, 'named', assistant);
      expect(refused).toMatchObject({
        status: 'failed',
        last_error: { code: 'server_error', message: expect.stringMatching(/resolves to a loopback, private/) },
      });
      expect(refused.last_error.message).toMatch(SHARED);
      expect(refused.last_error.message).not.toContain('10.1.2.3');
    } finally {
      await target.close();
    }
  });

  it('are allowed for the hosts an admin lists in GATEWAY_ALLOWED_UPSTREAM_HOSTS, whatever the workspaces or the setting', async () => {
    const hostAndPort = new URL(fake.baseURL).host;
    for (const env of [UNSET, { GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'false' }]) {
      const target = await createTestGateway({
        env: { ...env, GATEWAY_ALLOWED_UPSTREAM_HOSTS: `${hostAndPort},*.lan` },
      });
      try {
        const first = await target.tenant();
        const second = await target.tenant();
        expect((await createKey(target, second, 'listed', fake.baseURL)).status).toBe(200);
        const run = await runTo(target, second, 'listed', await newAssistant(target, second));
        expect(run).toMatchObject({ status: 'completed' });
        for (const url of [
          'http://127.0.0.1:1/v1',
          fake.baseURL.replace('127.0.0.1', 'localhost'),
          'http://169.254.169.254/',
        ]) {
          expect(await errorOf(await createKey(target, first, 'unlisted', url))).toMatchObject({
            status: 400,
            param: 'base_url',
          });
        }
      } finally {
        await target.close();
      }
    }
  });
});
