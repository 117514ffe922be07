import { and, asc, desc, eq, getTableColumns, inArray, sql } from 'drizzle-orm';
import type { Db, RawCondition, RawStatement } from '../../db/client';
import { containerFiles, containers, files, messages, runs, runSteps } from '../../db/schema';
import { ApiError } from '../../errors';
import { findThread, type MessageRow, type ThreadKey, type ThreadRow } from '../threads/queries';
import type { ItemStep } from './wire';

/**
 * A conversation's reads and writes that the threads' own queries do not make: the thread under
 * its own 404, its tool calls found by call id, the light rows that order its items, its items'
 * rows with the files their citations name, and the outputs filled into earlier tool steps.
 */

export const conversationNotFound = (id: string) =>
  new ApiError('conversation_not_found', `No conversation found with id '${id}'.`);

/** The conversation `id` (a thread, whatever its prefix) of the workspace; 404 otherwise. */
export async function getConversation(db: Db, workspaceId: string, id: string): Promise<ThreadRow> {
  const thread = await findThread(db, workspaceId, id);
  if (!thread) throw conversationNotFound(id);
  return thread;
}

/** A tool call of one of the thread's runs, where it is and whether it can still take an output. */
export interface ThreadCall {
  callId: string;
  stepId: string;
  /** Its index in its step's tool_calls. */
  index: number;
  type: 'function' | 'file_search';
  /** A function call of a completed step without an output yet: what a function_call_output may fill. */
  open: boolean;
}

/** The calls of the thread's runs whose ids are among `callIds` (read from the steps' JSON, not the whole steps). */
export async function threadCalls(db: Db, thread: ThreadKey, callIds: readonly string[]): Promise<ThreadCall[]> {
  if (callIds.length === 0) return [];
  const rows = await db.all<{ callId: string; stepId: string; idx: number; type: string; open: number }>(sql`
    SELECT json_extract(call.value, '$.id') AS callId, ${runSteps.id} AS stepId, call.key AS idx,
      json_extract(call.value, '$.type') AS type,
      (${runSteps.status} = 'completed' AND json_extract(call.value, '$.type') = 'function'
        AND json_extract(call.value, '$.function.output') IS NULL) AS open
    FROM ${runSteps} INNER JOIN ${runs} ON ${runs.id} = ${runSteps.runId},
      json_each(${runSteps.stepDetails}, '$.tool_calls') AS call
    WHERE ${runs.threadId} = ${thread.id} AND ${runs.workspaceId} = ${thread.workspaceId}
      AND ${runSteps.type} = 'tool_calls'
      AND json_extract(call.value, '$.id') IN (SELECT value FROM json_each(${JSON.stringify(callIds)}))`);
  return rows.map((row) => ({
    callId: row.callId,
    stepId: row.stepId,
    index: row.idx,
    type: row.type === 'file_search' ? 'file_search' : 'function',
    open: row.open === 1,
  }));
}

/** An output to write into the function call `index` of the step `stepId`. */
export interface CallOutput {
  stepId: string;
  index: number;
  callId: string;
  output: string;
}

/**
 * The writes of `outputs`, for one batch: each fills its call's output only while it has none (a
 * concurrent fill keeps the first), and only while `condition` holds (a conversation's items:
 * while no run holds the thread).
 */
export function outputStatements(outputs: readonly CallOutput[], condition?: RawCondition): RawStatement[] {
  return outputs.map((output) => {
    const call = `$.tool_calls[${output.index}]`;
    return {
      sql:
        `UPDATE "run_steps" SET "step_details" = json_set("step_details", ?, ?) WHERE "id" = ? ` +
        `AND json_extract("step_details", ?) = ? AND json_extract("step_details", ?) IS NULL` +
        (condition ? ` AND ${condition.sql}` : ''),
      args: [
        `${call}.function.output`,
        output.output,
        output.stepId,
        `${call}.id`,
        output.callId,
        `${call}.function.output`,
        ...(condition?.args ?? []),
      ],
    };
  });
}

/** A message as the order of a conversation's items needs it. */
export interface OrderMessage {
  id: string;
  createdAt: number;
}

/**
 * A step as the order of a conversation's items needs it: which message it created, or its calls'
 * types and whether each has an output, read from its JSON without the arguments and outputs.
 */
export interface OrderStep {
  id: string;
  runId: string;
  runCreatedAt: number;
  status: string;
  messageId: string | null;
  /** Per call: its type and whether it has an output. */
  calls: [type: string, hasOutput: number][];
  /** Whether the model's reasoning before the step was kept (1) or not (0). */
  reasoning: number;
}

/** The thread's messages and its runs' steps, light, in their orders (threads/timeline.ts places them). */
export async function itemOrderRows(
  db: Db,
  thread: ThreadKey,
): Promise<{ messages: OrderMessage[]; steps: OrderStep[] }> {
  const [messageRows, stepRows] = await Promise.all([
    db
      .select({ id: messages.id, createdAt: messages.createdAt })
      .from(messages)
      .where(and(eq(messages.threadId, thread.id), eq(messages.workspaceId, thread.workspaceId)))
      .orderBy(asc(messages.seq)),
    db
      .select({
        id: runSteps.id,
        runId: runSteps.runId,
        runCreatedAt: runs.createdAt,
        status: runSteps.status,
        messageId: sql<string | null>`json_extract(${runSteps.stepDetails}, '$.message_creation.message_id')`,
        calls: sql<string | null>`(SELECT json_group_array(json_array(json_extract(call.value, '$.type'),
          json_extract(call.value, '$.function.output') IS NOT NULL))
          FROM json_each(${runSteps.stepDetails}, '$.tool_calls') AS call)`,
        reasoning: sql<number>`${runSteps.reasoning} IS NOT NULL`,
      })
      .from(runSteps)
      .innerJoin(runs, eq(runs.id, runSteps.runId))
      .where(and(eq(runs.threadId, thread.id), eq(runs.workspaceId, thread.workspaceId)))
      .orderBy(asc(runs.seq), asc(runSteps.seq)),
  ]);
  return {
    messages: messageRows,
    steps: stepRows.map((row) => ({ ...row, calls: parseCalls(row.calls) })),
  };
}

function parseCalls(json: string | null): [string, number][] {
  if (json === null) return [];
  const parsed: unknown = JSON.parse(json);
  if (!Array.isArray(parsed)) return [];
  return parsed.map((call): [string, number] =>
    Array.isArray(call) ? [String(call[0]), Number(call[1])] : ['function', 0],
  );
}

/**
 * The rows of items, whole: theirs, by id; or, read before the page is known, the `first` n of each
 * in `order`, from `after` (the item a page goes on after: its message's, or its step's) when given.
 */
export type ItemRowsWanted =
  | { messageIds: string[]; stepIds: string[] }
  | { first: number; order: 'asc' | 'desc'; after?: { messageId: string } | { stepId: string } };

/**
 * Items' rows, whole, and what their messages' citations show of the files they cite: each file's
 * name, and the container of a file the code wrote (file id → name, file id → container id).
 */
export interface ItemRows {
  messages: Map<string, MessageRow>;
  steps: Map<string, ItemStep>;
  fileNames: Map<string, string>;
  containers: Map<string, string>;
}

/**
 * The files a message's text cites (a file_citation: a search's citation) or links (a file_path: a
 * file the code wrote), as wire.ts's annotatedFileId finds them, each with its name among the
 * workspace's files and the container it was last written in: a JSON array of [id, name or null,
 * container or null], read in the same statement as the message (parsed by addCitedFiles), so that a
 * page of items needs no read after its rows.
 */
const citedFilesColumn = sql<string>`(SELECT json_group_array(json_array(cited.id,
    (SELECT file.filename FROM ${files} AS file
      WHERE file.workspace_id = ${messages}.workspace_id AND file.id = cited.id),
    (SELECT placed.container_id FROM ${containerFiles} AS placed
      JOIN ${containers} AS container ON container.id = placed.container_id
      WHERE container.workspace_id = ${messages}.workspace_id AND placed.file_id = cited.id
      ORDER BY placed.seq DESC LIMIT 1)))
  FROM (SELECT DISTINCT CASE
      WHEN annotation.value ->> 'type' = 'file_citation' AND json_type(annotation.value, '$.file_citation.file_id') = 'text'
        THEN annotation.value ->> '$.file_citation.file_id'
      WHEN annotation.value ->> 'type' = 'file_path' AND json_type(annotation.value, '$.file_path.file_id') = 'text'
        THEN annotation.value ->> '$.file_path.file_id' END AS id
    FROM json_each(${messages}.content) AS part, json_each(part.value, '$.text.annotations') AS annotation
    WHERE part.type = 'object' AND part.value ->> 'type' = 'text' AND annotation.type = 'object') AS cited
  WHERE cited.id IS NOT NULL)`;

/** A message as itemRows reads it: its row, and its citedFilesColumn. */
const messageColumns = { ...getTableColumns(messages), citedFiles: citedFilesColumn };

/** Adds what `citedFiles` (citedFilesColumn's JSON) says to `rows`' names and containers. */
function addCitedFiles(rows: ItemRows, citedFiles: string): void {
  for (const [id, name, container] of JSON.parse(citedFiles) as [string, string | null, string | null][]) {
    if (name !== null) rows.fileNames.set(id, name);
    if (container !== null) rows.containers.set(id, container);
  }
}

/** The messages and steps of the thread that `wanted` names, whole, with what their citations show. */
export async function itemRows(db: Db, thread: ThreadKey, wanted: ItemRowsWanted): Promise<ItemRows> {
  const threadMessages = and(eq(messages.threadId, thread.id), eq(messages.workspaceId, thread.workspaceId));
  const stepColumns = {
    id: runSteps.id,
    status: runSteps.status,
    stepDetails: runSteps.stepDetails,
    reasoning: runSteps.reasoning,
  };
  let reads: [Promise<(MessageRow & { citedFiles: string })[]>, Promise<ItemStep[]>];
  if ('messageIds' in wanted) {
    reads = [
      wanted.messageIds.length === 0
        ? Promise.resolve([])
        : db
            .select(messageColumns)
            .from(messages)
            .where(and(threadMessages, inArray(messages.id, wanted.messageIds))),
      wanted.stepIds.length === 0
        ? Promise.resolve([])
        : db
            .select(stepColumns)
            .from(runSteps)
            .where(
              and(
                eq(runSteps.threadId, thread.id),
                eq(runSteps.workspaceId, thread.workspaceId),
                inArray(runSteps.id, wanted.stepIds),
              ),
            ),
    ];
  } else {
    const { order, after } = wanted;
    const direction = order === 'asc' ? asc : desc;
    const from = after && pageFrom(after, order);
    reads = [
      db
        .select(messageColumns)
        .from(messages)
        .where(and(threadMessages, from?.messages))
        .orderBy(direction(messages.seq))
        .limit(wanted.first),
      db
        .select(stepColumns)
        .from(runSteps)
        .innerJoin(runs, eq(runs.id, runSteps.runId))
        .where(and(eq(runs.threadId, thread.id), eq(runs.workspaceId, thread.workspaceId), from?.steps))
        .orderBy(direction(runs.seq), direction(runSteps.seq))
        // After a step's item, its own step may be among them: one more.
        .limit(after ? wanted.first + 1 : wanted.first),
    ];
  }
  const [messageRows, stepRows] = await Promise.all(reads);
  const rows: ItemRows = {
    messages: new Map(),
    steps: new Map(stepRows.map((row) => [row.id, row])),
    fileNames: new Map(),
    containers: new Map(),
  };
  for (const { citedFiles, ...message } of messageRows) {
    rows.messages.set(message.id, message);
    addCitedFiles(rows, citedFiles);
  }
  return rows;
}

/**
 * Where the rows a page after an item holds are likely to start, in `order`: the messages after
 * its own (by the thread's order), or, after a step's item, from its step's time; the steps from
 * the time of its message or step. Only a guess at what the page will name (a run's tool steps
 * are placed by its messages, not by time: timeline.ts): what it names beyond is read after.
 */
function pageFrom(after: { messageId: string } | { stepId: string }, order: 'asc' | 'desc') {
  const later = order === 'asc';
  const at =
    'messageId' in after
      ? sql`(SELECT ${messages.createdAt} FROM ${messages} WHERE ${messages.id} = ${after.messageId})`
      : sql`(SELECT ${runSteps.createdAt} FROM ${runSteps} WHERE ${runSteps.id} = ${after.stepId})`;
  const messagesFrom =
    'messageId' in after
      ? sql`${messages.seq} ${later ? sql`>` : sql`<`} (SELECT ${messages.seq} FROM ${messages} WHERE ${messages.id} = ${after.messageId})`
      : sql`${messages.createdAt} ${later ? sql`>=` : sql`<=`} ${at}`;
  return { messages: messagesFrom, steps: sql`${runSteps.createdAt} ${later ? sql`>=` : sql`<=`} ${at}` };
}

/** Forgets the model's reasoning before the step `stepId` of the thread (its reasoning item deleted). */
export async function forgetReasoning(db: Db, thread: ThreadRow, stepId: string): Promise<void> {
  await db
    .update(runSteps)
    .set({ reasoning: null })
    .where(
      and(eq(runSteps.id, stepId), eq(runSteps.threadId, thread.id), eq(runSteps.workspaceId, thread.workspaceId)),
    );
}
