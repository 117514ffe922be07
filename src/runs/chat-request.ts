import type { ChatCompletionRequest, ChatMessage } from '../providers/types';
import type { RunRow } from '../services/runs';

/**
 * A turn of a run as a Chat Completions request: its prompt (runs/prompt.ts: the system message
 * and the thread's history), function tools as chat tools, and the run's sampling, JSON-mode and
 * token settings. Always streamed, with usage.
 */
export function buildChatRequest(run: RunRow, messages: ChatMessage[], completionBudget: number | null): ChatCompletionRequest {
  const request: ChatCompletionRequest = {
    model: run.model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  const functions = run.tools.filter((tool) => tool.type === 'function');
  if (functions.length > 0) {
    request.tools = functions.map((tool) => ({ type: 'function', function: stripUndefined(tool.function) }));
    request.tool_choice = run.toolChoice;
    request.parallel_tool_calls = run.parallelToolCalls;
  }
  // Without function tools, tool_choice and parallel_tool_calls are left out: some servers reject them.
  const format = run.responseFormat;
  if (typeof format === 'object' && format.type !== 'text') request.response_format = format;
  if (run.temperature !== null) request.temperature = run.temperature;
  if (run.topP !== null) request.top_p = run.topP;
  if (completionBudget !== null) request.max_completion_tokens = completionBudget;
  return request;
}

function stripUndefined<T extends object>(value: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined && v !== null));
}
