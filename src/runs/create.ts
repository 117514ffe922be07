import type { Deps } from '../deps';
import { ApiError } from '../errors';
import { newId } from '../lib/ids';
import type { CreateThreadAndRunBody } from '../schemas/runs';
import type { MessageContent, ThreadMessageInput } from '../schemas/threads';
import { isHostedTool } from '../schemas/tools';
import type { AssistantRow } from '../services/assistants';
import { leaseMs, type MessageInsert, type NewRun, type RunRow, type ThreadInsert } from '../services/runs';
import type { MessageRow, ThreadRow } from '../services/threads';
import { servedModel, type VirtualKey } from '../services/virtual-keys';

/**
 * A new run, before anything is written: the run's effective settings (the request overrides the
 * assistant), the checks that only make sense once they are known (hosted tools, tool_choice), and
 * the rows of the thread, its messages and the queued run. Written by the route in one batch after
 * rate-limit admission.
 */

type RunSettings = Pick<
  RunRow,
  | 'model'
  | 'instructions'
  | 'tools'
  | 'toolResources'
  | 'metadata'
  | 'temperature'
  | 'topP'
  | 'maxPromptTokens'
  | 'maxCompletionTokens'
  | 'truncationStrategy'
  | 'toolChoice'
  | 'parallelToolCalls'
  | 'responseFormat'
>;

export function runSettings(assistant: AssistantRow, body: CreateThreadAndRunBody): RunSettings {
  const settings: RunSettings = {
    model: body.model ?? assistant.model,
    instructions: body.instructions ?? assistant.instructions ?? '',
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
  };
  checkExecutable(settings, assistant, body.tools !== undefined && body.tools !== null);
  return settings;
}

/**
 * Code interpreter and file search need OpenAI's hosted sandboxes and vector stores, which a Chat
 * Completions provider does not have: a run that would use them is refused before anything exists.
 */
function checkExecutable(settings: RunSettings, assistant: AssistantRow, toolsFromRequest: boolean) {
  const tools = settings.tools;
  const hosted = tools.findIndex(isHostedTool);
  if (hosted !== -1) {
    const type = tools[hosted]!.type;
    throw new ApiError(
      'unsupported_tool',
      toolsFromRequest
        ? `The ${type} tool cannot run over Chat Completions providers; only function tools can.`
        : `Assistant '${assistant.id}' has the ${type} tool, which cannot run over Chat Completions providers. ` +
            `Pass "tools" without it to run this assistant.`,
      { param: toolsFromRequest ? `tools[${hosted}]` : 'assistant_id' },
    );
  }
  const functions = new Set(tools.flatMap((tool) => (tool.type === 'function' ? [tool.function.name] : [])));
  const choice = settings.toolChoice;
  if (typeof choice === 'object') {
    if (choice.type !== 'function') {
      throw new ApiError('unsupported_tool', `tool_choice cannot force the ${choice.type} tool over Chat Completions.`, {
        param: 'tool_choice.type',
      });
    }
    if (!functions.has(choice.function!.name)) {
      throw new ApiError('invalid_value', `tool_choice names the function '${choice.function!.name}', which the run's tools do not have.`, {
        param: 'tool_choice.function.name',
      });
    }
  } else if (choice === 'required' && functions.size === 0) {
    throw new ApiError('invalid_value', "tool_choice 'required' needs at least one function tool.", {
      param: 'tool_choice',
    });
  }
}

/** Message content as stored; file-based content is refused (there is no file store behind it). */
export function messageContent(input: ThreadMessageInput, param: string): MessageContent[] {
  if (input.attachments && input.attachments.length > 0) {
    throw new ApiError('unsupported_content', 'Attachments need OpenAI-hosted files, which this gateway does not have.', {
      param: `${param}.attachments`,
    });
  }
  if (typeof input.content === 'string') return [{ type: 'text', text: { value: input.content, annotations: [] } }];
  return input.content.map((part, index): MessageContent => {
    switch (part.type) {
      case 'text':
        return { type: 'text', text: { value: part.text, annotations: [] } };
      case 'image_url':
        return { type: 'image_url', image_url: { url: part.image_url.url, detail: part.image_url.detail ?? 'auto' } };
      case 'image_file':
        throw new ApiError('unsupported_content', 'image_file content needs OpenAI-hosted files; send image_url instead.', {
          param: `${param}.content[${index}]`,
        });
    }
  });
}

export interface PreparedRun {
  thread: ThreadRow;
  messages: MessageRow[];
  run: RunRow;
}

/** The rows of createAndRun: a new thread with its messages, and the queued run on it. */
export function prepareThreadAndRun(
  deps: Deps,
  input: {
    body: CreateThreadAndRunBody;
    assistant: AssistantRow;
    workspaceId: string;
    virtualKey: VirtualKey;
    apiKeyId: string;
  },
): PreparedRun {
  const { body, assistant, workspaceId } = input;
  const settings = runSettings(assistant, body);
  const now = deps.now();
  const thread: ThreadRow = {
    seq: 0,
    id: newId('thread'),
    workspaceId,
    createdAt: now,
    metadata: body.thread?.metadata ?? {},
    toolResources: body.thread?.tool_resources ?? null,
  };
  const messages: MessageRow[] = (body.thread?.messages ?? []).map((message, index) => ({
    seq: 0,
    id: newId('msg'),
    threadId: thread.id,
    workspaceId,
    createdAt: now,
    role: message.role,
    content: messageContent(message, `thread.messages[${index}]`),
    status: 'completed',
    assistantId: null,
    runId: null,
    attachments: [],
    metadata: message.metadata ?? {},
    incompleteDetails: null,
    completedAt: now,
    incompleteAt: null,
  }));
  const run: RunRow = {
    ...settings,
    // Through an Azure key, the deployment's model: what policies match and usage is recorded for.
    model: servedModel(input.virtualKey, settings.model),
    seq: 0,
    id: newId('run'),
    workspaceId,
    threadId: thread.id,
    assistantId: assistant.id,
    virtualKeyId: input.virtualKey.id,
    apiKeyId: input.apiKeyId,
    // Executed at once: the run is born in progress (clients are still told `queued` first, as
    // OpenAI's stream and createAndRun answer do; see asQueued).
    status: 'in_progress',
    createdAt: now,
    startedAt: now,
    expiresAt: now + deps.config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000,
    cancelledAt: null,
    failedAt: null,
    completedAt: null,
    requiredAction: null,
    lastError: null,
    incompleteDetails: null,
    usage: null,
    rateLimit: null,
    // A run is leased from birth: if this process dies before executing it, the sweep finds it.
    leaseExpiresAt: now + leaseMs(deps.config),
  };
  return { thread, messages, run };
}

/** The run as it is acknowledged: OpenAI answers createAndRun and starts its stream with `queued`. */
export function asQueued(run: RunRow): RunRow {
  return { ...run, status: 'queued', startedAt: null };
}

/** Rows without their `seq` (assigned by the database), for inserting. */
export function insertable(prepared: PreparedRun): { thread: ThreadInsert; messages: MessageInsert[]; run: NewRun } {
  const { seq: _threadSeq, ...thread } = prepared.thread;
  const { seq: _runSeq, ...run } = prepared.run;
  return { thread, messages: prepared.messages.map(({ seq: _seq, ...message }) => message), run };
}
