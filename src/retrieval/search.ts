import { and, eq, inArray, isNull, sql, type SQL } from 'drizzle-orm';
import type { Actor } from '../actor';
import type { Db } from '../db/client';
import type { Slices } from '../lib/slices';
import {
  files,
  vectorStoreChunks,
  vectorStoreFiles,
  vectorStoreIndexes,
  vectorStores,
  type FileAttributes,
} from '../db/schema';
import { UpstreamError } from '../providers/types';
import type { AttributeFilter, ComparisonFilter } from './filters';
import { embedTexts, vectorBlob, type EmbedDeps, type EmbeddingKeyOf } from './embed';
import { indexNames, SEARCH_L, storeIdPart } from './vector-index';

/**
 * Hybrid search over vector stores: each query is embedded with the store's own model, dimensions
 * and key (embed.ts), and looked up twice per store, by vector similarity (libSQL's
 * vector_distance_cos over the chunks' F32 blobs) and by keywords (FTS5, bm25); the ranked lists
 * are fused by reciprocal rank (RRF_K). Only chunks of files whose vector_store_files row is
 * `completed` are found, so a file being ingested, or one that failed, is never half-searchable;
 * attribute filters narrow those files in the same SQL.
 *
 * Scores are in [0, 1]: a chunk's fused score divided by the best one possible (first in every
 * list), so 1 means first by meaning and by keywords for every query. `score_threshold` drops
 * what scores below it.
 *
 * Cost, bounded whatever the store's size: the vector list of a store with a ready
 * approximate-nearest-neighbour index (vector-index.ts, stores past GATEWAY_VECTOR_INDEX_MIN_CHUNKS)
 * reads TOP_K neighbours from it (unless a filter leaves too few of them: see TOP_K); a smaller
 * store's is an exact scan of its chunks (below the threshold by definition: about 15 ms for 3,000
 * chunks of 512 dimensions on the embedded file of a busy machine).
 * The keyword list leaves out the query's words found in COMMON_WORD_CHUNKS chunks of the store or
 * more (each counted no further than that), so bm25 ranks at most that many chunks per remaining
 * word (the store's id is part of the MATCH, so other stores' chunks are not ranked). On the
 * embedded file each statement holds the event loop for its duration: `npm run bench:search`
 * measures it.
 */

/** The reciprocal-rank constant (Cormack et al.'s 60): rank r in a list adds 1 / (RRF_K + r). */
const RRF_K = 60;
/** Candidates each list contributes to the fusion. */
const MIN_CANDIDATES = 20;
const MAX_CANDIDATES = 100;
/** Distinct words of a query sent to FTS5 (each quoted): a long query does not become a huge MATCH. */
const MAX_KEYWORDS = 32;
/**
 * Neighbours read from a store's vector index per query: as many as its graph search keeps
 * (SEARCH_L), at least the longest list a search asks for (MAX_CANDIDATES). Of these, the chunks
 * of searchable files (completed, the filter's) are kept. When fewer than the list's length remain
 * (a filter that leaves few files, many files still ingesting), the store is scanned exactly
 * instead, as a small store is.
 */
const TOP_K = Math.max(SEARCH_L, MAX_CANDIDATES);
/**
 * A word found in this many chunks of a store says little about which chunk is meant, and ranking
 * every chunk it is in costs in proportion: the keyword list leaves it out (the vector list still
 * weighs it). A query whose words are all that common has no keyword list. At 1,000, bm25 and the
 * words' counts took half of a search's time at 100,000 chunks.
 */
export const COMMON_WORD_CHUNKS = 300;

/** What searching needs of a store. */
export interface SearchableStore {
  id: string;
  workspaceId: string;
  embeddingModel: string;
  /** Null until the store's first vector: such a store has no chunks, and nothing is embedded for it. */
  embeddingDimensions: number | null;
  virtualKeyId: string | null;
  /** The store has a ready vector index (vector-index.ts): its vector list is read from it. */
  indexed: boolean;
}

export interface SearchOptions {
  queries: string[];
  maxResults: number;
  scoreThreshold: number;
  filter: AttributeFilter | null;
}

export interface SearchResult {
  chunkId: number;
  vectorStoreId: string;
  fileId: string;
  filename: string;
  score: number;
  attributes: FileAttributes;
  text: string;
}

/** The live stores of `workspaceId` among `ids`, in the order of `ids` (another workspace's are not found). */
export async function findStores(db: Db, workspaceId: string, ids: readonly string[]): Promise<SearchableStore[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .select({
      id: vectorStores.id,
      workspaceId: vectorStores.workspaceId,
      embeddingModel: vectorStores.embeddingModel,
      embeddingDimensions: vectorStores.embeddingDimensions,
      virtualKeyId: vectorStores.virtualKeyId,
      indexed: sql<number>`${vectorStoreIndexes.readyAt} IS NOT NULL`,
    })
    .from(vectorStores)
    .leftJoin(vectorStoreIndexes, eq(vectorStoreIndexes.vectorStoreId, vectorStores.id))
    .where(
      and(
        inArray(vectorStores.id, [...ids]),
        eq(vectorStores.workspaceId, workspaceId),
        isNull(vectorStores.deletedAt),
      ),
    );
  return ids.flatMap((id) =>
    rows.filter((row) => row.id === id).map((row) => ({ ...row, indexed: Boolean(row.indexed) })),
  );
}

/** What searching needs: embedding, and the event loop's slices (on Node, one loop serves every tenant). */
export type SearchDeps = EmbedDeps & { slices: Slices };

/**
 * Searches `stores` (one workspace's) for `options.queries`: the best chunks, best first. Between
 * statements it lets the event loop turn once its slice is spent, so a search holds the loop for
 * one statement at most, not for all of them.
 */
export async function searchStores(
  deps: SearchDeps,
  /** The key each store's queries are embedded with (embed.ts). */
  keyOf: EmbeddingKeyOf,
  /** Who searches: the embedding calls are attributed to it in rate-limit policies. */
  actor: Pick<Actor, 'workspaceId' | 'apiKeyId'>,
  stores: readonly SearchableStore[],
  options: SearchOptions,
  signal?: AbortSignal,
): Promise<SearchResult[]> {
  const { db } = deps;
  const withChunks = stores.filter((store) => store.embeddingDimensions !== null);
  if (withChunks.length === 0 || options.queries.length === 0) return [];
  const candidates = Math.min(MAX_CANDIDATES, Math.max(MIN_CANDIDATES, options.maxResults * 2));

  const lists: Ranked[][] = [];
  for (const store of withChunks) {
    const { vectors } = await embedTexts(
      deps,
      keyOf,
      {
        workspaceId: actor.workspaceId,
        apiKeyId: actor.apiKeyId,
        virtualKeyId: store.virtualKeyId,
        model: store.embeddingModel,
        dimensions: store.embeddingDimensions,
      },
      options.queries,
      signal,
    );
    const searchable = searchableFiles(store.id, options.filter);
    for (const [index, query] of options.queries.entries()) {
      const vector = vectors[index];
      // Checked by the embeddings client (a vector per text): here for the types.
      if (vector === undefined)
        throw new UpstreamError('protocol', 'The embeddings upstream answered fewer vectors than queries.');
      while (deps.slices.spent()) await deps.slices.next();
      const nearest = store.indexed ? await byIndex(db, store.id, searchable, vector, candidates) : null;
      while (nearest === null && deps.slices.spent()) await deps.slices.next();
      lists.push(nearest ?? (await byVector(db, store.id, searchable, vector, candidates)));
      while (deps.slices.spent()) await deps.slices.next();
      const match = keywordMatch(store.id, await rareWords(db, store.id, keywords(query)));
      while (deps.slices.spent()) await deps.slices.next();
      lists.push(match === null ? [] : await byKeywords(db, store.id, searchable, match, candidates));
    }
  }
  const fused = fuse(mergeLists(lists, withChunks.length), options.queries.length * 2)
    .filter((hit) => hit.score >= options.scoreThreshold)
    .slice(0, options.maxResults);
  while (deps.slices.spent()) await deps.slices.next();
  return withDetails(db, fused);
}

/**
 * The lists of several stores, merged per query and kind by their own measure (cosine distance,
 * bm25: the stores share one FTS index, and its statistics), so that searching two stores weighs
 * each query as much as searching one.
 */
function mergeLists(lists: Ranked[][], storeCount: number): number[][] {
  const perStore = lists.length / storeCount;
  return Array.from({ length: perStore }, (_, slot) =>
    Array.from({ length: storeCount }, (_, store) => lists[store * perStore + slot] ?? [])
      .flat()
      .sort((a, b) => a.measure - b.measure)
      .map((hit) => hit.id),
  );
}

/** A chunk in a ranked list, with what ranked it (lower is better). */
interface Ranked {
  id: number;
  measure: number;
}

/** Reciprocal rank fusion of ranked chunk ids, each scored by its share of the best possible sum. */
export function fuse(lists: readonly (readonly number[])[], listCount: number): { chunkId: number; score: number }[] {
  const sums = new Map<number, number>();
  for (const list of lists) {
    list.forEach((chunkId, rank) => sums.set(chunkId, (sums.get(chunkId) ?? 0) + 1 / (RRF_K + rank + 1)));
  }
  const best = listCount / (RRF_K + 1);
  return [...sums.entries()]
    .map(([chunkId, sum]) => ({ chunkId, score: Math.min(1, sum / best) }))
    .sort((a, b) => b.score - a.score || a.chunkId - b.chunkId);
}

/** The files of the store whose chunks may be found: completed ones, narrowed by the filter. */
function searchableFiles(storeId: string, filter: AttributeFilter | null): SQL {
  return sql`SELECT file_id FROM vector_store_files
    WHERE vector_store_id = ${storeId} AND status = 'completed'${filter ? sql` AND (${filterSql(filter)})` : sql``}`;
}

/** The store's nearest chunks to `vector` (cosine), exact: every chunk of the store is compared. */
async function byVector(
  db: Db,
  storeId: string,
  searchable: SQL,
  vector: Float32Array,
  limit: number,
): Promise<Ranked[]> {
  const rows = await db.all<{ id: number; distance: number }>(sql`
    SELECT id, vector_distance_cos(embedding, ${vectorBlob(vector)}) AS distance
    FROM vector_store_chunks
    WHERE vector_store_id = ${storeId} AND file_id IN (${searchable})
    ORDER BY distance, id LIMIT ${limit}`);
  return near(rows);
}

/** A chunk at a right angle to the query, or further, shares nothing with it. */
const near = (rows: { id: number; distance: number }[]): Ranked[] =>
  rows.filter((row) => row.distance < 1).map((row) => ({ id: Number(row.id), measure: row.distance }));

/**
 * The store's nearest chunks by its vector index (TOP_K neighbours, then the searchable ones,
 * ranked by their exact distance); null when fewer than `limit` are searchable (see TOP_K).
 */
async function byIndex(
  db: Db,
  storeId: string,
  searchable: SQL,
  vector: Float32Array,
  limit: number,
): Promise<Ranked[] | null> {
  const query = vectorBlob(vector);
  const rows = await db.all<{ id: number; distance: number }>(sql`
    SELECT c.id AS id, vector_distance_cos(c.embedding, ${query}) AS distance
    FROM vector_top_k(${indexNames(storeId).index}, ${query}, ${TOP_K}) AS t CROSS JOIN vector_store_chunks AS c ON c.id = t.id
    WHERE c.vector_store_id = ${storeId} AND c.file_id IN (${searchable})
    ORDER BY distance, id LIMIT ${limit}`);
  return rows.length < limit ? null : near(rows);
}

/**
 * The store's chunks that contain the query's words, by bm25. FTS5 walks the index from the
 * MATCH (CROSS JOIN keeps SQLite from starting at the chunks table instead).
 */
async function byKeywords(db: Db, storeId: string, searchable: SQL, match: string, limit: number): Promise<Ranked[]> {
  const rows = await db.all<{ id: number; rank: number }>(sql`
    SELECT vector_store_chunks.id AS id, vector_store_chunks_fts.rank AS rank
    FROM vector_store_chunks_fts CROSS JOIN vector_store_chunks ON vector_store_chunks.id = vector_store_chunks_fts.rowid
    WHERE vector_store_chunks_fts MATCH ${match}
      AND vector_store_chunks.vector_store_id = ${storeId} AND vector_store_chunks.file_id IN (${searchable})
    ORDER BY vector_store_chunks_fts.rank LIMIT ${limit}`);
  return rows.map((row) => ({ id: Number(row.id), measure: row.rank }));
}

/**
 * The FTS5 query for `words` (keywords: a query's words) in store `storeId`: each quoted (so that
 * any text is a valid query and no word is an operator), any of them, in the store's column only. The id's
 * random part alone names the store: FTS5 splits `vs_…` at the underscore, and the `vs` every row
 * has would make the query read every store's rows. Null without words.
 */
export function keywordMatch(storeId: string, words: readonly string[]): string | null {
  const store = storeIdPart(storeId);
  if (words.length === 0) return null;
  return `vector_store_id : "${store}" AND (${words.map((word) => `"${word}"`).join(' OR ')})`;
}

/** A query's distinct words, lower-cased, at most MAX_KEYWORDS: what FTS5 is asked for. */
export function keywords(query: string): string[] {
  return [...new Set(query.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])].slice(0, MAX_KEYWORDS);
}

/**
 * The words found in fewer than COMMON_WORD_CHUNKS chunks of the store, in one statement: each
 * word's chunks are counted up to that many (FTS5 stops reading its list there), so a common
 * word costs no more than a rare one.
 */
async function rareWords(db: Db, storeId: string, words: string[]): Promise<string[]> {
  if (words.length === 0) return [];
  const counts = words.map(
    (word, i) => sql`SELECT ${i} AS word, count(*) AS chunks FROM (SELECT rowid FROM vector_store_chunks_fts
      WHERE vector_store_chunks_fts MATCH ${keywordMatch(storeId, [word])} LIMIT ${COMMON_WORD_CHUNKS})`,
  );
  const rows = await db.all<{ word: number; chunks: number }>(sql.join(counts, sql.raw(' UNION ALL ')));
  const common = new Set(rows.filter((row) => Number(row.chunks) >= COMMON_WORD_CHUNKS).map((row) => Number(row.word)));
  return words.filter((_, i) => !common.has(i));
}

/**
 * A filter as SQL over vector_store_files.attributes, every value a parameter. A comparison holds
 * when the attribute exists with a value of the filter's type (a number is not equal to its
 * string); `ne` and `nin` hold when `eq` and `in` do not, an absent attribute included.
 */
function filterSql(filter: AttributeFilter): SQL {
  if ('filters' in filter) {
    return sql`(${sql.join(
      filter.filters.map((inner) => sql`(${filterSql(inner)})`),
      sql.raw(filter.type === 'and' ? ' AND ' : ' OR '),
    )})`;
  }
  const values = Array.isArray(filter.value) ? filter.value : [filter.value];
  const anyOf = sql`(${sql.join(
    values.map((value) => sql`(${equal(value)})`),
    sql.raw(' OR '),
  )})`;
  switch (filter.type) {
    case 'eq':
    case 'in':
      return attribute(filter.key, anyOf);
    case 'ne':
    case 'nin':
      return sql`NOT ${attribute(filter.key, anyOf)}`;
    default: {
      // The schema allows one string or number here (comparisonFilterSchema).
      const [value] = values;
      if (values.length !== 1 || typeof value === 'boolean' || value === undefined)
        throw new Error('an ordered comparison takes one number or string');
      return attribute(filter.key, sql`${sameType(value)} AND a.value ${sql.raw(OPERATORS[filter.type])} ${value}`);
    }
  }
}

const OPERATORS = { gt: '>', gte: '>=', lt: '<', lte: '<=' } as const satisfies Partial<
  Record<ComparisonFilter['type'], string>
>;

const attribute = (key: string, condition: SQL) =>
  sql`EXISTS (SELECT 1 FROM json_each(vector_store_files.attributes) AS a WHERE a.key = ${key} AND ${condition})`;

/** The attribute is of the value's JSON type. */
function sameType(value: string | number | boolean): SQL {
  if (typeof value === 'boolean') return sql.raw(`a.type = '${value ? 'true' : 'false'}'`);
  return sql.raw(typeof value === 'number' ? `a.type IN ('integer', 'real')` : `a.type = 'text'`);
}

function equal(value: string | number | boolean): SQL {
  return typeof value === 'boolean' ? sameType(value) : sql`${sameType(value)} AND a.value = ${value}`;
}

/** The fused hits with their text, file name and attributes, in the fused order. */
async function withDetails(db: Db, hits: { chunkId: number; score: number }[]): Promise<SearchResult[]> {
  if (hits.length === 0) return [];
  const rows = await db
    .select({
      chunkId: vectorStoreChunks.id,
      vectorStoreId: vectorStoreChunks.vectorStoreId,
      fileId: vectorStoreChunks.fileId,
      text: vectorStoreChunks.text,
      attributes: vectorStoreFiles.attributes,
      filename: files.filename,
    })
    .from(vectorStoreChunks)
    .innerJoin(
      vectorStoreFiles,
      and(
        eq(vectorStoreFiles.vectorStoreId, vectorStoreChunks.vectorStoreId),
        eq(vectorStoreFiles.fileId, vectorStoreChunks.fileId),
      ),
    )
    .leftJoin(files, eq(files.id, vectorStoreChunks.fileId))
    .where(
      inArray(
        vectorStoreChunks.id,
        hits.map((hit) => hit.chunkId),
      ),
    );
  const byId = new Map(rows.map((row) => [row.chunkId, row]));
  return hits.flatMap((hit) => {
    const row = byId.get(hit.chunkId);
    // A chunk deleted between the lists and this read is left out.
    return row ? [{ ...row, filename: row.filename ?? '', score: hit.score }] : [];
  });
}
