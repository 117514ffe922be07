/**
 * Why a connection failed, read from an error's chain of causes. A failed fetch on Node is a
 * `TypeError: fetch failed` whose `cause` (sometimes the cause's cause) carries the system call's
 * or undici's `code`; libSQL's client wraps the same. Workers' fetch carries no codes: there every
 * failure is `network`.
 */

export type NetworkCause = 'dns' | 'refused' | 'reset' | 'tls' | 'timeout' | 'unreachable' | 'network';

/** How deep into `cause` to look: the codes sit one or two levels down. */
const MAX_DEPTH = 5;

const BY_CODE: Record<string, NetworkCause> = {
  ENOTFOUND: 'dns',
  EAI_AGAIN: 'dns',
  EAI_FAIL: 'dns',
  EAI_NONAME: 'dns',
  ECONNREFUSED: 'refused',
  ECONNRESET: 'reset',
  ECONNABORTED: 'reset',
  EPIPE: 'reset',
  UND_ERR_SOCKET: 'reset',
  UND_ERR_CLOSED: 'reset',
  ETIMEDOUT: 'timeout',
  UND_ERR_CONNECT_TIMEOUT: 'timeout',
  UND_ERR_HEADERS_TIMEOUT: 'timeout',
  UND_ERR_BODY_TIMEOUT: 'timeout',
  EHOSTUNREACH: 'unreachable',
  ENETUNREACH: 'unreachable',
  EPROTO: 'tls',
};

/** OpenSSL's certificate codes (CERT_HAS_EXPIRED, DEPTH_ZERO_SELF_SIGNED_CERT, …) and Node's TLS ones. */
const TLS_CODE = /^(CERT_|ERR_TLS_|ERR_SSL_)|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|HOSTNAME_MISMATCH/;

/** The first cause in the chain that a code names, else `network`. */
export function networkCause(error: unknown): NetworkCause {
  for (const link of causeChain(error)) {
    const code = codeOf(link);
    if (code === undefined) continue;
    const cause = BY_CODE[code] ?? (TLS_CODE.test(code) ? 'tls' : undefined);
    if (cause) return cause;
  }
  return 'network';
}

/**
 * The innermost message of the chain: `getaddrinfo ENOTFOUND db.example` rather than `fetch
 * failed`. For the operator's own messages only (it may name addresses of the gateway's network).
 */
export function innermostMessage(error: unknown): string {
  const chain = causeChain(error);
  const last = chain[chain.length - 1];
  return last instanceof Error ? last.message : String(last);
}

function causeChain(error: unknown): unknown[] {
  const chain: unknown[] = [];
  for (let link = error; link !== undefined && link !== null && chain.length < MAX_DEPTH;) {
    chain.push(link);
    link = link instanceof Error ? link.cause : undefined;
  }
  return chain;
}

function codeOf(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  return typeof error.code === 'string' ? error.code : undefined;
}
