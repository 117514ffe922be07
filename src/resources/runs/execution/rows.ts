import type { Config } from '../../../config';
import { ApiError } from '../../../errors';
import { newId } from '../../../lib/ids';
import type { StepDetails, ToolResources } from '../../../db/json-columns';
import type { MessageAttachment, MessageContent } from '../../../db/schema';
import type { ThreadMessageInput } from '../../threads/schemas';
import { leaseMs, type RunRow, type StepRow } from '../queries';
import type { MessageRow, ThreadRow } from '../../threads/queries';
import { servedModel, type VirtualKey } from '../../virtual-keys/commands';
import type { RunSettings } from './settings';

/**
 * The rows the gateway creates for the Assistants objects, in one place: threads, messages, runs
 * and run steps, complete and ready to insert (the database adds `seq`, which nothing reads).
 */

export function newThread(
  workspaceId: string,
  fields: { metadata?: Record<string, string> | null; tool_resources?: ToolResources | null } | undefined,
  at: number,
): ThreadRow {
  return {
    id: newId('thread'),
    workspaceId,
    createdAt: at,
    metadata: fields?.metadata ?? {},
    toolResources: fields?.tool_resources ?? null,
  };
}

/**
 * A message a client wrote into a thread; `param` names it in errors (`thread.messages[0]`, or ''
 * when the message is the whole request body).
 */
export function clientMessage(thread: ThreadRow, input: ThreadMessageInput, param: string, at: number): MessageRow {
  return {
    id: newId('msg'),
    threadId: thread.id,
    workspaceId: thread.workspaceId,
    createdAt: at,
    role: input.role,
    content: messageContent(input, param),
    status: 'completed',
    assistantId: null,
    runId: null,
    attachments: messageAttachments(input, param),
    metadata: input.metadata ?? {},
    incompleteDetails: null,
    completedAt: at,
    incompleteAt: null,
  };
}

/** The assistant's message a turn of `run` writes its answer into, in progress until the turn ends. */
export function answerMessage(run: RunRow, at: number): MessageRow {
  return {
    id: newId('msg'),
    threadId: run.threadId,
    workspaceId: run.workspaceId,
    createdAt: at,
    role: 'assistant',
    content: [],
    status: 'in_progress',
    assistantId: run.assistantId,
    runId: run.id,
    attachments: [],
    metadata: {},
    incompleteDetails: null,
    completedAt: null,
    incompleteAt: null,
  };
}

/**
 * A message's attachments as stored. Those for file_search are added to the thread's vector store
 * (resources/vector-stores/thread-stores.ts); code_interpreter has no sandbox here and is refused.
 */
function messageAttachments(input: ThreadMessageInput, param: string): MessageAttachment[] {
  return (input.attachments ?? []).map((attachment, index) => {
    const tools = attachment.tools ?? [];
    const refused = tools.findIndex((tool) => tool.type !== 'file_search');
    if (refused >= 0) {
      throw new ApiError('unsupported_tool', 'Attachments for code_interpreter are not supported: this gateway has no code sandbox. Attach files for file_search.', {
        param: field(param, `attachments[${index}].tools[${refused}]`),
      });
    }
    return { file_id: attachment.file_id, tools };
  });
}

/** Message content as stored; its image parts were checked before (resources/files/images.ts, checkImages). */
function messageContent(input: ThreadMessageInput, param: string): MessageContent[] {
  if (typeof input.content === 'string') return [{ type: 'text', text: { value: input.content, annotations: [] } }];
  return input.content.map((part, index): MessageContent => {
    switch (part.type) {
      case 'text':
        return { type: 'text', text: { value: part.text, annotations: [] } };
      case 'image_url':
        return { type: 'image_url', image_url: { url: part.image_url.url, detail: part.image_url.detail ?? 'auto' } };
      case 'image_file':
        // The file was checked before (resources/files/images.ts, checkImages); its bytes go at run time.
        return { type: 'image_file', image_file: { file_id: part.image_file.file_id, detail: part.image_file.detail ?? 'auto' } };
    }
  });
}

const field = (param: string, name: string) => (param === '' ? name : `${param}.${name}`);

/**
 * A run on `thread` with its effective settings, executed at once: born in progress (clients are
 * still told `queued` first, as OpenAI's stream and createAndRun answer do), and leased from birth,
 * so that if this process dies before executing it the recovery sweep finds it.
 */
export function newRun(
  settings: RunSettings,
  owner: { thread: ThreadRow; assistantId: string; virtualKey: VirtualKey; apiKeyId: string },
  config: Pick<Config, 'GATEWAY_RUN_EXPIRES_AFTER_SECONDS' | 'GATEWAY_RUN_LEASE_SECONDS'>,
  at: number,
): RunRow {
  // The settings are spread last: on Node 20's V8, a literal that opens with a spread and then adds
  // keys the spread did not have builds a new hidden class each time, microseconds a key (about
  // 40 µs here, per run). Spread last, or after other keys, it costs what the copy costs.
  return {
    id: newId('run'),
    workspaceId: owner.thread.workspaceId,
    threadId: owner.thread.id,
    assistantId: owner.assistantId,
    virtualKeyId: owner.virtualKey.id,
    apiKeyId: owner.apiKeyId,
    status: 'in_progress',
    createdAt: at,
    startedAt: at,
    expiresAt: at + config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000,
    cancelledAt: null,
    failedAt: null,
    completedAt: null,
    requiredAction: null,
    lastError: null,
    incompleteDetails: null,
    usage: null,
    rateLimit: null,
    leaseExpiresAt: at + leaseMs(config),
    ...settings,
    // Through an Azure key, the deployment's model: what policies match and usage is recorded for.
    model: servedModel(owner.virtualKey, settings.model),
  };
}

/** A step of `run`, in progress: a message it creates, or tool calls it makes. */
export function newStep(run: RunRow, details: StepDetails, at: number): StepRow {
  return {
    id: newId('step'),
    runId: run.id,
    threadId: run.threadId,
    assistantId: run.assistantId,
    workspaceId: run.workspaceId,
    type: details.type,
    status: 'in_progress',
    stepDetails: details,
    createdAt: at,
    completedAt: null,
    cancelledAt: null,
    failedAt: null,
    expiredAt: null,
    lastError: null,
    usage: null,
  };
}
