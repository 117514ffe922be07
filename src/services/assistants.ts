import { and, asc, desc, eq, gt, isNull, lt } from 'drizzle-orm';
import type { Db } from '../db/client';
import { assistants } from '../db/schema';
import { ApiError } from '../errors';
import { newId } from '../lib/ids';
import type { AssistantJson, CreateAssistantBody, CursorListQuery } from '../schemas/assistants';
import type { ResponseFormat, Tool, ToolResources } from '../schemas/tools';

/**
 * Assistants, scoped to a workspace. Deleting one only marks it (`deleted_at`): runs that used it
 * keep pointing at a row, while every lookup here treats it as gone.
 */

export type AssistantRow = typeof assistants.$inferSelect;

export function toAssistantJson(row: AssistantRow): AssistantJson {
  return {
    id: row.id,
    object: 'assistant',
    created_at: Math.floor(row.createdAt / 1000),
    name: row.name,
    description: row.description,
    model: row.model,
    instructions: row.instructions,
    tools: row.tools as Tool[],
    metadata: row.metadata,
    tool_resources: (row.toolResources ?? {}) as ToolResources,
    temperature: row.temperature ?? 1,
    top_p: row.topP ?? 1,
    response_format: (row.responseFormat ?? 'auto') as ResponseFormat,
  };
}

export async function createAssistant(
  db: Db,
  workspaceId: string,
  body: CreateAssistantBody,
  now: number,
): Promise<AssistantRow> {
  const [row] = await db
    .insert(assistants)
    .values({
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
    })
    .returning();
  return row!;
}

// OpenAI's own 404 for a missing assistant, param null (../shared/reference/openai-errors.md).
const notFound = (id: string) => new ApiError('assistant_not_found', `No assistant found with id '${id}'.`);

const live = (workspaceId: string) => and(eq(assistants.workspaceId, workspaceId), isNull(assistants.deletedAt));

/** The workspace's assistant; 404 `assistant_not_found` when unknown, deleted or another workspace's. */
export async function getAssistant(db: Db, workspaceId: string, id: string): Promise<AssistantRow> {
  const [row] = await db
    .select()
    .from(assistants)
    .where(and(eq(assistants.id, id), live(workspaceId)))
    .limit(1);
  if (!row) throw notFound(id);
  return row;
}

export interface AssistantPage {
  rows: AssistantRow[];
  /** Whether more assistants lie beyond this page in the direction of travel. */
  hasMore: boolean;
}

/**
 * One page in `order` by creation (`seq`, which never ties). `after` continues past its id;
 * `before` gives the page just before its id (read backwards from it, then turned around), so
 * following `first_id` with `before` walks back page by page.
 */
export async function listAssistants(db: Db, workspaceId: string, query: CursorListQuery): Promise<AssistantPage> {
  const ascending = query.order === 'asc';
  const afterSeq = query.after === undefined ? undefined : await cursorSeq(db, workspaceId, query.after, 'after');
  const beforeSeq = query.before === undefined ? undefined : await cursorSeq(db, workspaceId, query.before, 'before');
  const backwards = beforeSeq !== undefined && afterSeq === undefined;
  const rows = await db
    .select()
    .from(assistants)
    .where(
      and(
        live(workspaceId),
        afterSeq === undefined ? undefined : ascending ? gt(assistants.seq, afterSeq) : lt(assistants.seq, afterSeq),
        beforeSeq === undefined ? undefined : ascending ? lt(assistants.seq, beforeSeq) : gt(assistants.seq, beforeSeq),
      ),
    )
    .orderBy(ascending !== backwards ? asc(assistants.seq) : desc(assistants.seq))
    .limit(query.limit + 1);
  const page = rows.slice(0, query.limit);
  if (backwards) page.reverse();
  return { rows: page, hasMore: rows.length > query.limit };
}

/** A cursor is an assistant of the workspace; one deleted since the previous page still counts. */
async function cursorSeq(db: Db, workspaceId: string, id: string, param: 'after' | 'before'): Promise<number> {
  const [row] = await db
    .select({ seq: assistants.seq })
    .from(assistants)
    .where(and(eq(assistants.id, id), eq(assistants.workspaceId, workspaceId)))
    .limit(1);
  if (!row) throw new ApiError('invalid_value', `Invalid '${param}': no assistant found with id '${id}'.`, { param });
  return row.seq;
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
