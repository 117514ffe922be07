import { defined } from '../../support/defined';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { searchStores, findStores } from '../../../src/retrieval/search';
import { embeddingKey } from '../../../src/resources/virtual-keys/embedding-key';
import { createFakeUpstream, fakeEmbedding } from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { seedStore, type SeededStore } from '../../support/vector-stores';

/**
 * Hybrid search (retrieval/search.ts) and POST /v1/vector_stores/{id}/search, on the real app and
 * database, with chunks embedded by the fake's deterministic /v1/embeddings: a text's vector is
 * its bag of words, so which chunk comes first, and with what score, follows from the words.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;
let store: SeededStore;

/** The fake's dimensions for the gateway's default GATEWAY_EMBEDDINGS_DIMENSIONS. */
const DIMENSIONS = 512;
/** One list's first place, of the two (vector, keywords) one query makes: 1/61 of 2/61. */
const FIRST_IN_ONE_LIST = 0.5;

/** A word other than `word` that the fake embeds on the same dimension, with the same sign or the opposite one. */
function collidingWord(word: string, sign: 1 | -1): string {
  const target = fakeEmbedding(word, DIMENSIONS);
  const at = target.findIndex((value) => value !== 0);
  for (let i = 0; ; i++) {
    const candidate = `w${i}`;
    const vector = fakeEmbedding(candidate, DIMENSIONS);
    if (vector[at] !== 0 && Math.sign(defined(vector[at])) === sign * Math.sign(defined(target[at]))) return candidate;
  }
}

const LOOKALIKE = collidingWord('zeppelin', 1);
const OPPOSITE = collidingWord('beta', -1);

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
  store = await seedStore(gateway, tenant, [
    {
      filename: 'policies.md',
      chunks: ['Refunds are granted within 30 days of purchase.', 'Shipping takes five business days.'],
      attributes: { author: 'ann', year: 2023, draft: false },
    },
    {
      filename: 'office.txt',
      chunks: ['Our office is in Paris, near the river.', `The ${'zeppelin'} hangar is closed.`, 'alpha beta beta'],
      attributes: { author: 'bob', year: 2025, draft: true },
    },
    { filename: 'pending.txt', chunks: ['Refunds pending ingestion are secret.'], status: 'in_progress' },
    { filename: 'broken.txt', chunks: ['Refunds of a failed file are secret.'], status: 'failed' },
  ]);
});
afterAll(() => gateway?.close());

const search = (body: unknown, id = store.id, key = tenant.workspaceKey) =>
  gateway.request(`/v1/vector_stores/${id}/search`, { key, body });

describe('POST /v1/vector_stores/{id}/search', () => {
  it('answers the right chunk first with the official SDK, as OpenAI’s page, from completed files only', async () => {
    const page = await openai.vectorStores.search(store.id, { query: 'How many days for refunds?' });
    const [first] = page.data;
    expect(first).toMatchObject({
      file_id: store.fileIds[0],
      filename: 'policies.md',
      attributes: { author: 'ann', year: 2023, draft: false },
      content: [{ type: 'text', text: 'Refunds are granted within 30 days of purchase.' }],
    });
    // First by meaning and by keywords: the best score there is.
    expect(defined(first).score).toBe(1);
    expect(page.data.every((item, i) => i === 0 || item.score <= defined(page.data[i - 1]).score)).toBe(true);
    const texts = page.data.map((item) => defined(item.content[0]).text);
    expect(texts.join(' ')).not.toContain('secret');
    const raw = await json(await search({ query: 'refunds' }));
    expect(raw).toMatchObject({
      object: 'vector_store.search_results.page',
      search_query: ['refunds'],
      has_more: false,
      next_page: null,
    });
  });

  it('finds a chunk by keywords alone, and one by meaning alone, each scored as first in one list', async () => {
    // `OPPOSITE` is embedded against `beta`: the chunk points away from the query, only its words match.
    const keyword = await json(await search({ query: `alpha ${OPPOSITE} ${OPPOSITE}` }));
    expect(keyword.data.map((item: any) => item.content[0].text)).toEqual(['alpha beta beta']);
    expect(keyword.data[0].score).toBeCloseTo(FIRST_IN_ONE_LIST, 10);
    // `LOOKALIKE` shares no word with the chunk but lands on zeppelin's dimension.
    const vector = await json(await search({ query: LOOKALIKE, max_num_results: 1 }));
    expect(vector.data[0].content[0].text).toBe('The zeppelin hangar is closed.');
    expect(vector.data[0].score).toBeCloseTo(FIRST_IN_ONE_LIST, 10);
  });

  it('drops results under score_threshold and keeps max_num_results', async () => {
    const all = await json(await search({ query: 'refunds shipping days office' }));
    expect(all.data.length).toBeGreaterThan(2);
    const two = await json(await search({ query: 'refunds shipping days office', max_num_results: 2 }));
    expect(two.data).toEqual(all.data.slice(0, 2));
    // The first is found by every word; the others by some.
    expect(all.data[0].score).toBeGreaterThan(all.data[1].score);
    const threshold = (all.data[0].score + all.data[1].score) / 2;
    const kept = await json(
      await search({ query: 'refunds shipping days office', ranking_options: { score_threshold: threshold } }),
    );
    expect(kept.data).toEqual([all.data[0]]);
    const exact = await json(
      await search({ query: 'refunds shipping days office', ranking_options: { score_threshold: all.data[1].score } }),
    );
    expect(exact.data).toEqual(all.data.filter((item: any) => item.score >= all.data[1].score));
  });

  it('filters on file attributes: comparisons, in and nin, and and or', async () => {
    const files = async (filters: unknown) =>
      [
        ...new Set(
          (await json(await search({ query: 'refunds shipping office zeppelin alpha', filters }))).data.map(
            (item: any) => item.filename,
          ),
        ),
      ].sort();
    expect(await files({ type: 'eq', key: 'author', value: 'ann' })).toEqual(['policies.md']);
    expect(await files({ type: 'ne', key: 'author', value: 'ann' })).toEqual(['office.txt']);
    expect(await files({ type: 'gte', key: 'year', value: 2024 })).toEqual(['office.txt']);
    expect(await files({ type: 'lt', key: 'year', value: 2024 })).toEqual(['policies.md']);
    expect(await files({ type: 'eq', key: 'draft', value: true })).toEqual(['office.txt']);
    // A number is not its string.
    expect(await files({ type: 'eq', key: 'year', value: '2023' })).toEqual([]);
    expect(await files({ type: 'in', key: 'author', value: ['bob', 'carol'] })).toEqual(['office.txt']);
    expect(await files({ type: 'nin', key: 'author', value: ['bob'] })).toEqual(['policies.md']);
    expect(
      await files({
        type: 'and',
        filters: [
          { type: 'eq', key: 'author', value: 'ann' },
          { type: 'gt', key: 'year', value: 2024 },
        ],
      }),
    ).toEqual([]);
    expect(
      await files({
        type: 'or',
        filters: [
          { type: 'eq', key: 'author', value: 'ann' },
          { type: 'and', filters: [{ type: 'gt', key: 'year', value: 2024 }] },
        ],
      }),
    ).toEqual(['office.txt', 'policies.md']);
  });

  it('refuses bad requests naming the field, and bounds filters', async () => {
    const cases: [unknown, string][] = [
      [{}, 'query'],
      [{ query: 'x', max_num_results: 51 }, 'max_num_results'],
      [{ query: [] }, 'query'],
      [{ query: 'x', ranking_options: { score_threshold: 2 } }, 'ranking_options.score_threshold'],
      [{ query: 'x', filters: { type: 'in', key: 'a', value: 'b' } }, 'filters.value'],
      [{ query: 'x', filters: { type: 'gt', key: 'a', value: true } }, 'filters.value'],
      [{ query: 'x', filters: { type: 'like', key: 'a', value: 'b' } }, 'filters.type'],
      [{ query: 'x', unknown: 1 }, 'unknown'],
    ];
    for (const [body, param] of cases) {
      const response = await search(body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect((await errorOf(response)).param, JSON.stringify(body)).toBe(param);
    }
    // Within the body's own nesting bound (64), beyond the filter's.
    const levels = 20;
    const deep = `{"type":"and","filters":[`.repeat(levels) + `{"type":"eq","key":"a","value":1}` + ']}'.repeat(levels);
    const tooDeep = await search(`{"query":"x","filters":${deep}}`);
    expect(tooDeep.status).toBe(400);
    expect((await errorOf(tooDeep)).message).toContain('deeper than 5');
    const wide = { type: 'or', filters: Array.from({ length: 33 }, () => ({ type: 'eq', key: 'a', value: 1 })) };
    expect((await search({ query: 'x', filters: wide })).status).toBe(400);
  });

  it('is a 404 for a store of another workspace, an unknown one, and without a key a 401', async () => {
    const other = await gateway.tenant();
    const response = await search({ query: 'refunds' }, store.id, other.workspaceKey);
    expect(response.status).toBe(404);
    expect(await errorOf(response)).toMatchObject({ code: 'vector_store_not_found' });
    expect((await search({ query: 'refunds' }, 'vs_unknown')).status).toBe(404);
    expect((await gateway.request(`/v1/vector_stores/${store.id}/search`, { body: { query: 'x' } })).status).toBe(401);
  });

  it('accepts rewrite_query and the rankers, searching the query as sent', async () => {
    const page = await json(
      await search({ query: ['refunds', 'Paris'], rewrite_query: true, ranking_options: { ranker: 'none' } }),
    );
    expect(page.search_query).toEqual(['refunds', 'Paris']);
    const texts = page.data.map((item: any) => item.content[0].text);
    expect(texts).toContain('Refunds are granted within 30 days of purchase.');
    expect(texts).toContain('Our office is in Paris, near the river.');
  });
});

describe('searchStores', () => {
  it('searches several stores of a workspace at once, and finds nothing in a store without chunks', async () => {
    const second = await seedStore(gateway, tenant, [
      { filename: 'menu.txt', chunks: ['The canteen serves refunds of soup on Fridays.'] },
    ]);
    const empty = await seedStore(gateway, tenant, []);
    const stores = await findStores(gateway.database.db, tenant.workspace.id, [store.id, second.id, empty.id]);
    expect(stores.map((one) => one.id)).toEqual([store.id, second.id, empty.id]);
    const searcher = { workspaceId: tenant.workspace.id, apiKeyId: tenant.workspaceKeyId };
    const options = { queries: ['refunds soup'], maxResults: 5, scoreThreshold: 0, filter: null };
    const results = await searchStores(gateway.deps, embeddingKey, searcher, stores, options);
    expect(new Set(results.map((result) => result.vectorStoreId))).toEqual(new Set([store.id, second.id]));
    expect(defined(results[0]).text).toBe('The canteen serves refunds of soup on Fridays.');
    upstream.reset();
    expect(await searchStores(gateway.deps, embeddingKey, searcher, [defined(stores[2])], options)).toEqual([]);
    expect(upstream.requests).toHaveLength(0);
    const other = await gateway.tenant();
    expect(await findStores(gateway.database.db, other.workspace.id, [store.id])).toEqual([]);
  });
});
