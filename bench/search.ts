import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { vectorStoreChunks, vectorStoreFiles, vectorStores, organisations } from '../src/db/schema';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { newId, newUuid } from '../src/lib/ids';
import { createLogger } from '../src/logger';
import { nodeConfig } from '../src/runtime/node/config';
import { createNodeDeps } from '../src/runtime/node/deps';
import { vectorBlob } from '../src/retrieval/embed';
import { embeddingKey } from '../src/resources/virtual-keys/embedding-key';
import { findStores, searchStores } from '../src/retrieval/search';
import { maintainVectorIndexes } from '../src/retrieval/vector-index';
import { createApiKey } from '../src/resources/identities/api-keys';
import { createVirtualKey } from '../src/resources/virtual-keys/commands';
import { createWorkspace } from '../src/resources/identities/workspaces';
import { createFakeUpstream, fakeEmbedding } from '../test/support/fake-upstream';
import { cycle, measure, required, round, summarise } from './support';

/**
 * `npm run bench:search`: the latency of a hybrid search (retrieval/search.ts: the query embedded,
 * the store's vector list and keyword list, fused) on the embedded libSQL file, with one store of
 * 10,000 then 100,000 chunks, then with 100 other stores of BENCH_OTHER_CHUNKS chunks each beside
 * it. Chunks are BENCH_WORDS words drawn from a Zipf-like vocabulary (so that queries hit common
 * words as real ones do), embedded by the fake provider's bag-of-words vectors of
 * GATEWAY_EMBEDDINGS_DIMENSIONS (512). The fake answers in this process (its /v1/embeddings is a
 * function call, not a network hop), so the figures are the gateway's: admission, the SQL, fusion.
 * Each statement of a search holds the event loop (the embedded client reads synchronously on
 * it): `stall` is the longest the event loop went without a turn during each search (a ticker's
 * largest gap), what another tenant's request waits at worst.
 *
 * After each fill, the stores past GATEWAY_VECTOR_INDEX_MIN_CHUNKS (5,000) get their vector index
 * (retrieval/vector-index.ts), back-filled here back to back (the gateway spreads it out):
 * `index_build_s`. BENCH_INDEX=0 leaves them exact, to compare.
 */

const DIMENSIONS = Number(process.env.BENCH_DIMENSIONS ?? 512);
const WORDS = Number(process.env.BENCH_WORDS ?? 120);
const SIZES = (process.env.BENCH_SIZES ?? '10000,100000').split(',').map(Number);
const OTHER_STORES = Number(process.env.BENCH_OTHER_STORES ?? 100);
const OTHER_CHUNKS = Number(process.env.BENCH_OTHER_CHUNKS ?? 1000);
const QUERIES = Number(process.env.BENCH_QUERIES ?? 200);
const VOCABULARY = 20_000;
const INDEX = process.env.BENCH_INDEX !== '0';

const upstream = createFakeUpstream();
const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-search-'));
const config = nodeConfig({
  DATA_DIR: dataDir,
  LOG_LEVEL: 'warn',
  GATEWAY_EMBEDDINGS_DIMENSIONS: String(DIMENSIONS),
  ...(INDEX ? {} : { GATEWAY_VECTOR_INDEX_MIN_CHUNKS: String(Number.MAX_SAFE_INTEGER) }),
});
const database = await openDatabase(config);
await migrateDatabase(database.db);
const deps = await createNodeDeps(config, database, { log: createLogger('warn'), fetch: upstream.fetch });
const { db } = database;

const organisationId = newUuid();
const now = Date.now();
await db.insert(organisations).values({ id: organisationId, name: 'bench', createdAt: now });
const workspace = await createWorkspace(db, { organisationId, slug: 'bench', now });
const apiKey = await createApiKey(db, {
  kind: 'workspace',
  organisationId,
  workspaceId: workspace.id,
  name: 'bench',
  now,
});
const key = await createVirtualKey(db, deps.secrets, {
  workspaceId: workspace.id,
  body: {
    slug: 'fake',
    provider: 'openai',
    api_key: 'sk-fake',
    base_url: 'http://fake.bench/v1',
    default: true,
    models: [],
  },
  upstreamRules: { allowPrivate: true },
  maxKeys: 10,
  now,
});
const searcher = { workspaceId: workspace.id, apiKeyId: apiKey.record.id };

/** A deterministic pseudo-random stream (mulberry32), so that every run measures the same data. */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const next = random(42);
/** Word i of the vocabulary drawn with probability ∝ 1/(i+1): a few very common words, a long tail. */
const harmonic = Math.log(VOCABULARY) + 0.5772;
const word = () => `w${Math.min(VOCABULARY - 1, Math.floor(Math.exp(next() * harmonic)) - 1)}`;
const text = (words: number) => Array.from({ length: words }, word).join(' ');

async function newStore(): Promise<string> {
  const id = newId('vs');
  await db.insert(vectorStores).values({
    id,
    workspaceId: workspace.id,
    metadata: {},
    createdAt: now,
    lastActiveAt: now,
    embeddingModel: 'text-embedding-3-small',
    embeddingDimensions: DIMENSIONS,
    virtualKeyId: key.id,
  });
  return id;
}

/** Adds `count` chunks to the store, in files of 100 chunks, every file completed. */
async function fill(storeId: string, count: number): Promise<void> {
  for (let done = 0; done < count; done += 100) {
    const fileId = newId('file');
    await db.insert(vectorStoreFiles).values({
      vectorStoreId: storeId,
      fileId,
      workspaceId: workspace.id,
      status: 'completed',
      chunkingStrategy: { type: 'static', static: { max_chunk_size_tokens: 800, chunk_overlap_tokens: 400 } },
      attributes: {},
      createdAt: now,
    });
    const rows = Array.from({ length: Math.min(100, count - done) }, (_, chunkIndex) => {
      const body = text(WORDS);
      return {
        vectorStoreId: storeId,
        fileId,
        chunkIndex,
        text: body,
        tokens: WORDS,
        embedding: vectorBlob(Float32Array.from(fakeEmbedding(body, DIMENSIONS))),
      };
    });
    await db.insert(vectorStoreChunks).values(rows);
  }
}

const queries = Array.from({ length: QUERIES }, () => text(8));

/** Builds the due indexes, back-filling back to back: seconds taken, and the indexes ready. */
async function buildIndexes() {
  const started = performance.now();
  while (await maintainVectorIndexes(deps, { budgetMs: 5000 }));
  const ready = await db.all(sql`SELECT 1 FROM vector_store_indexes WHERE ready_at IS NOT NULL`);
  return { index_build_s: round((performance.now() - started) / 1000, 1), indexes: ready.length };
}

/** The largest gap between turns of a ticker on the event loop while `fn` runs. */
async function stallOf(fn: () => Promise<unknown>): Promise<number> {
  let last = performance.now();
  let worst = 0;
  let ticking = true;
  const tick = () => {
    const now = performance.now();
    worst = Math.max(worst, now - last);
    last = now;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  await fn();
  ticking = false;
  tick();
  return worst;
}

async function searchLatency(storeId: string) {
  const stores = await findStores(db, workspace.id, [storeId]);
  let found = 0;
  const stalls: number[] = [];
  const latency = await measure(
    async (i) => {
      const query = cycle(queries, i);
      stalls.push(
        await stallOf(async () => {
          const results = await searchStores(deps, embeddingKey, searcher, stores, {
            queries: [query],
            maxResults: 20,
            scoreThreshold: 0,
            filter: null,
          });
          found += results.length;
        }),
      );
    },
    QUERIES,
    20,
  );
  const stall = summarise(stalls.slice(20));
  return {
    indexed: required(stores[0], 'the store searched').indexed,
    ...latency,
    mean_results: round(found / (QUERIES + 20), 1),
    stall_p50_ms: stall.p50_ms,
    stall_p99_ms: stall.p99_ms,
  };
}

const results: Record<string, unknown>[] = [];
const main = await newStore();
let size = 0;
for (const target of SIZES) {
  const started = performance.now();
  await fill(main, target - size);
  size = target;
  const fill_s = round((performance.now() - started) / 1000, 1);
  results.push({
    phase: `one store of ${target} chunks`,
    fill_s,
    ...(await buildIndexes()),
    ...(await searchLatency(main)),
  });
}
const started = performance.now();
const others: string[] = [];
for (let i = 0; i < OTHER_STORES; i++) {
  const other = await newStore();
  others.push(other);
  await fill(other, OTHER_CHUNKS);
}
const fillOthers = round((performance.now() - started) / 1000, 1);
results.push({
  phase: `the store of ${size} chunks, ${OTHER_STORES} other stores of ${OTHER_CHUNKS} beside it`,
  fill_s: fillOthers,
  ...(await buildIndexes()),
  ...(await searchLatency(main)),
});
if (others[0] !== undefined)
  results.push({ phase: `a store of ${OTHER_CHUNKS} chunks among them`, ...(await searchLatency(others[0])) });

console.log(
  JSON.stringify(
    {
      benchmark: 'search',
      dimensions: DIMENSIONS,
      words_per_chunk: WORDS,
      queries: QUERIES,
      vector_index: INDEX,
      goal: 'p99 under 20 ms at 100,000 chunks, flat in the size of other stores',
      load_average: loadavg().map((value) => round(value, 2)),
      results,
    },
    null,
    2,
  ),
);
database.close();
rmSync(dataDir, { recursive: true, force: true });
