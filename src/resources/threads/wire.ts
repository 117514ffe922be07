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
