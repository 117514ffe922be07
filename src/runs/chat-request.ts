import type { ChatCompletionRequest, ChatContentPart, ChatMessage } from '../providers/types';
import type { RunRow, StepRow } from '../services/runs';
import type { MessageRow } from '../services/threads';

/**
 * A run as a Chat Completions request: the run's instructions as the system message, the thread's
 * messages (the last `last_messages` of them when the truncation strategy says so), then this run's
 * earlier tool calls and their outputs, function tools as chat tools, and the run's sampling,
 * JSON-mode and token settings. Always streamed, with usage.
 */
export function buildChatRequest(
  run: RunRow,
  conversation: MessageRow[],
  toolSteps: StepRow[],
  completionBudget: number | null,
): ChatCompletionRequest {
  const messages: ChatMessage[] = [];
  if (run.instructions) messages.push({ role: 'system', content: run.instructions });

  const keep = run.truncationStrategy.type === 'last_messages' ? (run.truncationStrategy.last_messages ?? 0) : 0;
  const thread = keep > 0 ? conversation.slice(-keep) : conversation;
  for (const message of thread) messages.push(toChatMessage(message));

  for (const step of toolSteps) {
    const details = step.stepDetails;
    if (details.type !== 'tool_calls' || details.tool_calls.length === 0) continue;
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: details.tool_calls.map((call) => ({
        id: call.id,
        type: 'function',
        function: { name: call.function.name, arguments: call.function.arguments },
      })),
    });
    for (const call of details.tool_calls) {
      messages.push({ role: 'tool', tool_call_id: call.id, content: call.function.output ?? '' });
    }
  }

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

function toChatMessage(message: MessageRow): ChatMessage {
  const parts = message.content;
  if (message.role === 'assistant') {
    return { role: 'assistant', content: parts.map((part) => (part.type === 'text' ? part.text.value : '')).join('') };
  }
  if (parts.every((part) => part.type === 'text')) {
    return { role: 'user', content: parts.map((part) => (part.type === 'text' ? part.text.value : '')).join('\n') };
  }
  return {
    role: 'user',
    content: parts.map(
      (part): ChatContentPart =>
        part.type === 'text' ? { type: 'text', text: part.text.value } : { type: 'image_url', image_url: part.image_url },
    ),
  };
}

function stripUndefined<T extends object>(value: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined && v !== null));
}
