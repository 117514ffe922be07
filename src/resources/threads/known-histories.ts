import type { Db, RawStatement, RawValue } from '../../db/client';
import { TERMINAL_STATUSES } from '../../db/run-statuses';
import type { History, HistoryStep, ResponseRow, RunRow } from '../../db/schema';
import { historyThreadIds } from './history';
import type { MessageRow, ThreadKey } from './queries';

/**
 * What this process or isolate knows of the threads it wrote: their messages, as its own writes
 * made them (a thread or conversation created with its messages, a message or item added) and as
 * its runs answered them (the messages a run wrote, handed back from where it settled: `ran`), with
 * the steps a prompt places among them (the tool calls of its runs: the gateway's tools answered
 * in a run's rounds, or a response's calls of the client's functions, their outputs filled in by
 * the response after it). A run builds its prompt from them before anything
 * is read, so that the provider's call starts beside the run's write instead of after it
 * (runs/commands.ts, runInOneTrip); the write carries a guard (`historyGuard`) that fails it,
 * writing nothing, unless the thread still has exactly what the prompt was built from. A
 * response's chain is known the same way, by the id of the response it ends at (knownHistoryKey):
 * the messages and steps a response going on from it by previous_response_id reads, which
 * `chainGuard` checks (resources/responses/commands.ts).
 * What is known is only ever a guess that the database confirms: a message another process added
 * or deleted, a run another made that wrote a message or called tools, or an output it gave a call,
 * fails the guard, and the run is made from what it reads instead.
 *
 * Bounded: at most MAX_THREADS threads of at most MAX_MESSAGES messages and MAX_BYTES bytes of
 * content and steps each, MAX_TOTAL_BYTES in all, the least recently written forgotten first; a
 * thread past a bound is forgotten (a long chat's runs read their history again: a history read
 * would keep its newest messages only, which the guard does not follow).
 * Kept per database client (one per process, or per isolate on Workers), as prepared queries are.
 */
export class KnownHistories {
  /** In least-recently-written order: a write moves its thread to the end. */
  readonly #threads = new Map<string, Known>();
  /** The bytes of content and steps of every thread known. */
  #bytes = 0;

  /** A thread just created with `messages`, or one they were added to while its history was known. */
  wrote(thread: ThreadKey, messages: MessageRow[], created: boolean): void {
    const known = this.#threads.get(thread.id);
    this.forget(thread.id);
    if (created) this.#keep(thread, { messages, steps: [], unconfirmed: [] });
    // While a run answers, no message is added (the thread is held): one that was, was not seen.
    else if (known && known.workspaceId === thread.workspaceId && !known.answering)
      this.#keep(thread, { ...known, messages: [...known.messages, ...messages] });
  }

  /**
   * A run on the thread being made (its write under way or committed) with a prompt built from
   * `history`, all of it the database's once it commits (its guard names it, or it was read) and
   * all of the thread's: the thread is the run's to answer, and what it answers (`ran`) extends its
   * history. Whatever is written to the thread meanwhile forgets it; so does `ran` with null,
   * which a run not made is told.
   */
  answering(thread: ThreadKey, history: History): Answering {
    const answering: Answering = { thread, history: { messages: history.messages, steps: placedSteps(history.steps) } };
    this.forget(thread.id);
    this.#keep(thread, { ...answering.history, unconfirmed: [], answering });
    return answering;
  }

  /**
   * The run of `answering` completed with `answer`, what it wrote, as it handed it back (deps.ts,
   * Answered), whose messages the next run's guard checks against the database's (`unconfirmed`);
   * null: it ended otherwise (failed, cancelled, incomplete, waiting for tool outputs, its answer
   * or calls past MAX_BYTES, or it was not made), and the thread is forgotten.
   */
  ran(answering: Answering, answer: History | null): void {
    const known = this.#threads.get(answering.thread.id);
    if (known?.answering !== answering) return;
    this.forget(answering.thread.id);
    if (!answer) return;
    const { messages, steps } = answering.history;
    this.#keep(answering.thread, {
      messages: [...messages, ...answer.messages],
      // The answer's message creations are kept where its run called tools, in this turn or before its outputs.
      steps: placedSteps([...steps, ...answer.steps]),
      unconfirmed: answer.messages,
    });
  }

  /** Keeps the thread's history, last written, within the bounds; past one it is forgotten. */
  #keep(thread: ThreadKey, what: Pick<Known, 'messages' | 'steps' | 'unconfirmed' | 'answering'>): void {
    const bytes =
      what.messages.reduce((sum, row) => sum + contentBytes(row), 0) +
      what.steps.reduce((sum, step) => sum + detailsBytes(step), 0);
    if (what.messages.length > MAX_MESSAGES || bytes > MAX_BYTES) return;
    this.#threads.set(thread.id, {
      workspaceId: thread.workspaceId,
      bytes,
      messages: what.messages,
      steps: what.steps,
      unconfirmed: what.unconfirmed,
      answering: what.answering,
    });
    this.#bytes += bytes;
    for (const oldest of this.#threads.keys()) {
      if (this.#threads.size <= MAX_THREADS && this.#bytes <= MAX_TOTAL_BYTES) break;
      this.forget(oldest);
    }
  }

  /** Forgets the thread (deleted). A message deleted is not told here: the guard finds it. */
  forget(threadId: string): void {
    const known = this.#threads.get(threadId);
    if (!known) return;
    this.#threads.delete(threadId);
    this.#bytes -= known.bytes;
  }

  /**
   * The thread's history as known, for the run about to be made on it, which the run's write
   * guards; forgotten here, since after the run (made or not) it is not the thread's history any
   * more. Null when it is not known, or is more than `maxBytes` (a history read would keep only
   * the newest of it). Another workspace's id is left as it is: its run is refused (404) from
   * what it reads, and its owner's next turn is still made from what is known.
   */
  take(thread: ThreadKey, maxBytes: number): KnownHistory | null {
    const known = this.#threads.get(thread.id);
    if (!known || known.workspaceId !== thread.workspaceId) return null;
    this.forget(thread.id);
    // A thread a run answers has that run open: the run made on it is refused, from what is read.
    if (known.answering || known.bytes >= maxBytes) return null;
    return { id: thread.id, messages: known.messages, steps: known.steps, unconfirmed: known.unconfirmed };
  }
}

/** What is known of a thread. */
interface Known extends History {
  workspaceId: string;
  /** Those of `messages` a run handed back, not yet confirmed by a guard: their content is checked as well. */
  unconfirmed: MessageRow[];
  /** The run that answers the thread now, when one does: `messages` and `steps` are its prompt's. */
  answering?: Answering;
  bytes: number;
}

/**
 * A history as known (its messages, and the steps a prompt places among them: placedSteps), and
 * whose: a thread's, or a response's chain's (knownHistoryKey).
 */
export interface KnownHistory extends History {
  /** The thread's id, or the response's its chain ends at. */
  id: string;
  /** Those of `messages` the database has not confirmed as they are known (handed back by a run). */
  unconfirmed: MessageRow[];
}

/** A run answering a thread whose history was known (KnownHistories.answering). */
export interface Answering {
  thread: ThreadKey;
  /** Its prompt's history, the steps placedSteps keeps of it. */
  history: History;
}

/** At most this many threads are known at once. */
export const MAX_THREADS = 1024;
/** A thread with more messages than this is not known. */
export const MAX_MESSAGES = 32;
/** A thread whose messages' content and steps are more bytes than this (stored as JSON) is not known. */
export const MAX_BYTES = 16 * 1024;
/** At most this many bytes of content and steps are known at once, across threads. */
export const MAX_TOTAL_BYTES = 1024 * 1024;

const encoder = new TextEncoder();
/** Each message's or step's bytes, measured once: a thread's history is kept again at each turn. */
const measured = new WeakMap<object, number>();
/** The bytes of `json` as stored, measured once for `of`. */
function storedBytes(of: object, json: unknown): number {
  let bytes = measured.get(of);
  if (bytes === undefined) measured.set(of, (bytes = encoder.encode(JSON.stringify(json)).length));
  return bytes;
}
/** The bytes of a message's content as stored (its JSON): what a history read's bound counts. */
const contentBytes = (message: MessageRow): number => storedBytes(message, message.content);
/** The bytes of a step's details as stored (its JSON): what a history read's bound of steps counts. */
const detailsBytes = (step: HistoryStep): number => storedBytes(step, step.stepDetails);

/** A completed tool-calls step: what a prompt shows of a run's calls (prompt.ts, historyUnits). */
const completedCalls = (step: HistoryStep): boolean => step.type === 'tool_calls' && step.status === 'completed';

/**
 * Of a history's steps, those a prompt places among its messages: each completed tool-calls step,
 * and the message creations of its run, which say where it goes (threads/timeline.ts). A run that
 * called no tool needs none of its steps: its messages are in their order.
 */
function placedSteps(steps: HistoryStep[]): HistoryStep[] {
  const calling = new Set(steps.filter(completedCalls).map((step) => step.runId));
  return steps.filter(
    (step) => calling.has(step.runId) && (step.type === 'message_creation' || step.status === 'completed'),
  );
}

/**
 * What a history is known by: its run's thread; for a response on a thread of its own, the
 * response, since the next response goes on from it by previous_response_id, on a thread of its
 * own too, reading the chain (threads/history.ts). Null for a response not kept (`store: false`),
 * which nothing goes on from.
 */
export function knownHistoryKey(
  run: Pick<RunRow, 'id' | 'threadId' | 'workspaceId'>,
  response?: Pick<ResponseRow, 'conversationId' | 'stored'>,
): ThreadKey | null {
  if (!response || response.conversationId !== null) return { id: run.threadId, workspaceId: run.workspaceId };
  return response.stored ? { id: run.id, workspaceId: run.workspaceId } : null;
}

/**
 * A statement to ride with a run's write that fails its transaction, writing nothing, unless the
 * thread has what a prompt built from its history read would be built from (runs/execution/prompt.ts,
 * threads/history.ts): exactly the known messages, in their order, those a run handed back with
 * the content known; and exactly the known steps of its runs that a prompt shows (completed tool
 * calls), their functions' outputs as known, whatever other runs it had. It fails as the settings guard does (it inserts a second row with
 * settings_generation's one id: isUniqueViolation(error, GENERATION_MOVED)), since either means that
 * the run is made again from what is read.
 */
export function historyGuard(known: KnownHistory): RawStatement {
  return failsUnlessKnown(known, { threads: '= ?', threadArgs: [known.id] });
}

/**
 * historyGuard for a response's chain (`known.id`, the response the new one goes on from, on its
 * own new thread `thread`, which the guard precedes): the messages and runs of the threads the
 * history read of that response would read (chainThreads). A response of the chain deleted takes
 * its thread's messages out of them, and that response's own are among the known (a chain is
 * known only from a response that answered): so it fails then too, and the path of reads answers
 * 404.
 */
export function chainGuard(known: KnownHistory, thread: ThreadKey): RawStatement {
  return failsUnlessKnown(known, chainThreads(known.id, thread));
}

/**
 * The guard of a response on a chain not known here (`previousId`, on its own new thread
 * `thread`), whose history its write's transaction reads (readHistory beside the write:
 * batchWithReads): it fails the write unless the response could go on from what is read as a
 * response made from its reads would (resources/responses/commands.ts, previousThread): the
 * previous response is the workspace's, kept (`store` not false), ended, and on a thread that
 * exists; and no function call of the chain's threads is still without its output (the path of
 * reads refuses a text-only input then: responses/commands.ts, answered). The calls that have
 * their outputs are in what is read, and in the prompt built from it (runs/commands.ts,
 * hostAfterWrite). Either way nothing is written, and the response is made from its reads, with
 * their answer.
 */
export function chainReadGuard(previousId: string, thread: ThreadKey): RawStatement {
  const threads = chainThreads(previousId, thread);
  const statuses = TERMINAL_STATUSES.map(() => '?').join(', ');
  return failsWhen(
    `${unansweredCallsAmong(threads.threads)} or not exists (select 1 from "responses" ` +
      'join "runs" on "runs"."id" = "responses"."id" join "threads" on "threads"."id" = "responses"."thread_id" ' +
      'where "responses"."id" = ? and "responses"."workspace_id" = ? and "responses"."stored" = 1 ' +
      `and "runs"."status" in (${statuses}))`,
    [...threads.threadArgs, previousId, thread.workspaceId, ...TERMINAL_STATUSES],
    threads,
  );
}

/**
 * The guard of a response in a conversation not known here (`threadId`, its thread), whose history
 * its write's transaction reads as chainReadGuard's does: it fails the write when a function call
 * of the thread is still without its output (refused by the path of reads). That the conversation
 * is the workspace's and no run holds it, the write's rows check themselves (runs/queries.ts,
 * insertRunWhileIdle).
 */
export function conversationReadGuard(threadId: string): RawStatement {
  return failsWhen(unansweredCallsAmong('= ?'), [threadId]);
}

/**
 * Which threads a guard checks: `threads`, a condition on a thread id (its arguments `threadArgs`,
 * repeated at each use), which a `with` clause may define.
 */
interface GuardedThreads {
  with?: string;
  withArgs?: RawValue[];
  threads: string;
  threadArgs: RawValue[];
}

/**
 * The threads a response's history reads, going on from `previousId` on its new thread `thread`:
 * named by the read's own walk of the chain (threads/history.ts, historyThreadIds), the threads of
 * the responses back from it within the workspace, so that a guard checks what a read would read.
 */
function chainThreads(previousId: string, thread: ThreadKey): GuardedThreads {
  const ids = historyThreadIds({
    workspaceId: thread.workspaceId,
    threadId: thread.id,
    runId: null,
    chain: { previousResponseId: previousId },
  });
  return {
    with: `with "chained"("id") as (${ids.sql}) `,
    withArgs: ids.args,
    threads: 'in (select "id" from "chained")',
    threadArgs: [],
  };
}

/**
 * A completed step of a run of the threads calls a function without its output: what the path of
 * reads refuses a response whose input gives none (responses/commands.ts, answered). A call's
 * output missing from its JSON counts as none, as does a null one.
 */
const unansweredCallsAmong = (threads: string) =>
  `exists (select 1 ${toolStepsAmong(threads, `join json_each("run_steps"."step_details", '$.tool_calls') as "call" `)} ` +
  `and json_extract("call"."value", '$.type') = 'function' and json_extract("call"."value", '$.function.output') is null)`;

/** The ids of the threads' completed tool-call steps, as a JSON array, in the order a history read gives them. */
const toolStepIdsAmong = (threads: string) =>
  `coalesce((select json_group_array("id") from (select "run_steps"."id" as "id" ${toolStepsAmong(threads)} ` +
  'order by "runs"."seq", "run_steps"."seq")), \'[]\')';

/**
 * The completed tool-call steps of the runs of the threads, the steps a prompt shows of their
 * calls: a from clause and its condition, the steps joined with `join`, for more conditions after.
 */
const toolStepsAmong = (threads: string, join = '') =>
  `from "runs" join "run_steps" on "run_steps"."run_id" = "runs"."id" ${join}` +
  `where "runs"."thread_id" ${threads} and "run_steps"."type" = 'tool_calls' and "run_steps"."status" = 'completed'`;

/**
 * historyGuard's and chainGuard's: fails unless the threads have exactly the known messages and
 * completed tool-call steps, and each function call of those steps the output known (none, or the
 * one given: a call's output is only ever filled once, where it had none).
 */
function failsUnlessKnown(known: KnownHistory, history: GuardedThreads): RawStatement {
  const ids = known.messages.map((message) => message.id);
  const contents = known.unconfirmed.flatMap((message) => [message.id, JSON.stringify(message.content)]);
  const toolSteps = known.steps.filter(completedCalls);
  const outputs = toolSteps.flatMap(({ id, stepDetails }) =>
    stepDetails.type !== 'tool_calls'
      ? []
      : stepDetails.tool_calls.flatMap((call, index) =>
          call.type === 'function' ? [`$.tool_calls[${index}].function.output`, id, call.function.output] : [],
        ),
  );
  const { threads, threadArgs } = history;
  return failsWhen(
    `${toolStepIdsAmong(threads)} is not ? or ` +
      `(select count(*) from "messages" where "thread_id" ${threads}) is not ? or ` +
      `coalesce((select json_group_array("id") from (select "id" from "messages" where "thread_id" ${threads} order by "seq")), '[]') is not ?` +
      ' or (select "content" from "messages" where "id" = ?) is not ?'.repeat(known.unconfirmed.length) +
      ' or (select json_extract("step_details", ?) from "run_steps" where "id" = ?) is not ?'.repeat(
        outputs.length / 3,
      ),
    [
      ...threadArgs,
      JSON.stringify(toolSteps.map((step) => step.id)),
      ...threadArgs,
      ids.length,
      ...threadArgs,
      JSON.stringify(ids),
      ...contents,
      ...outputs,
    ],
    history,
  );
}

/**
 * A statement that fails the transaction it rides in, writing nothing, when `condition` holds (its
 * arguments `args`; `within`'s `with` clause before it): as the settings' guard fails (it inserts a
 * second row with settings_generation's one id: isUniqueViolation(error, GENERATION_MOVED)), since
 * either means that the run is made again from what is read.
 */
function failsWhen(
  condition: string,
  args: RawValue[],
  within: Pick<GuardedThreads, 'with' | 'withArgs'> = {},
): RawStatement {
  return {
    sql:
      (within.with ?? '') +
      'insert into "settings_generation" ("id", "value") select "id", "value" from "settings_generation" where "id" = 0 and (' +
      condition +
      ')',
    args: [...(within.withArgs ?? []), ...args],
  };
}

const known = new WeakMap<Db, KnownHistories>();

/**
 * The known histories of the threads written through `db`; null on the embedded file, where a read
 * costs no round trip and no run guesses (its client carries no reads: ReadsCarrier), so that
 * nothing is measured or kept there.
 */
export function knownHistories(db: Db): KnownHistories | null {
  if (!db.$client.batchWithReads) return null;
  let histories = known.get(db);
  if (!histories) known.set(db, (histories = new KnownHistories()));
  return histories;
}
