import { defined } from '../../../support/defined';
import { describe, expect, it } from 'vitest';
import {
  citations,
  MAX_RESULT_CHARS,
  MAX_SEARCHES_PER_ROUND,
  searchOutput,
  searchQueries,
} from '../../../../src/resources/runs/execution/file-search';
import { fuse, keywordMatch, keywords } from '../../../../src/retrieval/search';

/** The pure parts of file search: arguments, the text the model is given, citations, fusion. */

const result = (n: number, text: string) => ({
  chunkId: n,
  vectorStoreId: 'vs_a',
  fileId: `file-${n}`,
  filename: `f${n}.txt`,
  score: 1,
  attributes: {},
  text,
});

describe('searchQueries', () => {
  it.each([
    ['{"queries":["a","  b "]}', ['a', 'b']],
    ['{"query":"refunds"}', ['refunds']],
    ['{"queries":["", 5, "x"]}', ['x']],
    [JSON.stringify({ queries: Array.from({ length: 9 }, (_, i) => `q${i}`) }), ['q0', 'q1', 'q2', 'q3', 'q4']],
  ])('%s', (args, queries) => expect(searchQueries(args, 0)).toEqual(queries));

  it('tells the model what went wrong instead of searching', () => {
    expect(searchQueries('nope', 0)).toEqual({ problem: expect.stringContaining('not valid JSON') });
    expect(searchQueries('{"queries":[]}', 0)).toEqual({ problem: expect.stringContaining('No query') });
    expect(searchQueries('{"queries":["a"]}', MAX_SEARCHES_PER_ROUND)).toEqual({
      problem: expect.stringContaining('Not searched'),
    });
  });
});

describe('searchOutput', () => {
  it('numbers results from the run’s count, and keeps what fits MAX_RESULT_CHARS', () => {
    const big = 'x'.repeat(MAX_RESULT_CHARS / 2);
    const { output, results } = searchOutput([result(1, 'one'), result(2, big), result(3, big)], 7);
    expect(results.map((r) => r.file_id)).toEqual(['file-1', 'file-2']);
    expect(output).toContain('【7†f1.txt】\none');
    expect(output).toContain('【8†f2.txt】');
    expect(output.length).toBeLessThan(MAX_RESULT_CHARS + 200);
    const alone = searchOutput([result(1, 'y'.repeat(MAX_RESULT_CHARS * 2))], 0);
    expect(defined(defined(alone.results[0]).content[0]).text).toHaveLength(MAX_RESULT_CHARS);
  });
});

describe('citations', () => {
  const sources = [{ fileId: 'file-a' }, { fileId: 'file-b' }];
  it('maps the markers that name a result, with UTF-16 indices', () => {
    const text = 'A 【0†a.txt】 and B【1†b.txt】, not 【2†c】 nor 【x†a】.';
    expect(citations(text, sources)).toEqual([
      {
        type: 'file_citation',
        text: '【0†a.txt】',
        start_index: 2,
        end_index: 11,
        file_citation: { file_id: 'file-a' },
      },
      {
        type: 'file_citation',
        text: '【1†b.txt】',
        start_index: 17,
        end_index: 26,
        file_citation: { file_id: 'file-b' },
      },
    ]);
    expect(citations('no markers', sources)).toEqual([]);
    expect(citations('【0†a】', [])).toEqual([]);
  });
});

describe('fuse and keywordMatch', () => {
  it('scores a chunk first in every list 1, first in one of two 0.5', () => {
    expect(
      fuse(
        [
          [1, 2],
          [1, 3],
        ],
        2,
      ),
    ).toEqual([
      { chunkId: 1, score: 1 },
      { chunkId: 2, score: 1 / 62 / (2 / 61) },
      { chunkId: 3, score: 1 / 62 / (2 / 61) },
    ]);
    expect(fuse([[4], []], 2)).toEqual([{ chunkId: 4, score: 0.5 }]);
  });

  it('quotes every word, names the store by its random part, and refuses an id it cannot inline', () => {
    expect(keywordMatch('vs_Abc123', keywords('Refund "policy" OR x* refund'))).toBe(
      'vector_store_id : "Abc123" AND ("refund" OR "policy" OR "or" OR "x")',
    );
    expect(keywords('?!')).toEqual([]);
    expect(keywordMatch('vs_Abc123', [])).toBeNull();
    expect(() => keywordMatch('vs_a"b', ['x'])).toThrow();
  });
});
