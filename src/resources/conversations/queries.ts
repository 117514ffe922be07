import { and, asc, desc, eq, inArray, sql } from 'drizzle-orm';
import type { Db, RawCondition, RawStatement } from '../../db/client';
import { files, messages, runs, runSteps } from '../../db/schema';
import { ApiError } from '../../errors';
import { findThread, type MessageRow, type ThreadKey, type ThreadRow } from '../threads/queries';
import type { ItemStep } from './wire';

/**
 * A conversation's reads and writes that the threads' own queries do not make: the thread under
 * its own 404, its tool calls found by call id, the light rows that order its items, and the
 * outputs filled into earlier tool steps.
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

/** The messages and steps of the thread that `wanted` names, whole. */
export async function itemRows(
  db: Db,
  thread: ThreadKey,
  wanted: ItemRowsWanted,
): Promise<{ messages: Map<string, MessageRow>; steps: Map<string, ItemStep> }> {
  const threadMessages = and(eq(messages.threadId, thread.id), eq(messages.workspaceId, thread.workspaceId));
  const stepColumns = {
    id: runSteps.id,
    status: runSteps.status,
    stepDetails: runSteps.stepDetails,
    reasoning: runSteps.reasoning,
  };
  let reads: [Promise<MessageRow[]>, Promise<ItemStep[]>];
  if ('messageIds' in wanted) {
    reads = [
      wanted.messageIds.length === 0
        ? Promise.resolve([])
        : db
            .select()
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
        .select()
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
  return {
    messages: new Map<string, MessageRow>(messageRows.map((row) => [row.id, row])),
    steps: new Map(stepRows.map((row) => [row.id, row])),
  };
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

/** The names of the workspace's files among `ids`, for the citations of a page of items. */
export async function fileNames(db: Db, workspaceId: string, ids: readonly string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .select({ id: files.id, filename: files.filename })
    .from(files)
    .where(and(eq(files.workspaceId, workspaceId), inArray(files.id, [...ids])));
  return new Map(rows.map((row) => [row.id, row.filename]));
}
