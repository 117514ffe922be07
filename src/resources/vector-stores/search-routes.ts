import { Hono } from 'hono';
import { validate } from '../../http/middleware/validate';
import { workspace } from '../identities/middleware/workspace';
import { searchVectorStore } from './search';
import { vectorStoreSearchBody } from './search-schemas';
import { toSearchResultsPage } from './search-wire';
import type { ApiEnv } from '../identities/env';
import { responds } from '../../http/middleware/responds';
import { vectorStoreSearchResultsPage } from './objects';

/**
 * POST /v1/vector_stores/{vector_store_id}/search, in the workspace of workspace(). The query is
 * searched as sent: `rewrite_query` is accepted and rewrites nothing, and `ranking_options.ranker`
 * is accepted and changes nothing (README, "File search").
 */
export const vectorStoreSearchRoutes = new Hono<ApiEnv>()
  // workspace() on the route alone: other routes under /v1/vector_stores have their own.
  .post(
    '/:vector_store_id/search',
    responds({ summary: 'Search a vector store', ok: vectorStoreSearchResultsPage, errors: [429] }),
    workspace(),
    validate('json', vectorStoreSearchBody),
    async (c) => {
      const { queries, results } = await searchVectorStore(
        c.get('deps'),
        c.get('actor'),
        c.req.param('vector_store_id'),
        c.req.valid('json'),
      );
      return c.json(toSearchResultsPage(queries, results));
    },
  );
