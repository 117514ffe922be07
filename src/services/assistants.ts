import { and, count, eq, isNull, sql } from 'drizzle-orm';
import { preparedQuery, type Db } from '../db/client';
import { assistants } from '../db/schema';
import { ApiError } from '../errors';
import { newId } from '../lib/ids';
import type { CreateAssistantBody } from '../schemas/assistants';
import type { CursorListQuery } from '../schemas/common';
import { cursorPage } from './pagination';
import { insertWhere, quotaExceeded } from './quotas';

/**
 * Assistants, scoped to a workspace. Deleting one only marks it (`deleted_at`): runs that used it
 * keep pointing at a row, while every lookup here treats it as gone.
 */

export type AssistantRow = typeof assistants.$inferSelect;

/**
 * Creates an assistant; 400 `quota_exceeded` when the workspace holds `maxAssistants` live ones
 * (GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE), checked in the insert itself.
 */
export async function createAssistant(
  db: Db,
  workspaceId: string,
  body: CreateAssistantBody,
  now: number,
  maxAssistants: number,
): Promise<AssistantRow> {
  const values = {
    id: newId('asst'),
    workspaceId,
    createdAt: now,
    name: body.name ?? null,
    description: body.description ?? null,
    model: body.model,
    instructions: body.instructions ?? null,
    tools: body.tools ?? [],
    toolResources: body.tool_resources ?? null,
    metadata: body.metadata ?? {},
    temperature: body.temperature ?? null,
    topP: body.top_p ?? null,
    responseFormat: body.response_format ?? null,
  };
  // Counted on the partial index assistants_live, without reading the rows.
  const held = sql`(SELECT count(*) FROM ${assistants} WHERE ${live(workspaceId)})`;
  const [row] = await insertWhere(db, assistants, values, sql`${held} < ${maxAssistants}`).returning();
  if (row) return row;
  const [counted] = await db.select({ count: count() }).from(assistants).where(live(workspaceId));
  throw quotaExceeded(
    `This workspace has ${counted?.count ?? maxAssistants} assistants; its cap is ${maxAssistants}. Delete one before creating another.`,
  );
}

// OpenAI's own 404 for a missing assistant, with a null param.
const notFound = (id: string) => new ApiError('assistant_not_found', `No assistant found with id '${id}'.`);

const live = (workspaceId: string) => and(eq(assistants.workspaceId, workspaceId), isNull(assistants.deletedAt));

/** The workspace's assistant; 404 `assistant_not_found` when unknown, deleted or another workspace's. */
const liveById = preparedQuery((db) =>
  db
    .select()
    .from(assistants)
    .where(
      and(
        eq(assistants.id, sql.placeholder('id')),
        eq(assistants.workspaceId, sql.placeholder('workspaceId')),
        isNull(assistants.deletedAt),
      ),
    )
    .limit(1)
    .prepare(),
);

export async function getAssistant(db: Db, workspaceId: string, id: string): Promise<AssistantRow> {
  const [row] = await liveById(db).all({ id, workspaceId });
  if (!row) throw notFound(id);
  return row;
}

/** One page of the workspace's assistants (see cursorPage); a cursor deleted since still counts. */
export function listAssistants(db: Db, workspaceId: string, query: CursorListQuery) {
  return cursorPage(query, {
    seq: assistants.seq,
    noun: 'assistant',
    seqOf: async (id) => {
      const [row] = await db
        .select({ seq: assistants.seq })
        .from(assistants)
        .where(and(eq(assistants.id, id), eq(assistants.workspaceId, workspaceId)))
        .limit(1);
      return row?.seq;
    },
    select: (where, orderBy, limit) =>
      db.select().from(assistants).where(and(live(workspaceId), where)).orderBy(orderBy).limit(limit),
  });
}

/** Marks the assistant deleted; 404 as getAssistant when it is not there (or already deleted). */
export async function deleteAssistant(db: Db, workspaceId: string, id: string, now: number): Promise<AssistantRow> {
  const [row] = await db
    .update(assistants)
    .set({ deletedAt: now })
    .where(and(eq(assistants.id, id), live(workspaceId)))
    .returning();
  if (!row) throw notFound(id);
  return row;
}
