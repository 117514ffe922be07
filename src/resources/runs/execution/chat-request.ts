import type { ChatCompletionRequest, ChatMessage } from '../../../providers/types';
import type { ToolChoice } from '../../../db/json-columns';
import type { RunRow } from '../../../db/schema';
import { FILE_SEARCH_CHAT_TOOL, FILE_SEARCH_FUNCTION, MAX_SEARCH_ROUNDS } from './file-search';

/**
 * A turn of a run as a Chat Completions request: its prompt (resources/runs/execution/prompt.ts: the system message
 * and the thread's history), function tools as chat tools (and file_search as the gateway's
 * search function: file-search.ts), and the run's sampling, JSON-mode and
 * token settings. Always streamed, with usage.
 */
export function buildChatRequest(
  run: RunRow,
  messages: ChatMessage[],
  completionBudget: number | null,
  /** The turn's round (engine.ts): its file searches so far, plus one. */
  round = 1,
): ChatCompletionRequest {
  const request: ChatCompletionRequest = {
    model: run.model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  const tools = run.tools.flatMap((tool): NonNullable<ChatCompletionRequest['tools']> => {
    if (tool.type === 'function') return [{ type: 'function', function: stripUndefined(tool.function) }];
    return tool.type === 'file_search' ? [FILE_SEARCH_CHAT_TOOL] : [];
  });
  if (tools.length > 0) {
    request.tools = tools;
    request.tool_choice = chatToolChoice(run.toolChoice, round);
    request.parallel_tool_calls = run.parallelToolCalls;
  }
  // Without tools, tool_choice and parallel_tool_calls are left out: some servers reject them.
  const format = run.responseFormat;
  if (typeof format === 'object' && format.type !== 'text') request.response_format = format;
  if (run.temperature !== null) request.temperature = run.temperature;
  if (run.topP !== null) request.top_p = run.topP;
  if (run.reasoningEffort !== null) request.reasoning_effort = run.reasoningEffort;
  if (completionBudget !== null) request.max_completion_tokens = completionBudget;
  return request;
}

/**
 * The run's tool_choice for a round of its turn. Forcing the file_search tool forces the function
 * it is given to the model as, in the first round only (then the model may answer); a turn that
 * searched MAX_SEARCH_ROUNDS times must answer with what it found.
 */
function chatToolChoice(choice: ToolChoice, round: number): unknown {
  if (round > MAX_SEARCH_ROUNDS) return 'none';
  if (typeof choice !== 'object' || choice.type !== 'file_search') return choice;
  return round === 1 ? { type: 'function', function: { name: FILE_SEARCH_FUNCTION } } : 'auto';
}

function stripUndefined<T extends object>(value: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined && v !== null));
}
