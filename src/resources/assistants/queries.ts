import { and, count, eq, isNull, sql, type SQL } from 'drizzle-orm';
import { insertWhere, preparedQueries, preparedQuery, type BuiltStatement, type Db } from '../../db/client';
import { assistants, type AssistantRow } from '../../db/schema';
import { ApiError } from '../../errors';
import { newId } from '../../lib/ids';
import type { ModifyAssistantBody } from './schemas';
import type { CursorListQuery } from '../../http/schemas';
import type { ToolResources } from '../../db/json-columns';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';
import { quotaExceeded } from '../identities/quotas';

/**
 * Assistants, scoped to a workspace. Deleting one only marks it (`deleted_at`): runs that used it
 * keep pointing at a row, while every lookup here treats it as gone.
 */

type AssistantColumns = Partial<typeof assistants.$inferInsert>;

/**
 * An assistant's fields as written: a create or modify body's, with its tool resources as stored
 * (a vector store they create is named by its id: resources/assistants/commands.ts).
 */
export type AssistantFields = Omit<ModifyAssistantBody, 'tool_resources'> & { tool_resources?: ToolResources | null };

/** A new assistant: its id is known before it is written, so that the writes that go with it can wait for it (assistantLive). */
export interface NewAssistant {
  id: string;
  workspaceId: string;
  fields: AssistantFields & { model: string };
  now: number;
  /** GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE. */
  maxAssistants: number;
}

export const newAssistantId = () => newId('asst');

/**
 * Writes a new assistant, with `extra` (statements made only while assistantLive holds) in the same
 * transaction; 400 `quota_exceeded` when the workspace holds `maxAssistants` live ones, checked in
 * the insert itself.
 */
export async function insertAssistant(
  db: Db,
  assistant: NewAssistant,
  extra: BuiltStatement[] = [],
): Promise<AssistantRow> {
  const { workspaceId, maxAssistants } = assistant;
  const values = {
    id: assistant.id,
    workspaceId,
    createdAt: assistant.now,
    name: null,
    description: null,
    instructions: null,
    tools: [],
    toolResources: null,
    metadata: {},
    temperature: null,
    topP: null,
    responseFormat: null,
    ...columnsOf(assistant.fields),
    model: assistant.fields.model,
  };
  // Counted on the partial index assistants_live, without reading the rows.
  const held = sql`(SELECT count(*) FROM ${assistants} WHERE ${live(workspaceId)})`;
  const insert = insertWhere(db, assistants, values, sql`${held} < ${maxAssistants}`).returning();
  const [row] = extra.length > 0 ? (await db.batch([insert, ...extra]))[0] : await insert;
  if (row) return row;
  const [counted] = await db.select({ count: count() }).from(assistants).where(live(workspaceId));
  throw quotaExceeded(
    `This workspace has ${counted?.count ?? maxAssistants} assistants; its cap is ${maxAssistants}. Delete one before creating another.`,
  );
}

/** Holds while the workspace's assistant `id` is there, not deleted: the condition of the writes that go with it. */
export const assistantLive = (workspaceId: string, id: string): SQL =>
  sql`EXISTS (SELECT 1 FROM ${assistants} WHERE ${assistants.id} = ${id} AND ${live(workspaceId)})`;

/**
 * The columns a create or modify body sets: only the fields it sends. A field sent as null clears
 * it (the answer then shows its default); null metadata is no metadata.
 */
function columnsOf(body: AssistantFields): AssistantColumns {
  const columns: AssistantColumns = {};
  if (body.model !== undefined) columns.model = body.model;
  if (body.name !== undefined) columns.name = body.name;
  if (body.description !== undefined) columns.description = body.description;
  if (body.instructions !== undefined) columns.instructions = body.instructions;
  if (body.tools !== undefined) columns.tools = body.tools;
  if (body.tool_resources !== undefined) columns.toolResources = body.tool_resources;
  if (body.metadata !== undefined) columns.metadata = body.metadata ?? {};
  if (body.temperature !== undefined) columns.temperature = body.temperature;
  if (body.top_p !== undefined) columns.topP = body.top_p;
  if (body.response_format !== undefined) columns.responseFormat = body.response_format;
  return columns;
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
    db,
    cursors: assistantCursors,
    scope: workspaceId,
    noun: 'assistant',
    select: (page) => assistantPage(db, page).all({ ...page.values, workspaceId }),
  });
}

const assistantCursors = cursorsOf(assistants, {
  seq: assistants.seq,
  id: assistants.id,
  scope: assistants.workspaceId,
});

const assistantPage = preparedQueries(
  (db, page: PageQuery) =>
    db
      .select()
      .from(assistants)
      .where(and(eq(assistants.workspaceId, sql.placeholder('workspaceId')), isNull(assistants.deletedAt), page.where))
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page) => page.shape,
);

/**
 * Changes the fields sent, in one statement (with `extra`, made only while assistantLive holds, in
 * the same transaction); 404 as getAssistant. Nothing counts against the workspace's cap (the
 * assistant is already one of its assistants), and the fields were checked against the same
 * bounds as a create.
 */
export async function updateAssistant(
  db: Db,
  workspaceId: string,
  id: string,
  fields: AssistantFields,
  extra: BuiltStatement[] = [],
): Promise<AssistantRow> {
  const columns = columnsOf(fields);
  if (Object.keys(columns).length === 0) return getAssistant(db, workspaceId, id);
  const update = db
    .update(assistants)
    .set(columns)
    .where(and(eq(assistants.id, id), live(workspaceId)))
    .returning();
  const [row] = extra.length > 0 ? (await db.batch([update, ...extra]))[0] : await update;
  if (!row) throw notFound(id);
  return row;
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
