import ipaddr from 'ipaddr.js';
import { BoundedMap } from './bounded-map';

/**
 * Which URLs the gateway may send a provider request to. A virtual key's base_url is chosen by a
 * tenant, and the gateway then fetches it with its own network position: without these rules a
 * tenant could read a cloud metadata service (credentials of the machine) or probe internal hosts.
 *
 * Here only literal addresses are judged: Workers cannot resolve names (nor reach private
 * addresses). On Node, where a name could point anywhere, runtime/node/upstream-fetch.ts also resolves it just
 * before each upstream fetch and judges every address with checkResolvedAddress.
 *
 * Hosts are taken from WHATWG URL parsing, which already turns `2852039166`, `0xA9FEA9FE` and
 * `0251.0376.0251.0376` into `169.254.169.254` and writes IPv6 in its compressed, lowercase,
 * hexadecimal form; ipaddr.js still accepts every spelling, so the rules hold whatever produced
 * the string. IPv6 addresses that carry an IPv4 address (mapped, NAT64, 6to4, Teredo) are judged
 * by the IPv4 address they lead to.
 *
 * Pure on purpose: the run engine calls it before every upstream fetch, through an app's
 * UpstreamUrlJudgements, which keep what a URL is, whatever the rules, by its text.
 */

export interface UpstreamUrlOptions {
  /** Loopback, private, CGNAT and unspecified addresses (local model servers). */
  allowPrivate: boolean;
  /** Hosts allowed even when private addresses are not (GATEWAY_ALLOWED_UPSTREAM_HOSTS). */
  allowedHosts?: readonly UpstreamHostPattern[];
  /** Why private addresses are refused, for the refusal's message (the setting or the database). */
  privateRefusedBecause?: string;
}

/**
 * One entry of GATEWAY_ALLOWED_UPSTREAM_HOSTS: `host[:port]`, where host is a name, `*.` and a
 * name (any name under it, not the name itself), an IPv4 address or an IPv6 address in brackets.
 */
export interface UpstreamHostPattern {
  /** As URL parsing writes a host (lowercase, IPv4 dotted, IPv6 bracketed); a wildcard's suffix. */
  host: string;
  wildcard: boolean;
  /** Null: any port. */
  port: number | null;
}

export type AddressClass = 'public' | 'private' | 'metadata';

/** A problem with `url` as an upstream, in words for an API error; null when it may be fetched. */
export function checkUpstreamUrl(url: string, options: UpstreamUrlOptions): string | null {
  return verdict(judge(url), options);
}

function verdict(judged: UrlJudgement, options: UpstreamUrlOptions): string | null {
  if (typeof judged === 'string') return judged;
  const refused = judged.kind === 'private' ? privateRefusal(judged.parsed, options) : null;
  return refused && `loopback, private, CGNAT and unspecified addresses are refused as upstreams ${refused}`;
}

/**
 * What the host of `url` is by its text alone: a literal address by its range, a name public
 * unless it is localhost's or a metadata service's. Names are not resolved here (see the top).
 */
export function hostKind(url: URL): AddressClass {
  const host = url.hostname;
  return host.startsWith('[') ? classifyIpv6(host.slice(1, -1)) : classifyHost(host);
}

/**
 * Null when the rules allow `url`'s private host; otherwise the end of a refusal: what would allow
 * it, why it is refused here, and how an admin allows this host.
 */
export function privateRefusal(url: URL, options: UpstreamUrlOptions): string | null {
  return allowsPrivate(url, options) ? null : privateRule(url, options);
}

/** What a URL is as an upstream, whatever the rules: a problem in words, or its host's kind. */
type UrlJudgement = string | { parsed: URL; kind: 'private' | 'public' };

const MAX_JUDGED_URLS = 1000;

/**
 * checkUpstreamUrl with the URLs judged kept, by their text: a run's turn checks its virtual key's
 * base_url each time (parsing it and classifying its host is a noticeable share of a turn's event
 * loop time), and a gateway has few. Bounded: past MAX_JUDGED_URLS the oldest is forgotten. One
 * per app (Deps.upstreamUrls).
 */
export class UpstreamUrlJudgements {
  readonly #judged = new BoundedMap<string, UrlJudgement>(MAX_JUDGED_URLS);

  check(url: string, options: UpstreamUrlOptions): string | null {
    let judged = this.#judged.get(url);
    if (judged === undefined) {
      judged = judge(url);
      this.#judged.set(url, judged);
    }
    return verdict(judged, options);
  }
}

/** `url` parsed, when it is an absolute http or https URL; else what it is not, in words for an API error. */
export function parseHttpUrl(url: string): URL | string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'expected an absolute http or https URL.';
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    return `expected an http or https URL, not '${parsed.protocol.slice(0, -1).slice(0, 32)}'.`;
  }
  return parsed;
}

function judge(url: string): UrlJudgement {
  const parsed = parseHttpUrl(url);
  if (typeof parsed === 'string') return parsed;
  if (parsed.username !== '' || parsed.password !== '') {
    return 'the URL must not contain credentials; the API key is a separate field.';
  }
  // An empty fragment (`…/#`) leaves `hash` empty but is still in `href`; `#` appears nowhere else.
  if (parsed.href.includes('#')) return 'the URL must not contain a fragment (#…).';

  const kind = hostKind(parsed);
  if (kind === 'metadata') return 'cloud metadata and link-local addresses are never allowed as upstreams.';
  return { parsed, kind };
}

/**
 * A problem with an address that the host of `url` resolved to (IPv4 or IPv6, as a resolver
 * writes it); null when it may be fetched. The same rules as for literal hosts; an allow-listed
 * host may resolve to private addresses, never to metadata ones.
 */
export function checkResolvedAddress(address: string, options: UpstreamUrlOptions, url?: URL): string | null {
  const ipv4 = parseIpv4(address);
  const kind = ipv4 ? classifyIpv4(ipv4) : classifyIpv6(address);
  if (kind === 'metadata')
    return 'it resolves to a cloud metadata or link-local address, never allowed as an upstream.';
  if (kind === 'private' && !(url ? allowsPrivate(url, options) : options.allowPrivate)) {
    return `it resolves to a loopback, private, CGNAT or unspecified address, refused ${privateRule(url, options)}`;
  }
  return null;
}

function allowsPrivate(url: URL, options: UpstreamUrlOptions): boolean {
  return options.allowPrivate || (options.allowedHosts ?? []).some((pattern) => hostMatches(url, pattern));
}

/** The end of a refusal: what allows such an address, why it is refused here, how to allow it. */
function privateRule(url: URL | undefined, options: UpstreamUrlOptions): string {
  const because = options.privateRefusedBecause ? ` (${options.privateRefusedBecause})` : '';
  const suggestion = url
    ? ` An admin can allow this host with GATEWAY_ALLOWED_UPSTREAM_HOSTS=${hostAndPort(url)}.`
    : '';
  return `unless GATEWAY_ALLOW_PRIVATE_UPSTREAMS is true or the host is in GATEWAY_ALLOWED_UPSTREAM_HOSTS${because}.${suggestion}`;
}

/** The host as URL parsing writes it, without trailing dots, and the port a fetch would use. */
function hostAndPort(url: URL): string {
  return `${url.hostname.replace(/\.+$/, '')}:${effectivePort(url)}`;
}

const effectivePort = (url: URL) => Number(url.port || (url.protocol === 'https:' ? 443 : 80));

function hostMatches(url: URL, pattern: UpstreamHostPattern): boolean {
  if (pattern.port !== null && pattern.port !== effectivePort(url)) return false;
  const host = url.hostname.replace(/\.+$/, '');
  return pattern.wildcard ? host.endsWith(`.${pattern.host}`) : host === pattern.host;
}

/**
 * GATEWAY_ALLOWED_UPSTREAM_HOSTS: comma-separated `host[:port]` patterns (see UpstreamHostPattern).
 * Hosts are normalised by URL parsing, as base URLs are, so `127.1` means `127.0.0.1` and
 * `[0:0::1]` means `[::1]`. A bad entry is a problem naming it.
 */
export function parseUpstreamHostPatterns(text: string): { patterns: UpstreamHostPattern[] } | { problem: string } {
  const patterns: UpstreamHostPattern[] = [];
  for (const entry of text.split(',').map((part) => part.trim())) {
    if (entry === '') continue;
    const pattern = parseHostPattern(entry);
    if (typeof pattern === 'string') return { problem: `'${entry}' ${pattern}` };
    patterns.push(pattern);
  }
  return { patterns };
}

const HOST_PATTERN = /^(\*\.)?(\[[0-9A-Fa-f:.]+\]|[^\s/\\?#@:[\]*%]+)(?::(\d{1,5}))?$/;

/** The pattern, or what is wrong with it. */
function parseHostPattern(entry: string): UpstreamHostPattern | string {
  const match = HOST_PATTERN.exec(entry);
  if (!match) return 'is not host[:port] (a name, *.name, an IPv4 address or an [IPv6] address, and an optional port).';
  const [, star, rawHost, rawPort] = match;
  const port = rawPort === undefined ? null : Number(rawPort);
  if (port !== null && (port < 1 || port > 65535)) return 'has a port outside 1 to 65535.';
  let host: string;
  try {
    host = new URL(`http://${rawHost}/`).hostname.replace(/\.+$/, '');
  } catch {
    return 'is not a valid host name or address.';
  }
  if (host === '') return 'has an empty host.';
  const isAddress = host.startsWith('[') || ipaddr.IPv4.isValidFourPartDecimal(host);
  if (star && isAddress) return 'has a wildcard on an address: `*.` applies to names only.';
  return { host, wildcard: star !== undefined, port };
}

/** Names that clouds resolve to their metadata service (GCE also resolves the short `metadata`). */
const METADATA_NAMES = new Set(['metadata.google.internal', 'metadata']);

function classifyHost(hostname: string): AddressClass {
  const name = hostname.toLowerCase().replace(/\.+$/, '');
  if (METADATA_NAMES.has(name)) return 'metadata';
  if (name === 'localhost' || name.endsWith('.localhost')) return 'private';
  const ipv4 = parseIpv4(name);
  return ipv4 ? classifyIpv4(ipv4) : 'public';
}

/**
 * An IPv4 address in any form inet_aton reads (`127.1`, `0x7f.1`, …), or null. The characters are
 * looked at first: ipaddr.js answers a name by throwing inside, which costs a run 10 µs or so.
 */
function parseIpv4(text: string): ipaddr.IPv4 | null {
  return /^[0-9a-fx.]+$/i.test(text) && ipaddr.IPv4.isValid(text) ? ipaddr.IPv4.parse(text) : null;
}

/** Alibaba Cloud's metadata service, inside CGNAT space. */
const ALIBABA_METADATA = ipaddr.IPv4.parse('100.100.100.200');

function classifyIpv4(address: ipaddr.IPv4): AddressClass {
  if (address.match(ALIBABA_METADATA, 32)) return 'metadata';
  switch (address.range()) {
    case 'linkLocal': // 169.254.0.0/16, with 169.254.169.254 (AWS, GCP, Azure, …)
      return 'metadata';
    case 'unspecified': // 0.0.0.0/8, "this network"; 0.0.0.0 reaches the local host on Linux
    case 'loopback':
    case 'private':
    case 'carrierGradeNat':
      return 'private';
    default:
      return 'public';
  }
}

/** AWS's IPv6 metadata endpoint. */
const AWS_IPV6_METADATA = ipaddr.IPv6.parse('fd00:ec2::254');
/** The well-known NAT64 prefix, whose addresses end in the IPv4 address they reach. */
const NAT64_WELL_KNOWN = ipaddr.IPv6.parse('64:ff9b::');

const ipv4Of = (bytes: number[]) => new ipaddr.IPv4(bytes);
const worst = (...classes: AddressClass[]): AddressClass =>
  classes.includes('metadata') ? 'metadata' : classes.includes('private') ? 'private' : 'public';

function classifyIpv6(text: string): AddressClass {
  // Unparseable (or an IPv4 address where IPv6 was expected): refuse outright rather than guess.
  if (!ipaddr.IPv6.isValid(text)) return 'metadata';
  const address = ipaddr.IPv6.parse(text);
  if (address.match(AWS_IPV6_METADATA, 128)) return 'metadata';
  const bytes = address.toByteArray();
  // The typings omit some names the library returns ('deprecatedSiteLocal').
  const range: string = address.range();
  switch (range) {
    case 'linkLocal': // fe80::/10
      return 'metadata';
    case 'unspecified':
    case 'loopback':
    case 'uniqueLocal': // fc00::/7
    case 'deprecatedSiteLocal': // fec0::/10
      return 'private';
    case 'ipv4Mapped': // ::ffff:a.b.c.d
    case 'rfc6145': // ::ffff:0:a.b.c.d
      return classifyIpv4(ipv4Of(bytes.slice(12)));
    case 'rfc6052': {
      // NAT64. The well-known prefix (64:ff9b::/96) ends in the IPv4 address. The local-use one
      // (64:ff9b:1::/48) reaches a network's own translator, whose prefix length (48 to 96 bits,
      // RFC 6052) decides where the IPv4 address sits: every possible place is judged, and the
      // address is private at least.
      if (address.match(NAT64_WELL_KNOWN, 96)) return classifyIpv4(ipv4Of(bytes.slice(12)));
      const places = [
        [6, 7, 9, 10],
        [7, 9, 10, 11],
        [9, 10, 11, 12],
        [12, 13, 14, 15],
      ];
      return worst(
        'private',
        ...places.map((place) => classifyIpv4(ipv4Of(bytes.filter((_, index) => place.includes(index))))),
      );
    }
    case '6to4': // 2002:aabb:ccdd::/48 reaches aa.bb.cc.dd
      return classifyIpv4(ipv4Of(bytes.slice(2, 6)));
    case 'teredo': // 2001:0:<server>:<flags>:<port>:<client>, the client's IPv4 address inverted
      return classifyIpv4(ipv4Of(bytes.slice(12).map((byte) => byte ^ 0xff)));
  }
  // The deprecated IPv4-compatible ::a.b.c.d.
  if (bytes.slice(0, 12).every((byte) => byte === 0)) return classifyIpv4(ipv4Of(bytes.slice(12)));
  return 'public';
}
