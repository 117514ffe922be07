import { describe, expect, it } from 'vitest';
import {
  isRetryable,
  openWithAttempts,
  parseRetryAfter,
  RETRY_DEFAULTS,
  retryDelay,
  type RetrySettings,
} from '../../src/providers/attempts';
import { UpstreamError } from '../../src/providers/types';

/**
 * The policy of retries and fallbacks (providers/attempts.ts) as pure functions, and its loop over
 * keys with an `open` that fails as told. Through the gateway, with the fake provider:
 * test/resources/chat-completions/fallbacks.test.ts.
 */

const NOW = Date.parse('2026-11-28T12:00:00Z');
const http = (status: number, retryAfter?: string) =>
  new UpstreamError('http', `HTTP ${status}`, status, undefined, retryAfter);

describe('isRetryable', () => {
  it.each<[string, unknown, RetrySettings, boolean]>([
    ['a listed status', http(503), RETRY_DEFAULTS, true],
    ['a status not listed', http(400), RETRY_DEFAULTS, false],
    ['a status listed by the key', http(409), { ...RETRY_DEFAULTS, on_statuses: [409] }, true],
    ['a refused connection', new UpstreamError('network', 'refused', undefined, 'refused'), RETRY_DEFAULTS, true],
    ['silence before the first byte', new UpstreamError('timeout', 'silent'), RETRY_DEFAULTS, true],
    [
      'a network failure, network errors off',
      new UpstreamError('network', 'reset'),
      { ...RETRY_DEFAULTS, on_network_errors: false },
      false,
    ],
    ['a malformed answer', new UpstreamError('protocol', 'bad'), RETRY_DEFAULTS, false],
    ['a refused address', new UpstreamError('address', 'private'), RETRY_DEFAULTS, false],
    ['an error of the gateway', new Error('bug'), RETRY_DEFAULTS, false],
  ])('%s', (_, error, settings, expected) => {
    expect(isRetryable(error, settings)).toBe(expected);
  });
});

describe('parseRetryAfter', () => {
  it.each([
    ['2', 2000],
    [' 0 ', 0],
    ['Sat, 28 Nov 2026 12:00:05 GMT', 5000],
    ['Sat, 28 Nov 2026 11:00:00 GMT', 0],
    ['-1', null],
    ['1.5', null],
    ['soon', null],
    ['12345678901', null],
    ['2026-11-28T12:00:05Z', null],
  ])('%j is %j ms', (value, expected) => {
    expect(parseRetryAfter(value, NOW)).toBe(expected);
  });
});

describe('retryDelay', () => {
  const settings: RetrySettings = {
    ...RETRY_DEFAULTS,
    backoff_base_ms: 100,
    backoff_max_ms: 1000,
    max_retry_after_ms: 5000,
  };
  it.each([
    ['the first retry, drawn high', 1, undefined, 0.999, 99],
    ['the second doubles the ceiling', 2, undefined, 0.5, 100],
    ['the ceiling stops at the maximum', 10, undefined, 0.5, 500],
    ['a draw of 0 is no wait', 3, undefined, 0, 0],
    ["the provider's Retry-After wins", 1, '3', 0.5, 3000],
    ['a Retry-After over the bound: no retry', 1, '6', 0.5, null],
    ['a Retry-After that is not one: the backoff', 1, 'later', 0.5, 50],
  ] as const)('%s', (_, retry, retryAfter, random, expected) => {
    expect(retryDelay(retry, settings, retryAfter, NOW, () => random)).toBe(expected);
  });
});

describe('openWithAttempts', () => {
  interface Key {
    slug: string;
    retry: RetrySettings;
  }
  const key = (slug: string, retry: Partial<RetrySettings> = {}): Key => ({
    slug,
    retry: { ...RETRY_DEFAULTS, backoff_base_ms: 0, backoff_max_ms: 0, ...retry },
  });
  async function* keys(...list: Key[]) {
    yield* list;
  }
  /** Opens with each key as `answers` say, in order: an error is thrown, anything else is the call. */
  function run(list: Key[], answers: unknown[], options: { budgetMs?: number; signal?: AbortSignal } = {}) {
    const tried: string[] = [];
    const steps: string[] = [];
    const result = openWithAttempts(
      async (candidate: Key) => {
        tried.push(candidate.slug);
        const answer = answers.shift();
        if (answer instanceof Error) throw answer;
        return answer;
      },
      {
        keys: keys(...list),
        signal: options.signal ?? new AbortController().signal,
        budgetMs: options.budgetMs ?? 10_000,
        now: Date.now,
        random: () => 0.5,
        retrying: async ({ failed, next, attempt }) => {
          steps.push(`${failed.slug}>${next.slug}#${attempt}`);
        },
      },
    );
    return { result, tried, steps };
  }

  it("tries the key's attempts, then each fallback, and says which answered after how many", async () => {
    const { result, tried, steps } = run(
      [key('a', { attempts: 2 }), key('b'), key('c')],
      [http(500), http(502), http(503), 'ok'],
    );
    await expect(result).resolves.toMatchObject({ value: 'ok', key: { slug: 'c' }, attempts: 4 });
    expect(tried).toEqual(['a', 'a', 'b', 'c']);
    expect(steps).toEqual(['a>a#2', 'a>b#3', 'b>c#4']);
  });

  it('throws a failure that is not retryable at once, and the last one when every key failed', async () => {
    const refused = http(401);
    const first = run([key('a', { attempts: 3 }), key('b')], [refused]);
    await expect(first.result).rejects.toBe(refused);
    expect(first.tried).toEqual(['a']);
    const last = http(500);
    const all = run([key('a'), key('b')], [http(500), last]);
    await expect(all.result).rejects.toBe(last);
  });

  it('moves to the next key at once when the wait would end past the budget', async () => {
    const { result, tried } = run([key('a', { attempts: 3 }), key('b')], [http(429, '2'), 'ok'], { budgetMs: 1000 });
    await expect(result).resolves.toMatchObject({ key: { slug: 'b' }, attempts: 2 });
    expect(tried).toEqual(['a', 'b']);
  });

  it('a signal that aborts ends the wait with its reason', async () => {
    const controller = new AbortController();
    const { result } = run([key('a', { attempts: 2, backoff_base_ms: 60_000, backoff_max_ms: 60_000 })], [http(500)], {
      signal: controller.signal,
      budgetMs: 120_000,
    });
    const reason = new Error('client left');
    controller.abort(reason);
    await expect(result).rejects.toBe(reason);
  });
});
