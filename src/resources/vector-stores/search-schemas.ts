import * as z from 'zod';
import { attributeFilterSchema } from '../../retrieval/filters';

/**
 * POST /v1/vector_stores/{id}/search (OpenAI's VectorStoreSearchRequest), with the attribute filters
 * of retrieval/filters.ts.
 */

export const SEARCH_LIMITS = { queries: 10, queryChars: 4_096, maxResults: 50 } as const;

export const searchRankingOptions = z.strictObject({
  ranker: z.enum(['none', 'auto', 'default-2024-11-15']).optional(),
  score_threshold: z.number().min(0).max(1).optional(),
});

export const vectorStoreSearchBody = z.strictObject({
  query: z.union([
    z.string().min(1).max(SEARCH_LIMITS.queryChars),
    z.array(z.string().min(1).max(SEARCH_LIMITS.queryChars)).min(1).max(SEARCH_LIMITS.queries),
  ]),
  rewrite_query: z.boolean().optional(),
  max_num_results: z.int().min(1).max(SEARCH_LIMITS.maxResults).optional(),
  filters: attributeFilterSchema.optional(),
  ranking_options: searchRankingOptions.optional(),
});
export type VectorStoreSearchBody = z.infer<typeof vectorStoreSearchBody>;
