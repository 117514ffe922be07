import { ApiError } from '../../../errors';
import { UpstreamError } from '../../../providers/types';
import { findStores, searchStores, type SearchableStore, type SearchResult } from '../../../retrieval/search';
import { getThread } from '../../threads/queries';
import { embeddingKey } from '../../virtual-keys/embedding-key';
import type { RunRow } from '../../../db/schema';
import {
  FILE_SEARCH_FUNCTION,
  searchedArguments,
  searchOutput,
  searchQueries,
  storeIdsOf,
  type CitationSource,
  type SearchSettings,
} from './file-search';
import type { RunDeps } from './run-deps';
import type { StreamingToolCall } from './turn-answer';

/**
 * The file searches a run's model asks for (its file_search tool), answered by the gateway: each
 * call's queries searched in the run's stores (its own tool resources' and its thread's, read at
 * its first search), the results numbered after the run's earlier ones.
 */
export class FileSearches {
  readonly #deps: RunDeps;
  readonly #run: RunRow;
  readonly #settings: SearchSettings;
  readonly #signal: AbortSignal;
  #stores: SearchableStore[] | null = null;

  constructor(deps: RunDeps, run: RunRow, settings: SearchSettings, signal: AbortSignal) {
    this.#deps = deps;
    this.#run = run;
    this.#settings = settings;
    this.#signal = signal;
  }

  /** Runs the searches of `calls` (the file_search ones), adding their results to `sources`. */
  async answer(calls: StreamingToolCall[], sources: CitationSource[]): Promise<void> {
    const settings = this.#settings;
    let position = 0;
    for (const call of calls) {
      const hosted = call.hosted;
      if (hosted?.kind !== 'file_search') continue;
      const queries = searchQueries(hosted.queries, position++);
      const found =
        'problem' in queries
          ? { output: queries.problem, results: [] }
          : searchOutput(await this.#search(queries), sources.length);
      sources.push(...found.results.map((result) => ({ fileId: result.file_id })));
      hosted.done = {
        id: call.id,
        type: 'file_search',
        file_search: { ranking_options: settings.rankingOptions, results: found.results },
        function: { name: FILE_SEARCH_FUNCTION, arguments: searchedArguments(queries), output: found.output },
      };
    }
  }

  /** The run's stores searched for `queries`. */
  async #search(queries: string[]): Promise<SearchResult[]> {
    const { db } = this.#deps;
    const run = this.#run;
    const settings = this.#settings;
    try {
      if (this.#stores === null) {
        const thread = await getThread(db, run.workspaceId, run.threadId);
        this.#stores = await findStores(db, run.workspaceId, storeIdsOf(run.toolResources, thread.toolResources));
      }
      const options = {
        queries,
        maxResults: settings.maxResults,
        scoreThreshold: settings.rankingOptions.score_threshold,
        filter: null,
      };
      return await searchStores(
        this.#deps,
        embeddingKey,
        { workspaceId: run.workspaceId, apiKeyId: run.apiKeyId },
        this.#stores,
        options,
        this.#signal,
      );
    } catch (error) {
      // The embeddings provider failing, or the workspace's policies refusing its tokens, fail the run saying so.
      if (error instanceof UpstreamError)
        throw new UpstreamError(error.kind, `file_search could not embed the query: ${error.message}`, error.status);
      if (error instanceof ApiError)
        throw new UpstreamError('http', `file_search could not search: ${error.message}`, error.status);
      throw error;
    }
  }
}
