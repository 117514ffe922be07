import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { pipeline, Readable, type Transform } from 'node:stream';
import { constants, createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { Agent } from 'undici';
import type { IncomingHttpHeaders } from 'undici/types/header';
import { BoundedMap } from '../../lib/bounded-map';
import { checkResolvedAddress, type UpstreamUrlOptions } from '../../lib/upstream-url';
import { UpstreamError, type UpstreamAnswer, type UpstreamFetch, type UpstreamRequest } from '../../providers/types';
import { requestUpstream, type UpstreamBody } from './upstream-request';

type Resolve = (hostname: string) => Promise<{ address: string }[]>;

const resolveAll: Resolve = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/**
 * Node's upstream client: undici's pooled dispatcher (an Agent keeps a pool of kept-alive
 * connections per origin), dispatched to directly (upstream-request.ts): the status, the headers
 * and the body's chunks as they arrive, where `fetch` builds a Request, Headers, a Response and
 * web streams around the same bytes, and copies the request body to follow redirects (which the
 * gateway refuses anyway): fetch was a tenth of a run's CPU. undici's own timeouts are off: every
 * call carries the gateway's (providers/chat.ts, embeddings.ts). A 3xx is an answer like any
 * other, never followed.
 *
 * The gateway asks for no compression, but an upstream may compress anyway: gzip, deflate and br
 * bodies are decompressed as they are read (as fetch would), so a reader's bound applies to the
 * decompressed bytes, and cancelling the body stops the decompression and drops the connection.
 *
 * A virtual key's base_url was checked as written (lib/upstream-url.ts),
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
}): UpstreamFetch {
  const resolve = options.resolve ?? resolveAll;
  // undici's Agent takes tens of ms to load (more on a busy machine): not during start-up, nor on
  // the first run's clock (its first-byte timeout), but in the background, a turn of the event
  // loop after; a call before then waits for the same load. The Agent's module alone, not undici's
  // index, which also loads its fetch, WebSocket, cache and mocks: 10 MB of resident memory and
  // twice the load time, for nothing the gateway calls (it dispatches, upstream-request.ts).
  let agent: Promise<Agent> | undefined;
  const agentOf = () =>
    (agent ??= import('undici/lib/dispatcher/agent.js').then(
      ({ default: UndiciAgent }) => new UndiciAgent({ headersTimeout: 0, bodyTimeout: 0 }),
    ));
  setTimeout(() => void agentOf(), 0).unref();
  const known = new BoundedMap<string, { addresses: string[]; until: number }>(NAME_ADDRESSES_MAX);
  const addressesOf = async (hostname: string): Promise<string[] | null> => {
    const cached = known.get(hostname);
    if (cached && cached.until > Date.now()) return cached.addresses;
    const resolved = await resolve(hostname).catch(() => null);
    if (resolved === null) return null;
    const addresses = resolved.map(({ address }) => address);
    known.delete(hostname);
    known.set(hostname, { addresses, until: Date.now() + NAME_ADDRESSES_MS });
    return addresses;
  };
  return async (input, init) => {
    const url = new URL(input);
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
    const answer = await requestUpstream(
      await agentOf(),
      {
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: init.method,
        headers: init.headers,
        body: init.body === undefined ? null : nodeBody(init.body),
      },
      init.signal ?? null,
    );
    return {
      status: answer.statusCode,
      headers: { get: (name) => headerOf(answer.headers, name) },
      body: decoded(answer.body, headerOf(answer.headers, 'content-encoding')),
    } satisfies UpstreamAnswer;
  };
}

function ignore() {}

/** A request's body as undici takes it: a web stream as a Readable, which undici reads as the socket drains and destroys (cancelling the stream) when the request ends early. */
function nodeBody(body: NonNullable<UpstreamRequest['body']>): string | Uint8Array | Readable {
  return typeof body === 'string' || body instanceof Uint8Array ? body : Readable.fromWeb(body);
}

function headerOf(headers: IncomingHttpHeaders, name: string): string | null {
  const value = headers[name.toLowerCase()];
  if (value === undefined) return null;
  return typeof value === 'string' ? value : value.join(', ');
}

/** More codings than this in one Content-Encoding are refused (fetch allows five as well). */
const MAX_CODINGS = 5;

/** The body decompressed as its Content-Encoding says, innermost coding last; unknown codings pass as is. */
function decoded(body: UpstreamBody, contentEncoding: string | null): AsyncIterable<Uint8Array> {
  if (contentEncoding === null) return body;
  const codings = contentEncoding
    .toLowerCase()
    .split(',')
    .map((coding) => coding.trim())
    .filter((coding) => coding !== '' && coding !== 'identity');
  if (codings.length === 0) return body;
  if (codings.length > MAX_CODINGS) {
    void body.return();
    throw new UpstreamError('protocol', `The upstream answered with more than ${MAX_CODINGS} content codings.`);
  }
  const decoders: (() => Transform)[] = [];
  for (const coding of codings.reverse()) {
    const decoder = DECODERS.get(coding);
    if (decoder === undefined) return body;
    decoders.push(decoder);
  }
  // A reader iterates the last; destroying it (a reader letting go) destroys every stream before
  // it, the body's included, which aborts the request.
  let last: Readable = Readable.from(body, { objectMode: false });
  for (const decoder of decoders) last = pipeline(last, decoder(), ignore);
  return last;
}

/** As fetch decompresses: a body cut short still yields what it inflated to. */
const LENIENT = { flush: constants.Z_SYNC_FLUSH, finishFlush: constants.Z_SYNC_FLUSH };

/** A decompressor per coding the gateway reads (a Map: a coding named `constructor` is unknown, not Object's). */
const DECODERS = new Map<string, () => Transform>([
  ['gzip', () => createGunzip(LENIENT)],
  ['x-gzip', () => createGunzip(LENIENT)],
  ['deflate', () => createInflate(LENIENT)],
  [
    'br',
    () =>
      createBrotliDecompress({
        flush: constants.BROTLI_OPERATION_FLUSH,
        finishFlush: constants.BROTLI_OPERATION_FLUSH,
      }),
  ],
]);

const NAME_ADDRESSES_MS = 10_000;
const NAME_ADDRESSES_MAX = 1_000;
