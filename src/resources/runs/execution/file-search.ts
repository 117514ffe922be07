import type { ChatCompletionRequest } from '../../../providers/types';
import type { SearchResult } from '../../../retrieval/search';
import type { FileSearchResult, FileSearchToolCall, StepDetails, Tool, ToolResources } from '../../../db/json-columns';
import { MAX_QUERIES, SearchArguments } from './search-arguments';

/**
 * The file_search tool over Chat Completions: the model is given a function, FILE_SEARCH_FUNCTION,
 * and when it calls it the gateway searches the run's vector stores itself (retrieval/search.ts)
 * and answers the call with the results, each under a numbered marker (`【3†policies.md】`) the
 * model is asked to cite; markers in the answer become `file_citation` annotations. Pure pieces
 * here; file-search-round.ts runs the search and turn-answer.ts records the step.
 *
 * Numbers count the run's results in order (its steps, their calls, their results), so that
 * every turn of a run agrees on what a number names.
 */

export const FILE_SEARCH_FUNCTION = 'file_search';

/** Searches one round may run: calls past them are told so, not searched (a model may make 128 calls at once). */
export const MAX_SEARCHES_PER_ROUND = 8;

/** OpenAI's default number of results for its gpt-4 models. */
export const DEFAULT_MAX_RESULTS = 20;

/** Characters of result text one search gives the model (and keeps in its step): results past it are left out. */
export const MAX_RESULT_CHARS = 32_000;

const TOOL_DESCRIPTION =
  "Searches the files available to you (the user's documents) and returns the passages that best match. " +
  'Use it whenever the answer may be in those files. Cite each passage you use with its marker, copied exactly, e.g. 【0†report.pdf】.';

/** The chat tool the model is given for file_search. */
export const FILE_SEARCH_CHAT_TOOL: NonNullable<ChatCompletionRequest['tools']>[number] = {
  type: 'function',
  function: {
    name: FILE_SEARCH_FUNCTION,
    description: TOOL_DESCRIPTION,
    parameters: {
      type: 'object',
      properties: {
        queries: {
          type: 'array',
          items: { type: 'string' },
          minItems: 1,
          maxItems: MAX_QUERIES,
          description: 'One or more search queries: full questions or keywords.',
        },
      },
      required: ['queries'],
    },
  },
};

/** How a run searches: its file_search tool's settings, or null when it has no such tool. */
export interface SearchSettings {
  maxResults: number;
  rankingOptions: FileSearchToolCall['file_search']['ranking_options'];
}

export function searchSettings(tools: readonly Tool[]): SearchSettings | null {
  const tool = tools.find((one) => one.type === 'file_search');
  if (!tool) return null;
  const options = tool.file_search;
  return {
    maxResults: options?.max_num_results ?? DEFAULT_MAX_RESULTS,
    rankingOptions: {
      ranker: options?.ranking_options?.ranker ?? 'auto',
      score_threshold: options?.ranking_options?.score_threshold ?? 0,
    },
  };
}

/** The stores a run searches: its own tool resources' (the request's or the assistant's), then its thread's. */
export function storeIdsOf(runResources: ToolResources | null, threadResources: ToolResources | null): string[] {
  const ids = [
    ...(runResources?.file_search?.vector_store_ids ?? []),
    ...(threadResources?.file_search?.vector_store_ids ?? []),
  ];
  return [...new Set(ids)];
}

/**
 * The queries of a call's arguments, `{"queries": [...]}` (or `{"query": "..."}`, which models
 * also write), bounded; a message for the model when there are none. `args` is the whole
 * arguments, or their reader (SearchArguments) fed as they streamed.
 */
export function searchQueries(args: string | SearchArguments, position: number): string[] | { problem: string } {
  if (position >= MAX_SEARCHES_PER_ROUND) {
    return {
      problem: `Not searched: at most ${MAX_SEARCHES_PER_ROUND} searches at once. Search again with fewer calls if needed.`,
    };
  }
  if (args instanceof SearchArguments) return args.queries();
  const reader = new SearchArguments();
  reader.push(args);
  return reader.queries();
}

/**
 * The call's arguments as its step keeps them and later rounds send them back: the queries that
 * were searched (none when there was a problem), bounded as searchQueries bounds them, rather than
 * what the model sent, which may be megabytes a call and would be sent again with every round.
 */
export function searchedArguments(queries: string[] | { problem: string }): string {
  return JSON.stringify({ queries: Array.isArray(queries) ? queries : [] });
}

/**
 * What the model is given for a search (numbered from `first`) and the results its step keeps:
 * as many as fit MAX_RESULT_CHARS, in order (the first one cut to fit if it alone does not).
 */
export function searchOutput(
  results: readonly SearchResult[],
  first: number,
): { output: string; results: FileSearchResult[] } {
  if (results.length === 0) return { output: 'The file search found nothing for this query.', results: [] };
  const kept: FileSearchResult[] = [];
  const parts: string[] = [];
  let room = MAX_RESULT_CHARS;
  for (const result of results) {
    const marker = citationMarker(first + kept.length, result.filename);
    const text = kept.length === 0 ? result.text.slice(0, room) : result.text;
    const part = `${marker}\n${text}`;
    if (kept.length > 0 && part.length > room) break;
    room -= part.length;
    parts.push(part);
    kept.push({
      file_id: result.fileId,
      file_name: result.filename,
      score: result.score,
      content: [{ type: 'text', text }],
    });
  }
  const intro = 'File search results. Cite what you use with its marker, copied exactly.';
  return { output: [intro, ...parts].join('\n\n'), results: kept };
}

/** A result's marker: its number and its file's name (without the marker's own brackets). */
function citationMarker(number: number, filename: string): string {
  return `【${number}†${filename.replace(/[【】\n]/g, ' ').slice(0, 128)}】`;
}

/** A file a result number names. */
export interface CitationSource {
  fileId: string;
}

/** The run's results in order, from its steps: what each number names. */
export function citationSources(steps: readonly { stepDetails: StepDetails }[]): CitationSource[] {
  return steps.flatMap((step) =>
    step.stepDetails.type === 'tool_calls'
      ? step.stepDetails.tool_calls.flatMap((call) =>
          call.type === 'file_search' ? call.file_search.results.map((result) => ({ fileId: result.file_id })) : [],
        )
      : [],
  );
}

export interface FileCitation {
  type: 'file_citation';
  text: string;
  start_index: number;
  end_index: number;
  file_citation: { file_id: string };
}

/** Annotations of one kind a message holds at most (citations here, file paths in code-interpreter.ts): the answer is bounded, and so is this. */
export const MAX_ANNOTATIONS = 256;
const MARKER = /【(\d{1,6})†[^】\n]{0,256}】/g;

/** The answer's markers that name one of the run's results, as `file_citation` annotations (UTF-16 indices). */
export function citations(text: string, sources: readonly CitationSource[]): FileCitation[] {
  if (sources.length === 0 || !text.includes('【')) return [];
  const found: FileCitation[] = [];
  for (const match of text.matchAll(MARKER)) {
    const source = sources[Number(match[1])];
    if (!source) continue;
    found.push({
      type: 'file_citation',
      text: match[0],
      start_index: match.index,
      end_index: match.index + match[0].length,
      file_citation: { file_id: source.fileId },
    });
    if (found.length === MAX_ANNOTATIONS) break;
  }
  return found;
}
