import { readAtMost } from '../lib/bounded-read';
import { networkCause, type NetworkCause } from '../lib/network-errors';
import { UpstreamError, type UpstreamAnswer } from './types';

/**
 * What the gateway reads of an upstream's text outside the answer itself (error bodies, error
 * messages): bounded in bytes however much the upstream sends or its compression inflates, and
 * scrubbed of the provider key and anything shaped like one before it is stored or shown; and
 * what a failed connection's error says, for chat and embeddings calls alike.
 */

/** Of an error answer, this many bytes are read at most, after decompression. */
const MAX_ERROR_BODY_BYTES = 8192;
/** What a run's last_error quotes of an upstream's error message, at most. */
export const MAX_ERROR_MESSAGE_CHARS = 500;

/** The upstream's own error message, shortened and scrubbed of anything resembling a key. */
export async function errorDetail(response: UpstreamAnswer, secret: string): Promise<string> {
  let text: string;
  try {
    text = await readCapped(response.body, MAX_ERROR_BODY_BYTES, secret);
  } catch {
    return '.';
  }
  let message = text;
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    const candidate = typeof parsed.error === 'string' ? parsed.error : (parsed.error?.message ?? parsed.message);
    if (typeof candidate === 'string') message = candidate;
  } catch {
    // not JSON (or cut short): keep the text
  }
  message = redact(message.trim(), secret, MAX_ERROR_MESSAGE_CHARS);
  return message ? `: ${message}` : '.';
}

/** At most `maxBytes` of a body, decoded (readAtMost), without a prefix of the key at its end when cut. */
export async function readCapped(
  body: AsyncIterable<Uint8Array> | null,
  maxBytes: number,
  secret: string,
): Promise<string> {
  const { bytes, cut } = await readAtMost(body, maxBytes);
  const text = new TextDecoder().decode(bytes);
  return cut ? withoutKeyPrefixAtEnd(text, secret) : text;
}

const REDACTED = '[redacted]';
/** Shorter provider keys (`none`, `x`: servers that ignore keys) are not secrets and not redacted. */
const MIN_SECRET_CHARS = 8;
/** A key's prefix this long or longer, left at the end of a cut text, is removed too. */
const MIN_PREFIX_CHARS = 4;
const KEY_LIKE = /\b(sk|gk|pk|rk|key)[-_][A-Za-z0-9*._-]{6,}/gi;

/**
 * Removes the provider key and anything shaped like an API key from upstream text, then cuts it
 * to `maxChars`. The order matters: cut first, and a key straddling the cut would survive in
 * part; and a prefix of the key left at the end of the cut text is removed as well.
 */
export function redact(text: string, secret: string, maxChars: number): string {
  let out = secret.length >= MIN_SECRET_CHARS ? text.split(secret).join(REDACTED) : text;
  out = out.replace(KEY_LIKE, REDACTED);
  if (out.length <= maxChars) return out;
  return withoutKeyPrefixAtEnd(out.slice(0, maxChars), secret);
}

/** `text` without a prefix of `secret` (MIN_PREFIX_CHARS or longer) at its very end. */
function withoutKeyPrefixAtEnd(text: string, secret: string): string {
  if (secret.length < MIN_SECRET_CHARS) return text;
  const overlap = keyPrefixAtEnd(text, secret);
  return overlap >= MIN_PREFIX_CHARS ? `${text.slice(0, text.length - overlap)}${REDACTED}` : text;
}

/**
 * The length of the longest end of `text` that is a proper prefix of `key`: Knuth-Morris-Pratt
 * over the text's last key.length - 1 characters, linear however long or repetitive the key.
 */
function keyPrefixAtEnd(text: string, key: string): number {
  const fallback = new Int32Array(key.length);
  for (let i = 1, k = 0; i < key.length; i++) {
    while (k > 0 && key[i] !== key[k]) k = fallback[k - 1] ?? 0;
    if (key[i] === key[k]) k++;
    fallback[i] = k;
  }
  let matched = 0;
  for (let i = Math.max(0, text.length - (key.length - 1)); i < text.length; i++) {
    while (matched > 0 && text[i] !== key[matched]) matched = fallback[matched - 1] ?? 0;
    if (text[i] === key[matched]) matched++;
  }
  return matched;
}

/** A failed connection's last_error, by cause: what to check first. */
const NETWORK_FAILURES: Record<NetworkCause, string> = {
  dns: "The upstream's host name did not resolve (DNS): check the virtual key's base_url.",
  refused: "The upstream refused the connection: nothing listens at the virtual key's base_url.",
  reset: 'The upstream cut the connection.',
  tls: "The TLS handshake with the upstream failed (its certificate or protocol): check the virtual key's base_url.",
  timeout: 'The connection to the upstream timed out.',
  unreachable: "The upstream's address is unreachable from the gateway.",
  network: 'The connection to the upstream failed or was cut.',
};

/** A failed connection to an upstream, as an UpstreamError whose message says what to check first. */
export function networkFailure(error: unknown): UpstreamError {
  const cause = networkCause(error);
  return new UpstreamError('network', NETWORK_FAILURES[cause], undefined, cause);
}
