import { ApiError } from '../../../errors';
import type { RunOverrides } from '../schemas';
import type { Tool } from '../../../db/json-columns';
import type { Sandbox } from '../../../sandbox/sandbox';
import { HOSTED_TOOLS, isHostedKind } from './hosted-tools';
import type { AssistantRow } from '../../../db/schema';
import type { RunRow } from '../../../db/schema';

/**
 * A run's effective settings: the request's, else its assistant's, else the default, one line per
 * setting; and the checks that only make sense once they are known (hosted tools' names, tool_choice).
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

/**
 * File search and code_interpreter run in the gateway (hosted-tools.ts), each behind a function of
 * its own name, which a function tool of the run cannot take too. Whether a sandbox is there for
 * code_interpreter is checkSandbox's to say, where the run starts.
 */
function checkExecutable(
  settings: Pick<RunRow, 'tools' | 'toolChoice'>,
  assistant: AssistantRow,
  toolsFromRequest: boolean,
) {
  const { tools, toolChoice: choice } = settings;
  const hosted = new Set(tools.flatMap((tool) => (isHostedKind(tool.type) ? [tool.type] : [])));
  for (const kind of hosted) {
    const name = HOSTED_TOOLS[kind].name;
    const taken = tools.findIndex((tool) => tool.type === 'function' && tool.function.name === name);
    if (taken !== -1) {
      throw new ApiError(
        'invalid_value',
        `The function name '${name}' is the ${kind} tool's own: rename the function tool, or drop the ${kind} tool.`,
        { param: toolsFromRequest ? `tools[${taken}].function.name` : 'assistant_id' },
      );
    }
  }
  const functions = new Set(tools.flatMap((tool) => (tool.type === 'function' ? [tool.function.name] : [])));
  if (typeof choice === 'object') {
    if (isHostedKind(choice.type)) {
      if (!hosted.has(choice.type)) {
        throw new ApiError(
          'invalid_value',
          `tool_choice names the ${choice.type} tool, which the run's tools do not have.`,
          { param: 'tool_choice.type' },
        );
      }
      return;
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
  } else if (choice === 'required' && functions.size === 0 && hosted.size === 0) {
    throw new ApiError('invalid_value', "tool_choice 'required' needs at least one tool.", {
      param: 'tool_choice',
    });
  }
}

/**
 * code_interpreter runs in the gateway's sandbox (deps.sandbox): a run that would use it where
 * there is none is refused before anything exists, saying how to get one. Why there is none (a
 * missing program, an unreachable server) is the operator's business: the start's log line and
 * /health say it, not a tenant's error.
 */
export async function checkSandbox(
  sandbox: Sandbox,
  tools: readonly Tool[],
  origin: { assistantId: string; toolsFromRequest: boolean },
): Promise<void> {
  const index = tools.findIndex((tool) => tool.type === 'code_interpreter');
  if (index === -1 || (await sandbox.availability()).available) return;
  const how = `This gateway has no code sandbox: install bubblewrap and Python with numpy, pandas and matplotlib, or set GATEWAY_SANDBOX_URL (docs/sandbox.md).`;
  throw new ApiError(
    'unsupported_tool',
    origin.toolsFromRequest
      ? `The code_interpreter tool cannot run here. ${how}`
      : `Assistant '${origin.assistantId}' has the code_interpreter tool, which cannot run here. ${how} ` +
          'Pass "tools" without it to run this assistant.',
    { param: origin.toolsFromRequest ? `tools[${index}]` : 'assistant_id' },
  );
}
