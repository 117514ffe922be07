import { newId } from '../../lib/ids';
import type { MessageAttachment, MessageContent } from '../../db/schema';
import type { ThreadMessageInput } from './schemas';
import type { ToolResources } from '../../db/json-columns';
import type { MessageRow, ThreadKey, ThreadRow } from './queries';

/**
 * The rows a client's requests create, complete and ready to insert (the database adds `seq`,
 * which nothing reads): a thread, and the messages a client writes into it. A run's rows are
 * resources/runs/execution/rows.ts's.
 */

export function newThread(
  workspaceId: string,
  fields: { metadata?: Record<string, string> | null; tool_resources?: ToolResources | null } | undefined,
  at: number,
  /** `conv` for a conversation (POST /v1/conversations): the same thread, under OpenAI's prefix. */
  prefix: 'thread' | 'conv' = 'thread',
): ThreadRow {
  return {
    id: newId(prefix),
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
export function clientMessage(thread: ThreadKey, input: ThreadMessageInput, param: string, at: number): MessageRow {
  return writtenMessage(
    thread,
    {
      role: input.role,
      content: messageContent(input, param),
      attachments: messageAttachments(input),
      metadata: input.metadata ?? {},
    },
    at,
  );
}

/** A complete message a client wrote (through the Assistants API, or as a conversation's item), with no run. */
export function writtenMessage(
  thread: ThreadKey,
  fields: Pick<MessageRow, 'role' | 'content' | 'attachments' | 'metadata'>,
  at: number,
): MessageRow {
  return {
    id: newId('msg'),
    threadId: thread.id,
    workspaceId: thread.workspaceId,
    createdAt: at,
    ...fields,
    status: 'completed',
    assistantId: null,
    runId: null,
    incompleteDetails: null,
    completedAt: at,
    incompleteAt: null,
  };
}

/**
 * A message's attachments as stored. Those for file_search are added to the thread's vector store
 * (resources/vector-stores/thread-stores.ts); those for code_interpreter are put in the thread's
 * sandbox session by a run that uses the tool, where there is a sandbox (code-attachments.ts).
 */
function messageAttachments(input: ThreadMessageInput): MessageAttachment[] {
  return (input.attachments ?? []).map((attachment) => ({
    file_id: attachment.file_id,
    tools: attachment.tools ?? [],
  }));
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
        return {
          type: 'image_file',
          image_file: { file_id: part.image_file.file_id, detail: part.image_file.detail ?? 'auto' },
        };
    }
  });
}
