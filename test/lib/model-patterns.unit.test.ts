import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors';
import { closestModel, conflicts, matches, overlap, sharedModel, specificity } from '../../src/lib/model-patterns';
import { chooseVirtualKey } from '../../src/resources/virtual-keys/commands';
import type { VirtualKey } from '../../src/db/schema';
import { RETRY_DEFAULTS } from '../../src/providers/attempts';

/**
 * The patterns of a virtual key's `models` (lib/model-patterns.ts) and the choice of a key for a
 * run's model among a workspace's keys (chooseVirtualKey), as pure functions. The same rules
 * through the API, with real runs: test/resources/virtual-keys/routing.test.ts.
 */

describe('closestModel', () => {
  const patterns = ['gpt-4o*', 'o3*', 'llama3.*', 'gpt-4.1', '*'];
  const table: [string, string | null][] = [
    ['gpt4o', 'gpt-4o'], // a glob stands for its literal text
    ['gpt-4.2', 'gpt-4.1'],
    ['lama3.', 'llama3.'],
    ['o4', 'o3'],
    ['claude-3-opus', null], // nothing close: no guess
    ['', null],
  ];
  it.each(table)('%s → %s', (model, expected) => expect(closestModel(model, patterns)).toBe(expected));

  it('takes the nearest of several, and a bounded time for long names', () => {
    expect(closestModel('gpt-4o-mimi', ['gpt-4o-mini', 'gpt-4o-m'])).toBe('gpt-4o-mini');
    const long = 'x'.repeat(256);
    expect(
      closestModel(
        long,
        Array.from({ length: 3200 }, (_, i) => `${'y'.repeat(250)}${i}`),
      ),
    ).toBeNull();
  });
});

describe('matches', () => {
  const table: [string, string, boolean][] = [
    ['gpt-4o', 'gpt-4o', true],
    ['gpt-4o', 'gpt-4o-mini', false],
    ['gpt-4o', 'GPT-4o', false], // case-sensitive
    ['gpt-4o*', 'gpt-4o', true], // `*` matches nothing too
    ['gpt-4o*', 'gpt-4o-mini', true],
    ['gpt-4o*', 'gpt-4', false],
    ['llama3.*', 'llama3.1:8b', true],
    ['llama3.*', 'llama31', false], // `.` is literal
    ['*-mini', 'gpt-4o-mini', true],
    ['*-mini', 'gpt-4o-mini-2024', false],
    ['*', '', true],
    ['*', 'anything', true],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'aXbYc', true],
    ['a*b*c', 'acb', false],
    ['ab*ba', 'aba', false], // the prefix and the suffix cannot share characters
    ['ab*ba', 'abba', true],
    ['a*a*a', 'aa', false],
    ['a*a*a', 'aaa', true],
    ['?', 'x', false], // only `*` is special
    ['?', '?', true],
    ['[ab]', 'a', false],
    ['gpt**', 'gpt', true],
  ];
  for (const [pattern, model, expected] of table) {
    it(`'${pattern}' ${expected ? 'matches' : 'does not match'} '${model}'`, () => {
      expect(matches(pattern, model)).toBe(expected);
    });
  }

  it('agrees with a regular expression built from the pattern', () => {
    const alphabet = fc.constantFrom('a', 'b', '*', '.');
    const text = fc.string({ unit: fc.constantFrom('a', 'b', '.'), maxLength: 8 });
    fc.assert(
      fc.property(fc.string({ unit: alphabet, maxLength: 6 }), text, (pattern, model) => {
        const regex = new RegExp(
          `^${pattern
            .split('*')
            .map((part) => part.replace(/\./g, '\\.'))
            .join('.*')}$`,
          's',
        );
        expect(matches(pattern, model)).toBe(regex.test(model));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('specificity', () => {
  it('ranks an exact name above every glob, and globs by their literal characters', () => {
    const ranked = ['gpt-4o-mini', 'gpt-4o-*', 'gpt-4o*', '*-mini', 'gpt*', '*'];
    const scores = ranked.map(specificity);
    expect(scores).toEqual([Number.POSITIVE_INFINITY, 7, 6, 5, 3, 0]);
    expect(specificity('a**b')).toBe(specificity('a*b'));
  });
});

describe('overlap and conflicts', () => {
  // [a, b, some model matches both, a tie (the same specificity too)]
  const table: [string, string, boolean, boolean][] = [
    ['gpt-4o', 'gpt-4o', true, true],
    ['gpt-4o', 'gpt-4o-mini', false, false],
    ['gpt-4o', 'gpt-4o*', true, false], // exact beats glob
    ['gpt-4o*', 'gpt-4o-*', true, false], // 6 against 7 literal characters
    ['gpt*', '*-4o', true, true], // gpt-4o, gpt-x-4o, …
    ['gpt*', '*4o', true, false], // 3 against 2 literal characters
    ['gpt*', 'llama*', false, false],
    ['gpt-4o*', 'gpt-4o*', true, true],
    ['*-mini', '*-mini', true, true],
    ['*-mini', '*-nano', false, false],
    ['a*b', 'ab*', true, true],
    ['a*b', 'ba*', false, false],
    ['*a', '*b', false, false],
    ['*', '*', true, true],
    ['*', 'x*', true, false],
    ['llama3.*', 'llama3*', true, false],
    ['gpt-4*', 'gpt-3*', false, false],
  ];
  for (const [a, b, shared, tie] of table) {
    it(`'${a}' and '${b}': ${shared ? 'overlap' : 'disjoint'}${tie ? ', a tie' : ''}`, () => {
      expect(overlap(a, b)).toBe(shared);
      expect(overlap(b, a)).toBe(shared);
      expect(conflicts(a, b)).toBe(tie);
      expect(conflicts(b, a)).toBe(tie);
      if (shared) {
        const model = sharedModel(a, b);
        expect(matches(a, model) && matches(b, model)).toBe(true);
      }
    });
  }

  it('finds a shared model exactly when one exists (every model up to 8 characters tried)', () => {
    const unit = fc.constantFrom('a', 'b', '*');
    const models = allStrings(['a', 'b'], 8);
    fc.assert(
      fc.property(fc.string({ unit, maxLength: 4 }), fc.string({ unit, maxLength: 4 }), (a, b) => {
        // A shared model, when there is one, needs no more characters than the two patterns'
        // literals together (sharedModel's construction): 8 at most here.
        const exists = models.some((model) => matches(a, model) && matches(b, model));
        expect(overlap(a, b)).toBe(exists);
        if (exists) expect(matches(a, sharedModel(a, b)) && matches(b, sharedModel(a, b))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });
});

function allStrings(alphabet: string[], maxLength: number): string[] {
  const out = [''];
  let level = [''];
  for (let length = 1; length <= maxLength; length++) {
    level = level.flatMap((prefix) => alphabet.map((character) => prefix + character));
    out.push(...level);
  }
  return out;
}

describe('chooseVirtualKey', () => {
  const key = (slug: string, models: string[], isDefault = false): VirtualKey => ({
    id: slug,
    workspaceId: 'ws',
    slug,
    provider: 'openai',
    baseUrl: 'https://api.openai.com/v1',
    options: {},
    models,
    isDefault,
    fallbacks: [],
    retry: RETRY_DEFAULTS,
    secretCiphertext: '',
    createdAt: 0,
    revokedAt: null,
  });
  const keys = [
    key('exact', ['gpt-4o', 'o3-mini']),
    key('family', ['gpt-4o*', 'llama3.*']),
    key('minis', ['*-mini']),
    key('fallback', [], true),
  ];
  // [model, the key chosen (null: none)]
  const table: [string, string | null][] = [
    ['gpt-4o', 'exact'], // an exact name beats gpt-4o*
    ['o3-mini', 'exact'], // and *-mini
    ['gpt-4o-mini', 'family'], // gpt-4o* (6) beats *-mini (5)
    ['gpt-4o-2024-08-06', 'family'],
    ['llama3.1:8b', 'family'],
    ['phi-mini', 'minis'],
    ['claude-3', 'fallback'], // no pattern: the default
    ['GPT-4O', 'fallback'], // patterns are case-sensitive
  ];
  for (const [model, chosen] of table) {
    it(`${model} → ${chosen}`, () => {
      expect(chooseVirtualKey(keys, model)?.slug ?? null).toBe(chosen);
    });
  }

  it('answers null with neither a match nor a default', () => {
    expect(chooseVirtualKey(keys.slice(0, 3), 'claude-3')).toBeNull();
    expect(chooseVirtualKey([], 'gpt-4o')).toBeNull();
  });

  it('counts a key by its best matching pattern', () => {
    const broad = key('broad', ['*', 'gpt-4o-mini']);
    expect(chooseVirtualKey([key('family', ['gpt-4o*']), broad], 'gpt-4o-mini')?.slug).toBe('broad');
    expect(chooseVirtualKey([key('family', ['gpt-4o*']), broad], 'gpt-4o')?.slug).toBe('family');
  });

  it('refuses a tie (which only plain SQL can write) rather than choose by chance', () => {
    let error: unknown;
    try {
      chooseVirtualKey([key('one', ['gpt*']), key('two', ['*-4o'])], 'gpt-4o');
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ code: 'ambiguous_models', status: 409 });
    expect((error as ApiError).message).toMatch(/'one' and 'two'/);
    // A more specific match elsewhere settles it.
    expect(
      chooseVirtualKey([key('one', ['gpt*']), key('two', ['*-4o']), key('three', ['gpt-4o'])], 'gpt-4o')?.slug,
    ).toBe('three');
  });
});
