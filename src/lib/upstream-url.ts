/**
 * Which URLs the gateway may send a provider request to. A virtual key's base_url is chosen by a
 * tenant, and the gateway then fetches it with its own network position: without these rules a
 * tenant could read a cloud metadata service (credentials of the machine) or probe internal hosts.
 *
 * Here only literal addresses are judged: Workers cannot resolve names (nor reach private
 * addresses). On Node, where a name could point anywhere, node-runtime.ts also resolves it just
 * before each upstream fetch and judges every address with checkResolvedAddress.
 *
 * Hosts are taken from WHATWG URL parsing, which already turns `2852039166`, `0xA9FEA9FE` and
 * `0251.0376.0251.0376` into `169.254.169.254` and writes IPv6 in its compressed, lowercase,
 * hexadecimal form; the IPv6 parser below still accepts every spelling, so the rules hold
 * whatever produced the string.
 *
 * Pure on purpose: the run engine calls it before every upstream fetch.
 */

export interface UpstreamUrlOptions {
  /** Loopback, private, CGNAT and unspecified addresses (Node's default: local model servers). */
  allowPrivate: boolean;
}

type AddressClass = 'public' | 'private' | 'metadata';

/** A problem with `url` as an upstream, in words for an API error; null when it may be fetched. */
export function checkUpstreamUrl(url: string, options: UpstreamUrlOptions): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'expected an absolute http or https URL.';
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    return `expected an http or https URL, not '${parsed.protocol.slice(0, -1)}'.`;
  }
  if (parsed.username !== '' || parsed.password !== '') {
    return 'the URL must not contain credentials; the API key is a separate field.';
  }
  // An empty fragment (`…/#`) leaves `hash` empty but is still in `href`; `#` appears nowhere else.
  if (parsed.href.includes('#')) return 'the URL must not contain a fragment (#…).';

  const host = parsed.hostname;
  const kind = host.startsWith('[') ? classifyIpv6(host.slice(1, -1)) : classifyHost(host);
  if (kind === 'metadata') return 'cloud metadata and link-local addresses are never allowed as upstreams.';
  if (kind === 'private' && !options.allowPrivate) {
    return 'loopback, private, CGNAT and unspecified addresses are refused as upstreams unless GATEWAY_ALLOW_PRIVATE_UPSTREAMS is true.';
  }
  return null;
}

/**
 * A problem with an address that an upstream's name resolved to (IPv4 or IPv6, as a resolver
 * writes it); null when it may be fetched. The same rules as for literal hosts.
 */
export function checkResolvedAddress(address: string, options: UpstreamUrlOptions): string | null {
  const ipv4 = parseIpv4(address);
  const kind = ipv4 !== null ? classifyIpv4(ipv4) : classifyIpv6(address);
  if (kind === 'metadata') return 'it resolves to a cloud metadata or link-local address, never allowed as an upstream.';
  if (kind === 'private' && !options.allowPrivate) {
    return 'it resolves to a loopback, private, CGNAT or unspecified address, refused unless GATEWAY_ALLOW_PRIVATE_UPSTREAMS is true.';
  }
  return null;
}

/** Names that clouds resolve to their metadata service (GCE also resolves the short `metadata`). */
const METADATA_NAMES = new Set(['metadata.google.internal', 'metadata']);

function classifyHost(hostname: string): AddressClass {
  const name = hostname.toLowerCase().replace(/\.+$/, '');
  if (METADATA_NAMES.has(name)) return 'metadata';
  if (name === 'localhost' || name.endsWith('.localhost')) return 'private';
  const ipv4 = parseIpv4(name);
  return ipv4 === null ? 'public' : classifyIpv4(ipv4);
}

function parseIpv4(text: string): number | null {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (!match) return null;
  const octets = match.slice(1).map(Number);
  if (octets.some((octet) => octet > 255)) return null;
  return octets.reduce((value, octet) => value * 256 + octet, 0);
}

const inIpv4 = (address: number, base: string, bits: number) =>
  Math.floor(address / 2 ** (32 - bits)) === Math.floor(parseIpv4(base)! / 2 ** (32 - bits));

function classifyIpv4(address: number): AddressClass {
  // 169.254.169.254 (AWS, GCP, Azure, …) lies in link-local; 100.100.100.200 (Alibaba) in CGNAT.
  if (inIpv4(address, '169.254.0.0', 16) || address === parseIpv4('100.100.100.200')) return 'metadata';
  const privateRanges: [string, number][] = [
    ['0.0.0.0', 8], // "this network"; 0.0.0.0 reaches the local host on Linux
    ['127.0.0.0', 8],
    ['10.0.0.0', 8],
    ['172.16.0.0', 12],
    ['192.168.0.0', 16],
    ['100.64.0.0', 10],
  ];
  return privateRanges.some(([base, bits]) => inIpv4(address, base, bits)) ? 'private' : 'public';
}

/** Eight 16-bit groups, from any textual IPv6 form (zone ids are not valid in URLs). */
function parseIpv6(text: string): number[] | null {
  let body = text.toLowerCase();
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(body);
  if (dotted) {
    const ipv4 = parseIpv4(dotted[2]!);
    if (ipv4 === null) return null;
    body = `${dotted[1]}${(ipv4 >>> 16).toString(16)}:${(ipv4 & 0xffff).toString(16)}`;
  }
  const halves = body.split('::');
  if (halves.length > 2) return null;
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const head = groups(halves[0]!);
  const tail = halves.length === 2 ? groups(halves[1]!) : [];
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return null;
  const all = [...head, ...Array<string>(Math.max(missing, 0)).fill('0'), ...tail];
  if (!all.every((group) => /^[0-9a-f]{1,4}$/.test(group))) return null;
  return all.map((group) => parseInt(group, 16));
}

/** fd00:ec2::254, AWS's IPv6 metadata endpoint, as parseIpv6 groups. */
const AWS_IPV6_METADATA = [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254].join(':');

function classifyIpv6(text: string): AddressClass {
  const g = parseIpv6(text);
  if (!g) return 'metadata'; // unparseable: refuse outright rather than guess
  const embeddedIpv4 = () => g[6]! * 65536 + g[7]!;
  const zeroUpTo = (n: number) => g.slice(0, n).every((group) => group === 0);

  if (g.join(':') === AWS_IPV6_METADATA) return 'metadata';
  if ((g[0]! & 0xffc0) === 0xfe80) return 'metadata'; // link-local fe80::/10
  if (zeroUpTo(5) && g[5] === 0xffff) return classifyIpv4(embeddedIpv4()); // IPv4-mapped ::ffff:a.b.c.d
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) {
    return classifyIpv4(embeddedIpv4()); // NAT64 64:ff9b::a.b.c.d reaches that IPv4 address
  }
  if (zeroUpTo(6)) {
    // ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d
    return g[6] === 0 && g[7]! <= 1 ? 'private' : classifyIpv4(embeddedIpv4());
  }
  if ((g[0]! & 0xfe00) === 0xfc00) return 'private'; // unique local fc00::/7
  if ((g[0]! & 0xffc0) === 0xfec0) return 'private'; // deprecated site-local fec0::/10
  return 'public';
}
