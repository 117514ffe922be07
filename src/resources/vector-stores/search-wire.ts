import type { SearchResult } from '../../retrieval/search';
import type { VectorStoreSearchResultsPage } from './objects';

/** OpenAI's VectorStoreSearchResultsPage: one item per chunk found, best first, in one page. */
export function toSearchResultsPage(queries: string[], results: SearchResult[]): VectorStoreSearchResultsPage {
  return {
    object: 'vector_store.search_results.page' as const,
    search_query: queries,
    data: results.map((result) => ({
      file_id: result.fileId,
      filename: result.filename,
      score: result.score,
      attributes: result.attributes,
      content: [{ type: 'text' as const, text: result.text }],
    })),
    has_more: false,
    next_page: null,
  };
}
