import { and, eq, sql, type SQL } from 'drizzle-orm';
import { preparedQueries, preparedQuery, type Db } from '../../db/client';
import { cursorPage, cursorsOf, type PageQuery } from '../../db/pagination';
import { storedChatCompletions, type StoredChatCompletionRow } from '../../db/schema';
import { ApiError } from '../../errors';
import type { ListStoredCompletionsQuery } from './schemas';

/**
 * Stored chat completions (`store: true`), scoped to a workspace: one of another workspace is not
 * found, as one never stored is.
 */

export type NewStoredCompletion = typeof storedChatCompletions.$inferInsert;

/**
 * Writes a stored completion unless its workspace already holds one of that id, which it leaves as
 * it is; whether it was written.
 */
export async function insertStoredCompletion(db: Db, row: NewStoredCompletion): Promise<boolean> {
  const written = await db
    .insert(storedChatCompletions)
    .values(row)
    .onConflictDoNothing()
    .returning({ seq: storedChatCompletions.seq });
  return written.length > 0;
}

// A 404 as the other resources' (assistants' and threads'), with a null param.
const notFound = (id: string) => new ApiError('chat_completion_not_found', `No chat completion found with id '${id}'.`);

const ofWorkspace = (workspaceId: string, id: string) =>
  and(eq(storedChatCompletions.workspaceId, workspaceId), eq(storedChatCompletions.id, id));

const byId = preparedQuery((db) =>
  db
    .select()
    .from(storedChatCompletions)
    .where(
      and(
        eq(storedChatCompletions.workspaceId, sql.placeholder('workspaceId')),
        eq(storedChatCompletions.id, sql.placeholder('id')),
      ),
    )
    .limit(1)
    .prepare(),
);

/** The workspace's stored completion; 404 `chat_completion_not_found` when it has none of that id. */
export async function getStoredCompletion(db: Db, workspaceId: string, id: string): Promise<StoredChatCompletionRow> {
  const [row] = await byId(db).all({ workspaceId, id });
  if (!row) throw notFound(id);
  return row;
}

/** Replaces its metadata; 404 as getStoredCompletion. */
export async function updateStoredCompletion(
  db: Db,
  workspaceId: string,
  id: string,
  metadata: Record<string, string>,
): Promise<StoredChatCompletionRow> {
  const [row] = await db
    .update(storedChatCompletions)
    .set({ metadata })
    .where(ofWorkspace(workspaceId, id))
    .returning();
  if (!row) throw notFound(id);
  return row;
}

/** Deletes it, its messages with it (they are its row's); 404 as getStoredCompletion. */
export async function deleteStoredCompletion(db: Db, workspaceId: string, id: string): Promise<void> {
  const deleted = await db
    .delete(storedChatCompletions)
    .where(ofWorkspace(workspaceId, id))
    .returning({ seq: storedChatCompletions.seq });
  if (deleted.length === 0) throw notFound(id);
}

/**
 * One page of the workspace's stored completions (see cursorPage), of the `model` and with every
 * metadata pair asked for. Prepared once per shape: the order, the cursor, whether a model is
 * asked for and how many pairs.
 */
export function listStoredCompletions(db: Db, workspaceId: string, query: ListStoredCompletionsQuery) {
  const pairs = Object.entries(query.metadata);
  const filters = {
    workspaceId,
    model: query.model,
    ...Object.fromEntries(
      pairs.flatMap(([key, value], i) => [
        [`key${i}`, key],
        [`value${i}`, value],
      ]),
    ),
  };
  return cursorPage(query, {
    db,
    cursors: completionCursors,
    scope: workspaceId,
    noun: 'chat completion',
    select: (page) =>
      completionPage(db, page, query.model !== undefined, pairs.length).all({ ...page.values, ...filters }),
  });
}

const completionCursors = cursorsOf(storedChatCompletions, {
  seq: storedChatCompletions.seq,
  id: storedChatCompletions.id,
  scope: storedChatCompletions.workspaceId,
});

/** Holds for a row whose metadata has the pair of placeholders `key<i>` and `value<i>`. */
const hasPair = (i: number): SQL =>
  sql`EXISTS (SELECT 1 FROM json_each(${storedChatCompletions.metadata}) WHERE key = ${sql.placeholder(`key${i}`)} AND value = ${sql.placeholder(`value${i}`)})`;

const completionPage = preparedQueries(
  (db, page: PageQuery, byModel: boolean, pairs: number) =>
    db
      .select()
      .from(storedChatCompletions)
      .where(
        and(
          eq(storedChatCompletions.workspaceId, sql.placeholder('workspaceId')),
          byModel ? eq(storedChatCompletions.model, sql.placeholder('model')) : undefined,
          ...Array.from({ length: pairs }, (_, i) => hasPair(i)),
          page.where,
        ),
      )
      .orderBy(page.orderBy)
      .limit(page.limit)
      .prepare(),
  (page, byModel, pairs) => `${page.shape} ${byModel ? 'model' : ''} ${pairs}`,
);
