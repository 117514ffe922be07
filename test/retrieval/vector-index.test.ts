import { defined } from '../support/defined';
import { randomBytes } from 'node:crypto';
import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSqld, type RunningSqld } from '../../scripts/sqld';
import { vectorStoreChunks, vectorStores } from '../../src/db/schema';
import { COMMON_WORD_CHUNKS, findStores, searchStores, type SearchableStore } from '../../src/retrieval/search';
import { embeddingKey } from '../../src/resources/virtual-keys/embedding-key';
import { indexNames, maintainVectorIndexes } from '../../src/retrieval/vector-index';
import { deleteVectorStore } from '../../src/resources/vector-stores/queries';
import { createFakeUpstream } from '../support/fake-upstream';
import { createTestGateway, type Tenant, type TestGateway } from '../support/gateway';
import { seedStore, type SeedFile, type SeededStore } from '../support/vector-stores';

/**
 * Per-store vector indexes (retrieval/vector-index.ts) with a threshold of 40 chunks, on the
 * embedded file and on a libSQL server: created past the threshold, back-filled in batches while
 * search stays exact, then searched with the exact scan's results, kept in step by the triggers,
 * confined to their store, bounded in number, dropped with their store.
 */

const THRESHOLD = 40;
const upstream = createFakeUpstream();

/** Deterministic texts over a small vocabulary, so that queries share words with many chunks. */
const VOCABULARY = [
  'refund',
  'policy',
  'shipping',
  'invoice',
  'paris',
  'river',
  'office',
  'hangar',
  'zeppelin',
  'alpha',
  'beta',
  'gamma',
  'delta',
  'epsilon',
  'order',
  'days',
];
function texts(seed: number, count: number): string[] {
  let state = seed;
  const next = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
  return Array.from({ length: count }, () =>
    Array.from({ length: 6 }, () => VOCABULARY[Math.floor(next() * VOCABULARY.length)]).join(' '),
  );
}
const files = (seed: number, perFile: number[]): SeedFile[] =>
  perFile.map((count, i) => ({
    filename: `f${seed}-${i}.txt`,
    chunks: texts(seed * 100 + i, count),
    attributes: { part: i },
  }));

const QUERIES = [
  'refund policy days',
  'paris river office',
  'zeppelin hangar',
  'alpha beta gamma',
  'invoice order shipping',
  'epsilon',
];

describe.each([
  ['embedded', false],
  ['libSQL server', true],
])('vector indexes on the %s', (_, server) => {
  let sqld: RunningSqld | undefined;
  let gateway: TestGateway;
  let tenant: Tenant;
  let large: SeededStore;
  let twin: SeededStore;
  let small: SeededStore;
  let third: SeededStore;

  beforeAll(async () => {
    sqld = server ? await startSqld() : undefined;
    gateway = await createTestGateway({
      env: {
        GATEWAY_VECTOR_INDEX_MIN_CHUNKS: String(THRESHOLD),
        GATEWAY_VECTOR_INDEX_MAX_STORES: '2',
        ...(sqld ? { LIBSQL_URL: sqld.url, GATEWAY_ENCRYPTION_KEY: randomBytes(32).toString('base64') } : {}),
      },
      deps: { fetch: upstream.fetch },
    });
    tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
    large = await seedStore(gateway, tenant, files(1, [30, 30, 5]));
    // The same texts in a store of another workspace: never found from the first.
    const other = await gateway.tenant();
    await gateway.virtualKey(other, { base_url: 'http://fake.test/v1', default: true });
    twin = await seedStore(gateway, other, files(1, [30, 30, 5]));
    small = await seedStore(gateway, tenant, files(2, [THRESHOLD - 1]));
  }, 60_000);
  afterAll(async () => {
    await gateway?.close();
    await sqld?.stop();
  });

  const db = () => gateway.database.db;
  const stores = async (id: string, workspaceId = tenant.workspace.id) => findStores(db(), workspaceId, [id]);
  const search = (
    found: SearchableStore[],
    query: string,
    filter: Parameters<typeof searchStores>[4]['filter'] = null,
  ) =>
    searchStores(
      gateway.deps,
      embeddingKey,
      { workspaceId: defined(found[0]).workspaceId, apiKeyId: tenant.workspaceKeyId },
      found,
      { queries: [query], maxResults: 10, scoreThreshold: 0, filter },
    );
  /** The results of the exact scan, whatever the store's index. */
  const exact = async (id: string, query: string, filter: Parameters<typeof searchStores>[4]['filter'] = null) =>
    search(
      (await stores(id)).map((store) => ({ ...store, indexed: false })),
      query,
      filter,
    );
  const indexRow = (id: string) =>
    db().all<{ backfilled_to: number; backfill_until: number; ready_at: number | null }>(
      sql`SELECT * FROM vector_store_indexes WHERE vector_store_id = ${id}`,
    );
  const schemaObjects = (id: string) =>
    db().all<{ name: string }>(
      sql`SELECT name FROM sqlite_master WHERE name LIKE ${`${indexNames(id).table}%`} ORDER BY name`,
    );
  const indexedChunks = (id: string) =>
    db().all<{ id: number; store: string }>(
      sql`SELECT a.id AS id, c.vector_store_id AS store FROM ${sql.raw(indexNames(id).table)} a LEFT JOIN vector_store_chunks c ON c.id = a.id ORDER BY a.id`,
    );
  const chunkIds = (id: string) =>
    db()
      .select({ id: vectorStoreChunks.id })
      .from(vectorStoreChunks)
      .where(eq(vectorStoreChunks.vectorStoreId, id))
      .orderBy(vectorStoreChunks.id);

  it('creates an index for stores past the threshold only, and searches exactly while it is back-filled', async () => {
    const before = await Promise.all(QUERIES.map((query) => exact(large.id, query)));
    expect(await maintainVectorIndexes(gateway.deps, { budgetMs: 60_000, batchSize: 16, maxBatches: 1 })).toBe(true);
    const names = indexNames(large.id);
    expect((await schemaObjects(large.id)).map((row) => row.name)).toEqual(
      expect.arrayContaining([names.table, names.index, names.onInsert, names.onDelete]),
    );
    expect(await schemaObjects(small.id)).toEqual([]);
    const [row] = await indexRow(large.id);
    expect(row).toMatchObject({ ready_at: null });
    expect(defined(row).backfilled_to).toBeLessThan(defined(row).backfill_until);
    // Not ready: searched exactly, with the same results.
    expect(defined((await stores(large.id))[0]).indexed).toBe(false);
    for (const [i, query] of QUERIES.entries()) expect(await search(await stores(large.id), query)).toEqual(before[i]);
  });

  it('copies chunks added during the back-fill, finishes, and then answers as the exact scan does', async () => {
    const added = await seedStoreFile(large.id, ['zeppelin hangar refund', 'omega psi chi']);
    while (await maintainVectorIndexes(gateway.deps, { budgetMs: 60_000, batchSize: 16 }));
    expect(defined((await indexRow(large.id))[0]).ready_at).not.toBeNull();
    expect((await indexedChunks(large.id)).map((row) => row.id)).toEqual(
      (await chunkIds(large.id)).map((row) => row.id),
    );
    expect(added.length).toBe(2);
    const [found] = await stores(large.id);
    expect(defined(found).indexed).toBe(true);
    for (const query of [...QUERIES, 'omega psi']) {
      const viaIndex = await search([defined(found)], query);
      const scanned = await exact(large.id, query);
      expect(viaIndex.length).toBeGreaterThan(0);
      expect(viaIndex.map((hit) => hit.chunkId)).toEqual(scanned.map((hit) => hit.chunkId));
      expect(viaIndex.map((hit) => hit.score)).toEqual(scanned.map((hit) => hit.score));
    }
  });

  it('keeps each index to its store: the other workspace’s identical chunks are neither indexed nor found', async () => {
    expect(defined((await indexRow(twin.id))[0]).ready_at).not.toBeNull();
    expect(new Set((await indexedChunks(large.id)).map((row) => row.store))).toEqual(new Set([large.id]));
    expect(new Set((await indexedChunks(twin.id)).map((row) => row.store))).toEqual(new Set([twin.id]));
    for (const query of QUERIES) {
      const results = await search(await stores(large.id), query);
      expect(results.every((hit) => hit.vectorStoreId === large.id)).toBe(true);
    }
  });

  it('falls back to the exact scan when a filter leaves too few of the index’s neighbours', async () => {
    // The third file has 5 chunks: fewer than the 20 the vector list asks for.
    const filter = { type: 'eq' as const, key: 'part', value: 2 };
    const viaIndex = await search(await stores(large.id), 'refund policy days', filter);
    expect(viaIndex.length).toBeGreaterThan(0);
    expect(viaIndex.every((hit) => hit.fileId === large.fileIds[2])).toBe(true);
    expect(viaIndex).toEqual(await exact(large.id, 'refund policy days', filter));
  });

  it('deletes deleted chunks from the index, and indexes no more stores than the limit', async () => {
    const [victim] = await chunkIds(large.id);
    await db()
      .delete(vectorStoreChunks)
      .where(eq(vectorStoreChunks.id, defined(victim).id));
    expect((await indexedChunks(large.id)).map((row) => row.id)).not.toContain(defined(victim).id);
    third = await seedStore(gateway, tenant, files(3, [THRESHOLD]));
    await maintainVectorIndexes(gateway.deps, { budgetMs: 60_000 });
    // Two indexes already: the third store stays exact.
    expect(await indexRow(third.id)).toEqual([]);
    expect(defined((await stores(third.id))[0]).indexed).toBe(false);
  });

  it('drops a deleted store’s index (table, vector index, triggers), and then indexes the next store', async () => {
    const indexed = (await indexedChunks(large.id)).length;
    expect(indexed).toBeGreaterThan(0);
    await deleteVectorStore(db(), tenant.workspace.id, large.id);
    // The store's chunks are gone, but not copied out of its index one by one: the table is dropped whole.
    expect(await chunkIds(large.id)).toEqual([]);
    expect((await indexedChunks(large.id)).length).toBe(indexed);
    await maintainVectorIndexes(gateway.deps, { budgetMs: 60_000 });
    expect(await schemaObjects(large.id)).toEqual([]);
    expect(await indexRow(large.id)).toEqual([]);
    const triggers = await db().all<{ name: string }>(
      sql`SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'vector_store_ann_%'`,
    );
    expect(triggers.map((row) => row.name).sort()).toEqual(
      [
        indexNames(twin.id).onInsert,
        indexNames(twin.id).onDelete,
        indexNames(third.id).onInsert,
        indexNames(third.id).onDelete,
      ].sort(),
    );
    expect(defined((await indexRow(third.id))[0]).ready_at).not.toBeNull();
    // The other stores' chunks are still written and searched.
    await seedStoreFile(twin.id, ['after the deletion']);
    expect((await indexedChunks(twin.id)).length).toBe((await chunkIds(twin.id)).length);
  });

  /** Adds a completed file's chunks to a store, as ingestion writes them (through the seeding helper's rows). */
  async function seedStoreFile(storeId: string, chunks: string[]) {
    const [store] = await db().select().from(vectorStores).where(eq(vectorStores.id, storeId));
    const donor = await seedStore(gateway, tenant, [{ filename: 'added.txt', chunks }]);
    const moved = await db()
      .select({ id: vectorStoreChunks.id })
      .from(vectorStoreChunks)
      .where(eq(vectorStoreChunks.vectorStoreId, donor.id));
    // The donor store's rows, re-inserted into this store as new chunks (new ids, so the insert trigger copies them).
    await db()
      .run(sql`INSERT INTO vector_store_files (vector_store_id, file_id, workspace_id, status, usage_bytes, chunking_strategy, attributes, created_at)
      SELECT ${storeId}, file_id, ${defined(store).workspaceId}, status, usage_bytes, chunking_strategy, attributes, created_at FROM vector_store_files WHERE vector_store_id = ${donor.id}`);
    await db().run(sql`INSERT INTO vector_store_chunks (vector_store_id, file_id, chunk_index, text, tokens, embedding)
      SELECT ${storeId}, file_id, chunk_index, text, tokens, embedding FROM vector_store_chunks WHERE vector_store_id = ${donor.id} ORDER BY id`);
    await deleteVectorStore(db(), tenant.workspace.id, donor.id);
    return moved;
  }
});

describe('keyword search over common words', () => {
  let gateway: TestGateway;
  let tenant: Tenant;
  let store: SeededStore;

  beforeAll(async () => {
    gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
    tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
    const filler = Array.from({ length: COMMON_WORD_CHUNKS }, (_, i) => `common filler number ${i}`);
    store = await seedStore(gateway, tenant, [{ filename: 'many.txt', chunks: [...filler, 'common needle'] }]);
  }, 60_000);
  afterAll(() => gateway?.close());

  const top = async (query: string) => {
    const found = await findStores(gateway.database.db, tenant.workspace.id, [store.id]);
    const [first] = await searchStores(
      gateway.deps,
      embeddingKey,
      { workspaceId: tenant.workspace.id, apiKeyId: tenant.workspaceKeyId },
      found,
      {
        queries: [query],
        maxResults: 5,
        scoreThreshold: 0,
        filter: null,
      },
    );
    return defined(first);
  };

  it('leaves out of bm25 a word in COMMON_WORD_CHUNKS chunks of the store, and keeps a rare one', async () => {
    // `needle` is in one chunk: first by meaning and by keywords.
    expect(await top('needle')).toMatchObject({ text: 'common needle', score: 1 });
    // `common` is in every chunk: no keyword list, so the best chunk is first in one list of two.
    expect((await top('common')).score).toBe(0.5);
    // With the rare word beside it, the keyword list has the rare word only.
    expect(await top('common needle')).toMatchObject({ text: 'common needle', score: 1 });
  });
});
