import { ApiError } from '../../../errors';
import type { RunOverrides } from '../schemas';
import type { Tool } from '../../../db/json-columns';
import { FILE_SEARCH_FUNCTION } from './file-search';
import type { AssistantRow } from '../../../db/schema';
import type { RunRow } from '../../../db/schema';

/**
 * A run's effective settings: the request's, else its assistant's, else the default, one line per
 * setting; and the checks that only make sense once they are known (hosted tools, tool_choice).
 * Stored on the run's row (rows.ts), answered by resources/runs/wire.ts, sent upstream by chat-request.ts.
 */
export function runSettings(assistant: AssistantRow, body: RunOverrides) {
  const settings = {
    model: body.model ?? assistant.model,
    instructions: withAdditional(body.instructions ?? assistant.instructions ?? '', body.additional_instructions),
    tools: body.tools ?? assistant.tools,
    toolResources: body.tool_resources ?? assistant.toolResources ?? null,
    metadata: body.metadata ?? {},
    temperature: body.temperature ?? assistant.temperature ?? null,
    topP: body.top_p ?? assistant.topP ?? null,
    maxPromptTokens: body.max_prompt_tokens ?? null,
    maxCompletionTokens: body.max_completion_tokens ?? null,
    truncationStrategy: {
      type: body.truncation_strategy?.type ?? 'auto',
      last_messages: body.truncation_strategy?.last_messages ?? null,
    },
    toolChoice: body.tool_choice ?? 'auto',
    parallelToolCalls: body.parallel_tool_calls ?? true,
    responseFormat: body.response_format ?? assistant.responseFormat ?? 'auto',
    // The Assistants API has no reasoning setting; a response's is its `reasoning.effort`.
    reasoningEffort: null as string | null,
  } satisfies Partial<RunRow>;
  checkExecutable(settings, assistant, body.tools !== undefined && body.tools !== null);
  return settings;
}

export type RunSettings = ReturnType<typeof runSettings>;

/**
 * additional_instructions go at the end of the instructions, after a blank line; the run shows
 * (and sends as its system message) the two together.
 */
function withAdditional(instructions: string, additional: string | null | undefined): string {
  if (!additional) return instructions;
  return instructions ? `${instructions}\n\n${additional}` : additional;
}

/** Tool types that need OpenAI's hosted infrastructure and cannot run over Chat Completions. */
const HOSTED_TOOL_TYPES = ['code_interpreter'] as const;

const isHostedTool = (tool: Tool) => HOSTED_TOOL_TYPES.some((type) => type === tool.type);

/**
 * Code interpreter needs OpenAI's hosted sandboxes, which a Chat Completions provider does not
 * have: a run that would use it is refused before anything exists. File search runs in the
 * gateway (resources/runs/execution/file-search.ts) behind a function of its own name, which a function tool of the
 * run cannot take too.
 */
function checkExecutable(
  settings: Pick<RunRow, 'tools' | 'toolChoice'>,
  assistant: AssistantRow,
  toolsFromRequest: boolean,
) {
  const { tools, toolChoice: choice } = settings;
  const hostedTool = tools.find(isHostedTool);
  if (hostedTool) {
    const hosted = tools.indexOf(hostedTool);
    const type = hostedTool.type;
    throw new ApiError(
      'unsupported_tool',
      toolsFromRequest
        ? `The ${type} tool cannot run over Chat Completions providers; function and file_search tools can.`
        : `Assistant '${assistant.id}' has the ${type} tool, which cannot run over Chat Completions providers. ` +
            `Pass "tools" without it to run this assistant.`,
      { param: toolsFromRequest ? `tools[${hosted}]` : 'assistant_id' },
    );
  }
  const fileSearch = tools.some((tool) => tool.type === 'file_search');
  const taken = fileSearch
    ? tools.findIndex((tool) => tool.type === 'function' && tool.function.name === FILE_SEARCH_FUNCTION)
    : -1;
  if (taken !== -1) {
    throw new ApiError(
      'invalid_value',
      `The function name '${FILE_SEARCH_FUNCTION}' is the file_search tool's own: rename the function tool, or drop the file_search tool.`,
      { param: toolsFromRequest ? `tools[${taken}].function.name` : 'assistant_id' },
    );
  }
  const functions = new Set(tools.flatMap((tool) => (tool.type === 'function' ? [tool.function.name] : [])));
  if (typeof choice === 'object') {
    if (choice.type === 'file_search') {
      if (!fileSearch) {
        throw new ApiError(
          'invalid_value',
          "tool_choice names the file_search tool, which the run's tools do not have.",
          { param: 'tool_choice.type' },
        );
      }
      return;
    }
    if (choice.type !== 'function') {
      throw new ApiError(
        'unsupported_tool',
        `tool_choice cannot force the ${choice.type} tool over Chat Completions.`,
        {
          param: 'tool_choice.type',
        },
      );
    }
    // The schema requires the name of a function choice (toolChoiceSchema).
    const named = choice.function?.name ?? '';
    if (!functions.has(named)) {
      throw new ApiError(
        'invalid_value',
        `tool_choice names the function '${named}', which the run's tools do not have.`,
        {
          param: 'tool_choice.function.name',
        },
      );
    }
  } else if (choice === 'required' && functions.size === 0 && !fileSearch) {
    throw new ApiError('invalid_value', "tool_choice 'required' needs at least one function or file_search tool.", {
      param: 'tool_choice',
    });
  }
}
