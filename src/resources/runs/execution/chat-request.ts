import type { ChatCompletionRequest, ChatMessage } from '../../../providers/types';
import type { ToolChoice } from '../../../db/json-columns';
import type { RunRow } from '../../../db/schema';
import { HOSTED_TOOLS, isHostedKind, MAX_HOSTED_ROUNDS } from './hosted-tools';

/**
 * A turn of a run as a Chat Completions request: its prompt (resources/runs/execution/prompt.ts: the system message
 * and the thread's history), function tools as chat tools (and file_search and code_interpreter
 * as the functions the gateway answers: hosted-tools.ts), and the run's sampling, JSON-mode and
 * token settings. Always streamed, with usage.
 */
export function buildChatRequest(
  run: RunRow,
  messages: ChatMessage[],
  completionBudget: number | null,
  /** The turn's round (engine.ts): its rounds of hosted tool calls so far, plus one. */
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
    return [HOSTED_TOOLS[tool.type].chatTool];
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
 * The run's tool_choice for a round of its turn. Forcing a hosted tool (file_search,
 * code_interpreter) forces the function it is given to the model as, in the first round only
 * (then the model may answer); a turn that took MAX_HOSTED_ROUNDS rounds of them must answer with
 * what it has.
 */
function chatToolChoice(choice: ToolChoice, round: number): unknown {
  if (round > MAX_HOSTED_ROUNDS) return 'none';
  if (typeof choice !== 'object' || !isHostedKind(choice.type)) return choice;
  return round === 1 ? { type: 'function', function: { name: HOSTED_TOOLS[choice.type].name } } : 'auto';
}

function stripUndefined<T extends object>(value: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined && v !== null));
}
