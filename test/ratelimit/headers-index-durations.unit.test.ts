import { defined } from '../support/defined';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors';
import { goDuration } from '../../src/ratelimit/headers';
import { matchesPolicy, PolicyIndex, type ActivePolicy } from '../../src/ratelimit/matching';
import { turnReservation, type TurnEstimate } from '../../src/ratelimit/reservation';
import { attributeValues, parseMetadataHeader, requestMetadata } from '../../src/ratelimit';

/** The pieces of rate limiting that need no database: the header, the index, the durations. */

describe('parseMetadataHeader', () => {
  it.each([undefined, '', '   '])('reads %j as no metadata', (value) => {
    expect(parseMetadataHeader(value)).toEqual({});
  });

  it('accepts the bounds exactly', () => {
    const pairs = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`.padEnd(64, 'x'), 'v'.repeat(512)]));
    expect(parseMetadataHeader(JSON.stringify(pairs))).toEqual(pairs);
    expect(parseMetadataHeader('{"team":"a","empty":""}')).toEqual({ team: 'a', empty: '' });
  });

  it.each([
    ['not JSON', '{team:a}', 'got text that is not JSON'],
    ['an array', '["a"]', 'got an array'],
    ['a string', '"team"', 'got a string'],
    ['a number', '42', 'got a number'],
    ['null', 'null', 'got null'],
    ['a number value', '{"team":1}', 'the value of "team" must be a string, got number'],
    ['a null value', '{"team":null}', 'got null'],
    ['an object value', '{"team":{"a":"b"}}', 'got object'],
    ['a boolean value', '{"team":true}', 'got boolean'],
    [
      '17 pairs',
      JSON.stringify(Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']))),
      'at most 16 key-value pairs are allowed, got 17',
    ],
    ['a key of 65 characters', JSON.stringify({ ['k'.repeat(65)]: 'v' }), 'is longer than 64 characters'],
    [
      'a value of 513 characters',
      JSON.stringify({ team: 'v'.repeat(513) }),
      'the value of "team" is longer than 512 characters',
    ],
  ])('refuses %s with 400 invalid_metadata_header', (_name, value, reason) => {
    let caught: unknown;
    try {
      parseMetadataHeader(value);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ApiError);
    const error = caught as ApiError;
    expect(error.status).toBe(400);
    expect(error.body.error).toMatchObject({
      type: 'invalid_request_error',
      code: 'invalid_metadata_header',
      param: 'x-gateway-metadata',
    });
    expect(error.message).toMatch(/^Invalid 'x-gateway-metadata' header: /);
    expect(error.message).toContain(reason);
  });

  it('keeps a __proto__ key as plain data', () => {
    const parsed = parseMetadataHeader('{"__proto__":"x"}');
    expect(Object.getPrototypeOf(parsed)).toBe(Object.prototype);
    const merged = requestMetadata({ team: 'a' }, '{"__proto__":"x"}');
    expect(Object.getPrototypeOf(merged)).toBe(Object.prototype);
    expect(Object.entries(merged)).toEqual([
      ['team', 'a'],
      ['__proto__', 'x'],
    ]);
  });

  it('merges the header over the run metadata, and refuses a bad header whatever the run has', () => {
    expect(requestMetadata({ team: 'a', user: 'u' }, '{"team":"b"}')).toEqual({ team: 'b', user: 'u' });
    expect(requestMetadata(null, undefined)).toEqual({});
    expect(() => requestMetadata({ team: 'a' }, '[')).toThrow(ApiError);
  });
});

describe('PolicyIndex', () => {
  /** A small deterministic PRNG (mulberry32), so that a failure can be replayed. */
  function random(seed: number) {
    return () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  const KEYS = ['api_key', 'workspace_id', 'virtual_key', 'provider', 'model', 'metadata.team', 'metadata.user'];
  const VALUES = ['a', 'b', 'c', ''];

  it('finds exactly the policies whose every condition holds, as checking each policy would', () => {
    const next = random(42);
    const pick = <T>(items: T[]) => defined(items[Math.floor(next() * items.length)]);
    const policies: ActivePolicy[] = Array.from({ length: 3000 }, (_, i) => {
      const keys = [...KEYS].sort(() => next() - 0.5).slice(0, 1 + Math.floor(next() * 3));
      return {
        id: `p${i}`,
        name: '',
        type: 'requests',
        unit: 'rpm',
        value: 1,
        conditions: keys.map((key) => ({ key, value: next() < 0.25 ? '*' : pick(VALUES.slice(0, 3)) })),
        groupBy: ['api_key'],
      };
    });
    // Only direct SQL can store a policy without conditions; it matches every request.
    policies.push({ ...defined(policies[0]), id: 'unconditional', conditions: [] });
    const index = new PolicyIndex(policies);
    expect(index.size).toBe(3001);

    let matchedSomewhere = 0;
    for (let r = 0; r < 500; r++) {
      const values = new Map<string, string>();
      for (const key of KEYS) if (next() < 0.8) values.set(key, pick(VALUES));
      const expected = policies
        .filter((policy) => matchesPolicy(policy, values))
        .map((p) => p.id)
        .sort();
      const actual = index
        .match(values)
        .map((p) => p.id)
        .sort();
      expect(actual).toEqual(expected);
      matchedSomewhere += expected.length > 1 ? 1 : 0;
    }
    expect(matchedSomewhere).toBeGreaterThan(100);
  });

  it('reads absent attributes as absent and metadata under metadata.<name>', () => {
    const values = attributeValues({
      api_key: 'k',
      workspace_id: 'w',
      virtual_key: 'vk',
      provider: 'openai',
      model: 'm',
      metadata: { team: '' },
    });
    expect([...values]).toEqual([
      ['api_key', 'k'],
      ['workspace_id', 'w'],
      ['virtual_key', 'vk'],
      ['provider', 'openai'],
      ['model', 'm'],
      ['metadata.team', ''],
    ]);
    const policy = (value: string): ActivePolicy => ({
      id: value,
      name: '',
      type: 'requests',
      unit: 'rpm',
      value: 1,
      conditions: [{ key: 'metadata.user', value }],
      groupBy: [],
    });
    expect(new PolicyIndex([policy('*'), policy('')]).match(values)).toEqual([]);
  });
});

describe('goDuration', () => {
  it.each([
    [0, '0s'],
    [-5, '0s'],
    [12, '12ms'],
    [999, '999ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [36_750, '36.75s'],
    [59_999, '59.999s'],
    [60_000, '1m0s'],
    [360_000, '6m0s'],
    [3_599_500, '59m59.5s'],
    [3_600_000, '1h0m0s'],
    [86_399_999, '23h59m59.999s'],
  ])('%d ms is %s', (ms, text) => {
    expect(goDuration(ms)).toBe(text);
  });
});

describe('turnReservation', () => {
  const turn = (over: Partial<TurnEstimate> = {}): TurnEstimate => ({
    promptChars: 0,
    knownPromptTokens: 0,
    maxCompletionTokens: null,
    completionTokensSoFar: 0,
    ...over,
  });
  it.each<[string, TurnEstimate, number]>([
    ['the default completion when the run sets no max_completion_tokens', turn(), 1024],
    ['plus the prompt at four characters a token, rounded up', turn({ promptChars: 9 }), 1024 + 3],
    [
      'plus the tokens known to be in the prompt (earlier turns)',
      turn({ promptChars: 8, knownPromptTokens: 40 }),
      1024 + 42,
    ],
    ['max_completion_tokens instead of the default', turn({ maxCompletionTokens: 300 }), 300],
    [
      'what earlier turns left of max_completion_tokens',
      turn({ maxCompletionTokens: 300, completionTokensSoFar: 120 }),
      180,
    ],
    [
      'nothing for a completion already spent',
      turn({ maxCompletionTokens: 300, completionTokensSoFar: 400, promptChars: 4 }),
      1,
    ],
  ])('%s', (_name, estimate, expected) => {
    expect(turnReservation(estimate, 1024)).toBe(expected);
  });
});
