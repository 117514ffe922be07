import type { Actor } from '../../actor';
import { ApiError } from '../../errors';
import { findStores, searchStores, type SearchDeps } from '../../retrieval/search';
import { embeddingKey } from '../virtual-keys/embedding-key';
import type { VectorStoreSearchBody } from './search-schemas';

/**
 * POST /v1/vector_stores/{id}/search: the store of the caller's workspace (404 otherwise),
 * searched as OpenAI's endpoint does, 10 results unless asked otherwise.
 */
export async function searchVectorStore(deps: SearchDeps, actor: Actor, storeId: string, body: VectorStoreSearchBody) {
  const [store] = await findStores(deps.db, actor.workspaceId, [storeId]);
  if (!store) throw new ApiError('vector_store_not_found', `No vector store found with id '${storeId}'.`);
  const queries = typeof body.query === 'string' ? [body.query] : body.query;
  const results = await searchStores(deps, embeddingKey, actor, [store], {
    queries,
    maxResults: body.max_num_results ?? 10,
    scoreThreshold: body.ranking_options?.score_threshold ?? 0,
    filter: body.filters ?? null,
  });
  return { queries, results };
}
