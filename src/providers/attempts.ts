import { UpstreamError } from './types';

/**
 * Retries and fallbacks of a provider call: which failure is tried again, after how long, and the
 * loop that opens a call with a virtual key, its retries, then each of its fallback keys in order.
 * Only opening is tried again, never what follows: once a provider's answer began (its 2xx headers
 * are in), a byte may have reached the client, and a second answer would repeat or contradict it.
 */

/** A virtual key's retry settings (virtual_keys.retry), every field present. */
export interface RetrySettings {
  /** Calls made with the key at most, the first included (1: no retry). */
  attempts: number;
  /** The provider's statuses that are tried again (and, once the key's attempts are spent, passed to its fallbacks). */
  on_statuses: number[];
  /** Whether a refused, reset or unreachable connection, or silence before the first byte, is tried again. */
  on_network_errors: boolean;
  /** The first backoff's ceiling; each retry doubles it, up to `backoff_max_ms`. The wait is drawn below it (full jitter). */
  backoff_base_ms: number;
  backoff_max_ms: number;
  /** The longest `Retry-After` honoured: a provider that asks for longer is not tried again with this key. */
  max_retry_after_ms: number;
}

export const RETRY_DEFAULTS: RetrySettings = {
  attempts: 1,
  on_statuses: [429, 500, 502, 503, 504],
  on_network_errors: true,
  backoff_base_ms: 250,
  backoff_max_ms: 4000,
  max_retry_after_ms: 10_000,
};

/** The bounds the API holds a key's settings to (resources/virtual-keys/schemas.ts). */
export const RETRY_LIMITS = {
  attempts: 5,
  statuses: 16,
  backoffMs: 60_000,
  retryAfterMs: 60_000,
  fallbacks: 5,
} as const;

/** Whether `error`, a failed opening, may be tried again under `settings` (or with a fallback key). */
export function isRetryable(error: unknown, settings: RetrySettings): boolean {
  if (!(error instanceof UpstreamError)) return false;
  switch (error.kind) {
    case 'http':
      return error.status !== undefined && settings.on_statuses.includes(error.status);
    case 'network':
    case 'timeout':
      return settings.on_network_errors;
    case 'protocol':
    case 'address':
      return false;
  }
}

/**
 * How long to wait before retry number `retry` (1 for the first) of a failure: the provider's
 * `Retry-After` when it sent one, else a backoff drawn with full jitter (`random()` in [0, 1)) below
 * base × 2^(retry-1), at most `backoff_max_ms`. Null when the provider asks for longer than
 * `max_retry_after_ms`: the key is not tried again.
 */
export function retryDelay(
  retry: number,
  settings: RetrySettings,
  retryAfter: string | undefined,
  now: number,
  random: () => number,
): number | null {
  const asked = retryAfter === undefined ? null : parseRetryAfter(retryAfter, now);
  if (asked !== null) return asked <= settings.max_retry_after_ms ? asked : null;
  const ceiling = Math.min(settings.backoff_max_ms, settings.backoff_base_ms * 2 ** Math.min(retry - 1, 30));
  return Math.floor(random() * ceiling);
}

/**
 * `Retry-After` in milliseconds from `now`: delay-seconds or an HTTP date (RFC 9110 §10.2.3); a
 * date already past is 0. Null when it is neither.
 */
export function parseRetryAfter(value: string, now: number): number | null {
  const text = value.trim();
  if (/^\d{1,10}$/.test(text)) return Number(text) * 1000;
  // HTTP dates name their weekday and zone ("Wed, 21 Oct 2015 07:28:00 GMT"); a bare number is not one.
  if (!/^[A-Za-z]{3},? .*GMT$/.test(text)) return null;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** One key a call may be made with, and its retry settings. */
export interface Candidate {
  retry: RetrySettings;
}

export interface AttemptOptions<K extends Candidate> {
  /** The key the call was made for, then its fallbacks in order: read only as far as they are needed. */
  keys: AsyncIterable<K>;
  /** Aborts the waits (the client left, the run was cancelled): its reason is thrown as is. */
  signal: AbortSignal;
  /**
   * The time all the waits between attempts fit in, from the first attempt (the first-byte
   * timeout): a retry whose wait would end past it is not made, and the next key is tried at once.
   */
  budgetMs: number;
  /** The clock and the jitter's draw (Date.now and Math.random unless a test fixes them). */
  now?: () => number;
  random?: () => number;
  /**
   * Told before each attempt after the first, of the attempt that failed before it and the key
   * about to be tried: to count both, and to say so in a log line.
   */
  retrying?: (step: { failed: K; error: unknown; next: K; attempt: number }) => Promise<void>;
}

/** What opened: the call, the key that served it and how many attempts it took in all. */
export interface Attempted<K, T> {
  value: T;
  key: K;
  attempts: number;
}

/**
 * Opens a call with each key in turn: the key's own attempts first (after a retryable failure, a
 * wait: retryDelay), then the next key. A failure that is not retryable, or the last one, is
 * thrown as it is (the caller's `retrying` has counted the attempts before it).
 */
export async function openWithAttempts<K extends Candidate, T>(
  open: (key: K) => Promise<T>,
  options: AttemptOptions<K>,
): Promise<Attempted<K, T>> {
  const { now = Date.now, random = Math.random } = options;
  const started = now();
  let attempts = 0;
  let failure: { key: K; error: unknown } | null = null;
  for await (const key of options.keys) {
    for (let tried = 1; ; tried++) {
      if (failure)
        await options.retrying?.({ failed: failure.key, error: failure.error, next: key, attempt: attempts + 1 });
      attempts++;
      let error: unknown;
      try {
        return { value: await open(key), key, attempts };
      } catch (caught) {
        error = caught;
      }
      // A call aborted fails with the abort's reason, as openChatCall does.
      if (options.signal.aborted) throw options.signal.reason;
      if (!isRetryable(error, key.retry)) throw error;
      failure = { key, error };
      if (tried >= key.retry.attempts) break;
      const retryAfter = error instanceof UpstreamError ? error.retryAfter : undefined;
      const delay = retryDelay(tried, key.retry, retryAfter, now(), random);
      if (delay === null || now() + delay - started > options.budgetMs) break;
      await wait(delay, options.signal);
    }
  }
  throw failure?.error ?? new Error('A call was opened with no key at all.');
}

/** Resolves after `ms`, or rejects with the signal's reason once it aborts. */
function wait(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const done = () => {
      signal.removeEventListener('abort', abort);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const abort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', abort, { once: true });
  });
}
