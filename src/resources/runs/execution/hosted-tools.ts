import type { ChatCompletionRequest } from '../../../providers/types';
import type { CodeInterpreterToolCall, FileSearchToolCall, Tool } from '../../../db/json-columns';
import { CODE_INTERPRETER_CHAT_TOOL, CODE_INTERPRETER_FUNCTION } from './code-interpreter';
import { FILE_SEARCH_CHAT_TOOL, FILE_SEARCH_FUNCTION } from './file-search';
import { SearchArguments } from './search-arguments';

/**
 * The tools the gateway answers itself, each given to the model as a function of its own name:
 * file_search (file-search.ts) and code_interpreter (code-interpreter.ts). A round of a turn
 * whose tool calls are all theirs is answered here and the turn goes on (engine.ts).
 */

export type HostedKind = 'file_search' | 'code_interpreter';

export const HOSTED_TOOLS: Record<
  HostedKind,
  { name: string; chatTool: NonNullable<ChatCompletionRequest['tools']>[number] }
> = {
  file_search: { name: FILE_SEARCH_FUNCTION, chatTool: FILE_SEARCH_CHAT_TOOL },
  code_interpreter: { name: CODE_INTERPRETER_FUNCTION, chatTool: CODE_INTERPRETER_CHAT_TOOL },
};

/** Rounds of hosted tool calls one turn may take before the model must answer (tool_choice `none`). */
export const MAX_HOSTED_ROUNDS = 4;

/**
 * A call of a hosted tool's function while its turn streams: its answer, once the gateway has given
 * it; a file search's queries are read as its arguments stream (SearchArguments).
 */
export type HostedCall =
  | { kind: 'file_search'; done: FileSearchToolCall | null; queries: SearchArguments }
  | { kind: 'code_interpreter'; done: CodeInterpreterToolCall | null };

/** A new call of the hosted tool `kind`, nothing of it read yet. */
export const hostedCall = (kind: HostedKind): HostedCall =>
  kind === 'file_search' ? { kind, done: null, queries: new SearchArguments() } : { kind, done: null };

export const isHostedKind = (type: Tool['type']): type is HostedKind => type in HOSTED_TOOLS;

/** The hosted tools of `tools`, by the name of the function the model calls them by. */
export function hostedFunctions(tools: readonly Tool[]): Map<string, HostedKind> {
  return new Map(tools.flatMap((tool) => (isHostedKind(tool.type) ? [[HOSTED_TOOLS[tool.type].name, tool.type]] : [])));
}
