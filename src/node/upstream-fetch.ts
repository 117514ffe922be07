import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { checkResolvedAddress, type UpstreamUrlOptions } from '../lib/upstream-url';
import { UpstreamError } from '../providers/types';

type Resolve = (hostname: string) => Promise<{ address: string }[]>;

const resolveAll: Resolve = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/**
 * Node's upstream fetch. A virtual key's base_url was checked as written (lib/upstream-url.ts),
 * but a name can point anywhere, a metadata service or a private address included: so a name is
 * resolved just before the fetch and every address it has is judged by the rules in force
 * (`rules`, read per fetch: they follow the database's workspaces). A name's addresses are reused
 * for NAME_ADDRESSES_MS, so that each run does not pay a second lookup before its first byte (the
 * fetch resolves the name again anyway). A name that does not resolve is left to fetch, which
 * fails as it would. What this cannot stop is a name that resolves differently a moment later
 * (DNS rebinding with a zero TTL); `resolve` is a parameter for tests.
 */
export function upstreamFetch(options: {
  rules: () => UpstreamUrlOptions | Promise<UpstreamUrlOptions>;
  resolve?: Resolve;
}): typeof fetch {
  const resolve = options.resolve ?? resolveAll;
  const known = new Map<string, { addresses: string[]; until: number }>();
  const addressesOf = async (hostname: string): Promise<string[] | null> => {
    const cached = known.get(hostname);
    if (cached && cached.until > Date.now()) return cached.addresses;
    const resolved = await resolve(hostname).catch(() => null);
    if (resolved === null) return null;
    const addresses = resolved.map(({ address }) => address);
    known.delete(hostname);
    if (known.size >= NAME_ADDRESSES_MAX) known.delete(known.keys().next().value!);
    known.set(hostname, { addresses, until: Date.now() + NAME_ADDRESSES_MS });
    return addresses;
  };
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (!url.hostname.startsWith('[') && isIP(url.hostname) === 0) {
      const addresses = await addressesOf(url.hostname);
      if (addresses !== null) {
        const rules = await options.rules();
        let problem: string | null = null;
        for (const address of addresses) problem ??= checkResolvedAddress(address, rules, url);
        // Not the address itself: it would tell a tenant about the gateway's network.
        if (problem) throw new UpstreamError('address', `The virtual key's base_url is not allowed: ${problem}`);
      }
    }
    return fetch(input, init);
  };
}

const NAME_ADDRESSES_MS = 10_000;
const NAME_ADDRESSES_MAX = 1_000;
