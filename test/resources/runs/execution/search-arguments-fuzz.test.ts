import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { searchQueries } from '../../../../src/resources/runs/execution/file-search';
import { MAX_QUERIES, SearchArguments } from '../../../../src/resources/runs/execution/search-arguments';
import { SEARCH_LIMITS } from '../../../../src/resources/vector-stores/search-schemas';
import { recordTally } from '../../../support/tally';

/**
 * A file_search call's arguments read as they stream (search-arguments.ts), generated: against an
 * oracle that parses the whole arguments with JSON.parse, as searchQueries did, for valid and
 * broken JSON, cut into fragments anywhere.
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 200);
let inputsTried = 0;
afterAll(() => recordTally('search-arguments-fuzz', { inputsTried }));

/** What searchQueries answered when it parsed the arguments whole (position aside). */
function oracle(args: string): string[] | { problem: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(args);
  } catch {
    return { problem: 'The arguments were not valid JSON. Call file_search with {"queries": ["..."]}.' };
  }
  const raw =
    typeof parsed === 'object' && parsed !== null
      ? 'queries' in parsed && Array.isArray(parsed.queries)
        ? parsed.queries
        : 'query' in parsed
          ? [parsed.query]
          : []
      : [];
  const queries = raw
    .filter((query): query is string => typeof query === 'string' && query.trim() !== '')
    .slice(0, MAX_QUERIES)
    .map((query) => query.trim().slice(0, SEARCH_LIMITS.queryChars));
  return queries.length > 0 ? queries : { problem: 'No query was given. Call file_search with {"queries": ["..."]}.' };
}

/** `text` fed to a reader in the pieces that `cuts` (fractions of its length) make. */
function streamed(text: string, cuts: number[]): string[] | { problem: string } {
  const reader = new SearchArguments();
  let at = 0;
  for (const cut of [...cuts.map((f) => Math.floor(f * text.length))].sort((a, b) => a - b)) {
    reader.push(text.slice(at, cut));
    at = Math.max(at, cut);
  }
  reader.push(text.slice(at));
  return reader.queries();
}

const piece = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength: 6 }) },
  fc.constantFrom(
    ' ',
    '\t',
    '\n',
    '\u00a0',
    '\u2028',
    '\ufeff',
    '\u3000',
    '"',
    '\\',
    '\ud800',
    '😀',
    'é',
    '\0',
    '\x1f',
  ),
);
/** Text with whitespace of every kind trim knows, quotes, controls and surrogates, sometimes past the kept length. */
const text = fc.oneof(
  { weight: 5, arbitrary: fc.array(piece, { maxLength: 8 }).map((parts) => parts.join('')) },
  fc
    .tuple(
      fc.constantFrom('', ' ', '\u3000\n'),
      fc.integer({ min: SEARCH_LIMITS.queryChars - 2, max: SEARCH_LIMITS.queryChars + 2 }),
      fc.constantFrom('', ' ', ' x', '\u00a0\t'),
    )
    .map(([lead, length, tail]) => `${lead}${'q'.repeat(length)}${tail}`),
);
/** A JSON string of `value`, its characters sometimes escaped (`\uXXXX`, `\/`) as a model may write them. */
const jsonString = (value: string, escape: boolean) =>
  escape
    ? `"${[...value].map((char) => (char === '/' ? '\\/' : `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`)).join('')}"`
    : JSON.stringify(value);
const leaf = fc.oneof(
  fc.tuple(text, fc.boolean()).map(([value, escape]) => jsonString(value, escape && value.length < 20)),
  fc.constantFrom('0', '-0', '1.5e+3', '-12E-2', '0.0', 'true', 'false', 'null', '{}', '[]'),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
);
const value: fc.Arbitrary<string> = fc.letrec<{ value: string }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.array(tie('value'), { maxLength: 7 }).map((items) => `[${items.join(',')}]`),
    fc
      .array(fc.tuple(fc.constantFrom('queries', 'query', 'quer\\u0079', 'queriesx', 'a', '__proto__'), tie('value')), {
        maxLength: 3,
      })
      .map((entries) => `{${entries.map(([key, item]) => `"${key}":${item}`).join(',')}}`),
  ),
})).value;
/** Top objects with `queries` and `query` given (maybe twice), whitespace around their tokens. */
const args = fc
  .array(
    fc.tuple(
      fc.constantFrom('queries', 'query', 'queri\\u0065s', 'other'),
      fc.oneof(
        value,
        fc.array(fc.oneof(leaf, value), { maxLength: 9 }).map((items) => `[${items.join(' , ')}]`),
      ),
    ),
    { maxLength: 4 },
  )
  .chain((entries) =>
    fc
      .constantFrom('', ' ', '\n\t', '\r ')
      .map(
        (space) =>
          `${space}{${space}${entries.map(([key, item]) => `"${key}"${space}:${space}${item}`).join(`${space},`)}}${space}`,
      ),
  );
/** Valid arguments, then the same with a character dropped, added or changed, or cut short. */
const broken = fc
  .tuple(
    fc.oneof(args, value),
    fc.nat(),
    fc.constantFrom('drop', 'add', 'cut'),
    fc.constantFrom(',', '"', '}', ']', '\\', '0', 'e', '-', 'x', ' '),
  )
  .map(([good, at, how, char]) => {
    const i = good.length === 0 ? 0 : at % good.length;
    if (how === 'drop') return good.slice(0, i) + good.slice(i + 1);
    if (how === 'add') return good.slice(0, i) + char + good.slice(i);
    return good.slice(0, i);
  });
const cuts = fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 6 });

describe('SearchArguments', () => {
  it('reads what JSON.parse reads, in fragments cut anywhere, and refuses what it refuses', () => {
    fc.assert(
      fc.property(fc.oneof(args, value, broken, text), cuts, (input, at) => {
        inputsTried++;
        expect(streamed(input, at)).toEqual(oracle(input));
      }),
      { numRuns: RUNS * 10 },
    );
  });

  it.each([
    ['{"queries":["a","  b "]}', ['a', 'b']],
    ['{"query":"refunds"}', ['refunds']],
    ['{"queries":["a"],"queries":5,"query":" b"}', ['b']],
    ['{"queries":5,"queries":["c"]}', ['c']],
    ['{"quer\\u0079":"\\u00a0d\\ud83d\\ude00\\n"}', ['d😀']],
    ['[{"queries":["a"]}]', { problem: expect.stringContaining('No query') }],
    ['{"queries":[["a"],{"queries":["b"]}]}', { problem: expect.stringContaining('No query') }],
    ['{"queries":["a"]} x', { problem: expect.stringContaining('not valid JSON') }],
    ['{"queries":["a"\t]}', ['a']],
    ['{"queries":[01]}', { problem: expect.stringContaining('not valid JSON') }],
    ['{"queries":["a\u0001"]}', { problem: expect.stringContaining('not valid JSON') }],
    ['{"queries":["\\x"]}', { problem: expect.stringContaining('not valid JSON') }],
    ['{"queries":["a",]}', { problem: expect.stringContaining('not valid JSON') }],
    ['5', { problem: expect.stringContaining('No query') }],
    ['-', { problem: expect.stringContaining('not valid JSON') }],
    ['', { problem: expect.stringContaining('not valid JSON') }],
  ])('%s', (input, expected) => {
    expect(streamed(input, [])).toEqual(expected);
    expect(oracle(input)).toEqual(expected);
  });

  it('reads megabytes of arguments as they come, holding only the queries it keeps', () => {
    const huge = JSON.stringify({
      queries: Array.from({ length: 7 }, (_, i) => `${' '.repeat(i)}${String(i).repeat(700_000)}`),
    });
    const reader = new SearchArguments();
    for (let at = 0; at < huge.length; at += 16_384) reader.push(huge.slice(at, at + 16_384));
    expect(reader.queries()).toEqual(oracle(huge));
    // Nesting a million levels deep is JSON too (V8's parser is not recursive).
    const deep = `{"query":"x","a":${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}}`;
    expect(streamed(deep, [0.3, 0.7])).toEqual(oracle(deep));
  });

  it('is what searchQueries answers for whole arguments', () => {
    expect(searchQueries('{"queries":["a"]}', 0)).toEqual(['a']);
    const reader = new SearchArguments();
    reader.push('{"queries":["a"]}');
    expect(searchQueries(reader, 0)).toEqual(['a']);
  });
});
