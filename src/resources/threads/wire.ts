import { toUnixSeconds } from '../../lib/time';
import type { MessageObject, ThreadObject } from './objects';
import type { MessageRow, ThreadRow } from './queries';

/** OpenAI's Thread and Message objects, from their rows. */

export function toThreadJson(row: ThreadRow): ThreadObject {
  return {
    id: row.id,
    object: 'thread' as const,
    created_at: toUnixSeconds(row.createdAt),
    metadata: row.metadata,
    tool_resources: row.toolResources ?? {},
  };
}

export function toMessageJson(row: MessageRow): MessageObject {
  return {
    id: row.id,
    object: 'thread.message' as const,
    created_at: toUnixSeconds(row.createdAt),
    assistant_id: row.assistantId,
    thread_id: row.threadId,
    run_id: row.runId,
    status: row.status,
    incomplete_details: row.incompleteDetails ?? null,
    incomplete_at: row.incompleteAt === null ? null : toUnixSeconds(row.incompleteAt),
    completed_at: row.completedAt === null ? null : toUnixSeconds(row.completedAt),
    role: row.role,
    content: row.content,
    attachments: row.attachments,
    metadata: row.metadata,
  };
}

/**
 * A message's row from its object, as a run's events showed it (runs/answer-watch.ts), for a prompt
 * built from it: its times are the object's whole seconds, which the prompt reads only to place
 * tool calls among the messages (threads/timeline.ts).
 */
export function fromMessageJson(object: MessageObject, workspaceId: string): MessageRow {
  const ms = (at: number | null) => (at === null ? null : at * 1000);
  return {
    id: object.id,
    threadId: object.thread_id,
    workspaceId,
    createdAt: object.created_at * 1000,
    role: object.role,
    content: object.content,
    status: object.status,
    assistantId: object.assistant_id,
    runId: object.run_id,
    attachments: object.attachments ?? [],
    metadata: object.metadata,
    incompleteDetails: object.incomplete_details,
    completedAt: ms(object.completed_at),
    incompleteAt: ms(object.incomplete_at),
  };
}
