import { eq } from 'drizzle-orm';
import type { Actor, RequestContext } from '../../actor';
import { insertStatement, type RawStatement } from '../../db/client';
import { newId } from '../../lib/ids';
import type { Deps } from '../../deps';
import type { Settings } from '../../db/settings-cache';
import {
  responses,
  type AssistantRow,
  type History,
  type HistoryStep,
  type ResponseRow,
  type RunRow,
} from '../../db/schema';
import type { ResponseFormat, ResponseOptions, Tool, ToolChoice, ToolResources } from '../../db/json-columns';
import { isTerminal } from '../../db/run-statuses';
import { ApiError, serverError } from '../../errors';
import { validationError } from '../../http/middleware/validate';
import type { CursorListQuery } from '../../http/schemas';
import {
  activeRunError,
  getRunById,
  insertRunOnThread,
  insertRunWhileIdle,
  insertThreadAndRun,
  insertThreadAndRunGuarded,
  listSteps,
  updateRun,
} from '../runs/queries';
import {
  blockingRun,
  hostAfterWrite,
  NO_HISTORY,
  speculate,
  startRun,
  type RunAnswer,
  type RunAnswerKind,
  type RunCommandDeps,
} from '../runs/commands';
import { admitBeforePrompt } from '../runs/admission';
import { newRun } from '../runs/execution/rows';
import { buildPrompt, promptLimits } from '../runs/execution/prompt';
import { reconcileRun } from '../runs/execution/recovery';
import { EventStream } from '../runs/execution/event-stream';
import { replayResponse } from './replay';
import type { RunSettings } from '../runs/execution/settings';
import { readHistory, type HistoryOf } from '../threads/history';
import {
  deleteIdleThread,
  getThread,
  openRunOf,
  type OpenRun,
  type ThreadKey,
  type ThreadRow,
} from '../threads/queries';
import {
  chainGuard,
  chainReadGuard,
  conversationReadGuard,
  historyGuard,
  knownHistories,
} from '../threads/known-histories';
import { newThread } from '../threads/rows';
import { checkToolResources } from '../vector-stores/tool-resources';
import type { ResponseObject } from './objects';
import { deleteResponseRow, getResponseRow, responseNotFound, responseThread, runMessages } from './queries';
import { ownContainer, runningContainer, userFiles } from '../containers/commands';
import { upsertContainerFile } from '../containers/queries';
import { checkSandbox } from '../runs/execution/settings';
import {
  responseCodeInterpreterTool,
  responseFileSearchTool,
  type ResponseCodeInterpreterTool,
  responseFunctionTool,
  type CreateResponseBody,
  type InputTokensBody,
  type TextFormat,
} from './schemas';
import { toResponseJson } from './wire';
import { runOutputItems, toolItemId } from '../conversations/wire';
import { textMessage, threadItemWrites, type ThreadItemWrites } from '../conversations/items';
import { getConversation, outputStatements, type CallOutput, type ThreadCall } from '../conversations/queries';
import { ITEM_INCLUDES, type InputItem } from '../conversations/schemas';

/**
 * The Responses API's use-cases. A response is a run (resources/runs/): it is validated, admitted,
 * written and handed to the run host as a run is (runs/commands.ts startRun), on a thread:
 *
 *   conversation ─> the conversation's thread (a conversation is a thread)
 *   otherwise    ─> a thread of its own, holding its input and output; previous_response_id makes
 *                   its history go back through the threads of the responses before it
 *                   (threads/history.ts)
 *
 * Its function calls end it (completed: runs/execution/engine.ts); the next response's
 * function_call_output items fill the outputs in the step that made them.
 */

export type ResponseCommandDeps = RunCommandDeps & Pick<Deps, 'slices' | 'libraries'>;

/** A response just created: its event stream, or the response (finished, or queued in the background). */
export type ResponseAnswer =
  | { stream: true; events: ReadableStream<Uint8Array>; headers: Record<string, string> }
  | { stream: false; response: ResponseObject; headers: Record<string, string> };

/** POST /v1/responses. */
export async function createResponse(
  deps: ResponseCommandDeps,
  actor: Actor,
  snapshot: Settings,
  body: CreateResponseBody,
  context: RequestContext,
): Promise<ResponseAnswer> {
  const stored = body.store !== false;
  if (body.background === true && !stored) {
    throw new ApiError('invalid_value', 'A background response must be stored: background requires store to be true.', {
      param: 'background',
    });
  }
  const request = { actor, snapshot, body, context, at: deps.now() };
  const { row, thread, answer } = (await responseInOneTrip(deps, request)) ?? (await responseFromReads(deps, request));
  // Kept out of the store: what the response wrote goes once it ended (once its stream did).
  const forget = () => forgetResponse(deps, row, thread);
  if (answer.stream) {
    const events = stored ? answer.events : answer.events.pipeThrough(afterEnd(forget, context));
    return { stream: true, events, headers: answer.headers };
  }
  const response = await responseJson(deps, row);
  if (!stored) await forget();
  return { stream: false, response, headers: answer.headers };
}

/** A response to create, as its request gave it, with the settings it started on and when it is made. */
interface CreateRequest {
  actor: Actor;
  snapshot: Settings;
  body: CreateResponseBody;
  context: RequestContext;
  at: number;
}

/** A response handed to its host: its row, its thread and how it is answered. */
interface StartedResponse {
  row: ResponseRow;
  thread: ThreadKey;
  answer: RunAnswer;
}

/**
 * The settings a response is made on from its reads: those the request started on once they are
 * confirmed (the generation read, and the key again if it moved: ProvisionalSettings), 401 if its
 * key is no longer live.
 */
async function confirmedSettings(snapshot: Settings): Promise<Settings> {
  const settings = await snapshot.confirmed();
  if (!settings) throw new ApiError('invalid_api_key');
  return settings;
}

/** A response made as a run, from what it reads: its plan (its history, its context), its rows written, then its host. */
async function responseFromReads(deps: ResponseCommandDeps, request: CreateRequest): Promise<StartedResponse> {
  const { actor, snapshot, body, context, at } = request;
  // Its stored context is read beside the settings' generation (one round trip to a database
  // server), and looked at once the settings are confirmed.
  const reads = contextReads(deps, actor.workspaceId, body, at);
  const settings = await confirmedSettings(snapshot);
  const plan = await planResponse(deps, actor, settings, body, reads, at);
  const { thread, history, input } = plan;
  const containerId = plan.code ? await responseContainer(deps, actor.workspaceId, plan.code, plan) : null;
  const row = responseRow(actor, body, plan, at, containerId);
  const answer = await startRun(deps, actor, settings, context, {
    response: row,
    at,
    thread,
    assistantId: plan.assistant?.id ?? '',
    settings: plan.settings,
    messages: () => Promise.resolve(input.messages),
    history,
    write: async (messages, run) => {
      const extra = [insertStatement(responses, row), ...outputStatements(input.outputs)];
      if (!plan.conversation) return insertThreadAndRun(deps.db, thread, messages, run, extra);
      if (await insertRunOnThread(deps.db, messages, run, extra)) return;
      throw activeRunError(thread.id, await blockingRun(deps, thread.id));
    },
    leading: [],
    answer: answerKind(body),
    includeResultContent: includesResults(body),
    // Its answer makes the next response's history known (KnownHistories): what it read, the
    // outputs its input gives filled in, and its own.
    handBack: true,
  });
  return { row, thread, answer };
}

/**
 * A response made in one round trip to a database server with its provider called beside it, as a
 * run on a thread is (runs/commands.ts, speculate): nothing read first. What it goes on from must
 * need no read: nothing (a thread of its own, whose whole prompt the request gives), or a history
 * this process or isolate knows (threads/known-histories.ts, oneTripContext): its conversation's,
 * or the chain of the previous response it goes on from. A history not known here is read in the
 * write's own transaction instead, and the provider called once it committed (runs/commands.ts,
 * hostAfterWrite): one round trip before the call, two in all, where reading first takes three.
 * Its input must be messages of text only (images and files are read or checked against stored
 * rules), or the function calls of a known history given back and their outputs (outputs fill
 * stored calls, which a history not known here would have to read), with no tool with stored parts (file_search's vector
 * stores, code_interpreter's container); a `prompt` must be an assistant held at the settings' generation last seen, as must the virtual
 * key and the policies. Its write carries the settings' guard, and the known history's, which
 * fails it unless the history is still exactly what the prompt was built from (a response of the
 * chain deleted takes messages out of it; in a conversation, its rows are also written only while
 * no run holds it); nothing of the provider's answer leaves before it commits. Null, nothing written
 * and any admission given back, when any of it does not hold or a guard failed: the response is
 * then made from its reads, so its answer (401, 404, 429, 400) is as it would have been. On the
 * embedded file (no guard: reads cost no round trip) it is always null.
 */
async function responseInOneTrip(deps: ResponseCommandDeps, request: CreateRequest): Promise<StartedResponse | null> {
  const { actor, snapshot, body, context, at } = request;
  const known = oneTripContext(deps, actor.workspaceId, body, at);
  const guard = snapshot.guard();
  if (!guard || !known) return null;
  const items = inputOf(body);
  const calls = 'known' in known.history ? known.history.calls : undefined;
  // A call given back is the thread's already, and its output fills it: both need only the calls known.
  const answersCall = (item: InputItem) => item.type === 'function_call' || item.type === 'function_call_output';
  if (!items.every((item) => textMessage(item) || (calls && answersCall(item)))) return null;
  const assistant = body.prompt ? snapshot.keptAssistant(actor.workspaceId, body.prompt.id) : null;
  if (assistant === undefined) return null;
  const { thread, conversation } = known;
  let made: Pick<ResponsePlan, 'settings' | 'echoTools' | 'input'> & {
    history: { known: History } | { read: HistoryOf };
  };
  try {
    const { tools, toolResources, echo, code } = responseTools(body.tools, assistant);
    if (toolResources || code) return null;
    const settings = responseSettings(body, assistant, tools, toolResources);
    // Text messages, and outputs of calls known: nothing is read to make them.
    const input = await threadItemWrites(deps, thread, items, 'input', at, { calls });
    // The outputs it gives fill the known calls; a call left without one is refused by the path of reads.
    const { history: before } = known;
    const history =
      'known' in before
        ? { known: { messages: before.known.messages, steps: answered(before.known.steps, input.outputs) } }
        : before;
    made = { settings, echoTools: echo, input, history };
  } catch {
    // Its error comes from the path of reads, in its order.
    return null;
  }
  const { settings, input } = made;
  const virtualKey = snapshot.keptVirtualKey(actor.workspaceId, { slug: actor.virtualKeySlug, model: settings.model });
  if (!virtualKey) return null;
  const row = responseRow(actor, body, { ...made, thread, conversation, items }, at, null);
  const run = newRun(
    settings,
    { thread, assistantId: assistant?.id ?? '', virtualKey, apiKeyId: actor.apiKeyId, response: row },
    deps.config,
    at,
  );
  const admission = await admitBeforePrompt(deps, actor, snapshot, virtualKey, run);
  if (!admission) return null;
  const messages = input.messages;
  const held = { guard, run, messages, virtualKey, admission };
  const how = { answer: answerKind(body), leading: [], response: row, includeResultContent: includesResults(body) };
  const write = () => known.write([guard, ...known.guards], { messages, outputs: input.outputs }, run, row);
  let answer: RunAnswer | null;
  const { history } = made;
  if ('known' in history) {
    answer = await speculate(deps, { actor, snapshot, context, held, history: history.known, write: write(), ...how });
  } else {
    // Read in the write's own transaction: issued just before the write, it travels with it (batchWithReads).
    const read = readHistory(deps.db, history.read, deps.config.GATEWAY_MAX_HISTORY_BYTES);
    read.catch(() => undefined);
    answer = await hostAfterWrite(deps, { actor, snapshot, context, held, history: read, write: write(), ...how });
  }
  return answer && { row, thread, answer };
}

/** What a response goes on from, when it needs no read before its write (oneTripContext). */
interface OneTripContext {
  /** The thread it is made on: its conversation's, or a new one of its own. */
  thread: ThreadKey;
  conversation: boolean;
  /**
   * What comes before its own messages, known here (its prompt's history), with the function calls
   * among it that its input may give outputs to (those of its conversation, or of the previous
   * response); or, for a history not known here, the history its write's transaction reads
   * (readHistory's `of`).
   */
  history: { known: History; calls: ReadonlyMap<string, ThreadCall> } | { read: HistoryOf };
  /** What its write must carry besides the settings' guard: the known history's, or the read one's. */
  guards: RawStatement[];
  /**
   * Its rows, the response's with them, and the outputs its input gives earlier calls, written in
   * one transaction led by `guards`; false when one failed it, writing nothing.
   */
  write: (guards: RawStatement[], input: ItemRows, run: RunRow, row: ResponseRow) => Promise<boolean>;
}

/** What a response's input writes into its thread (ThreadItemWrites): its messages, and outputs of earlier calls. */
type ItemRows = Pick<ThreadItemWrites, 'messages' | 'outputs'>;

/**
 * What a response goes on from, when it needs no read before its write (responseInOneTrip):
 * nothing, for a response on a thread of its own without a previous one; the history this process
 * or isolate knows of its conversation (by the conversation's thread), written on while no run
 * holds it, or of its previous response's chain (by that response: knownHistoryKey), taken from
 * what is known (KnownHistories.take: whatever comes of this response, that history is not the
 * next one's); or else that history read in the write's transaction, whose guard
 * (conversationReadGuard, chainReadGuard) fails it unless the response can go on from it as read.
 * Null when the request names both (the path of reads refuses it), or on a client that carries no
 * reads with a write (the embedded file: knownHistories).
 */
function oneTripContext(
  deps: ResponseCommandDeps,
  workspaceId: string,
  body: CreateResponseBody,
  at: number,
): OneTripContext | null {
  const conversationId = conversationOf(body);
  const previousId = body.previous_response_id ?? null;
  const histories = knownHistories(deps.db);
  if ((conversationId !== undefined && previousId !== null) || !histories) return null;
  const maxBytes = deps.config.GATEWAY_MAX_HISTORY_BYTES;
  if (conversationId !== undefined) {
    const thread = { id: conversationId, workspaceId };
    const conversation = {
      thread,
      conversation: true,
      write: (guards, input, run, row) =>
        insertRunWhileIdle(deps.db, guards, input.messages, run, row, (idle) => outputStatements(input.outputs, idle)),
    } satisfies Partial<OneTripContext>;
    const known = histories.take(thread, maxBytes);
    if (known) {
      const history = { known, calls: knownCalls(known.steps) };
      return { ...conversation, history, guards: [historyGuard(known)] };
    }
    // As the path of reads reads it (contextReads).
    const read = { workspaceId, threadId: thread.id, runId: null };
    return { ...conversation, history: { read }, guards: [conversationReadGuard(thread.id)] };
  }
  const own = newThread(workspaceId, undefined, at);
  const fresh = {
    thread: own,
    conversation: false,
    write: (guards, input, run, row) =>
      insertThreadAndRunGuarded(deps.db, guards, own, input.messages, run, [
        insertStatement(responses, row),
        ...outputStatements(input.outputs),
      ]),
  } satisfies Partial<OneTripContext>;
  if (previousId === null) return { ...fresh, history: { known: NO_HISTORY, calls: new Map() }, guards: [] };
  const known = histories.take({ id: previousId, workspaceId }, maxBytes);
  // Its input answers the previous response's calls (planResponse, `earlier`): those of its run.
  if (known) {
    const history = { known, calls: knownCalls(known.steps, previousId) };
    return { ...fresh, history, guards: [chainGuard(known, own)] };
  }
  const read = { workspaceId, threadId: own.id, runId: null, chain: { previousResponseId: previousId } };
  return { ...fresh, history: { read }, guards: [chainReadGuard(previousId, own)] };
}

/** How a response is answered: its events, or once it ended; in the background, queued. */
const answerKind = (body: CreateResponseBody): RunAnswerKind =>
  body.stream === true ? 'stream' : body.background === true ? 'queued' : 'ended';

/** Whether the response's file_search calls carry their results (`include`). */
const includesResults = (body: CreateResponseBody): boolean =>
  (body.include ?? []).includes('file_search_call.results');

/** The response's row: its input as items, its options as the request gave them. */
function responseRow(
  actor: Actor,
  body: CreateResponseBody,
  plan: Pick<ResponsePlan, 'conversation' | 'echoTools' | 'items' | 'input'> & { thread: ThreadKey },
  at: number,
  containerId: string | null,
): ResponseRow {
  const options: ResponseOptions = {
    instructions: body.instructions ?? null,
    tools: plan.echoTools,
    tool_choice: body.tool_choice ?? 'auto',
    text: body.text ?? null,
    reasoning: body.reasoning ?? null,
    truncation: body.truncation ?? null,
    user: body.user ?? null,
    safety_identifier: body.safety_identifier ?? null,
    prompt: body.prompt ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    service_tier: body.service_tier ?? null,
    top_logprobs: body.top_logprobs ?? null,
    max_tool_calls: body.max_tool_calls ?? null,
    include: body.include ?? [],
  };
  return {
    id: newId('resp'),
    workspaceId: actor.workspaceId,
    threadId: plan.thread.id,
    conversationId: plan.conversation ? plan.thread.id : null,
    previousResponseId: body.previous_response_id ?? null,
    stored: body.store !== false,
    background: body.background === true,
    input: inputItems(plan.items, plan.input),
    options,
    createdAt: at,
    containerId,
  };
}

/**
 * A response made with `store: false` once it ended: its thread's rows go (a conversation's stay:
 * they are the conversation's), and its row stays with neither input nor options, so that a
 * `previous_response_id` naming it is told why it cannot go on from it.
 */
async function forgetResponse(deps: ResponseCommandDeps, row: ResponseRow, thread: ThreadKey): Promise<void> {
  if (row.conversationId === null) await deleteIdleThread(deps.db, thread);
  await deps.db.update(responses).set({ input: [], options: {} }).where(eq(responses.id, row.id));
}

/** Passes a stream on unchanged, then calls `end` (kept alive by the request's waitUntil). */
function afterEnd(end: () => Promise<void>, context: RequestContext): TransformStream<Uint8Array, Uint8Array> {
  return new TransformStream({
    flush() {
      context.waitUntil(end());
    },
  });
}

/** What creating a response, or counting its input tokens, works out before anything is written. */
interface ResponsePlan {
  thread: ThreadRow;
  /** Whether the thread is a conversation's (else a new thread of the response's own). */
  conversation: boolean;
  assistant: AssistantRow | null;
  settings: RunSettings;
  /** The tools as the request gave them, answered as such. */
  echoTools: ResponseObject['tools'];
  /** The input as items, and what they write into the thread: its messages, the outputs of earlier calls. */
  items: InputItem[];
  input: ThreadItemWrites;
  /** The thread's history, with the function outputs this input gives filled in. */
  history: History;
  /** Its code_interpreter tool's container as given (the request's tool), or `auto` (a prompt's). */
  code: CodeContainer | null;
}

/** Where a response's code runs, as its tool names it, and the parameter that named it. */
interface CodeContainer {
  container: ResponseCodeInterpreterTool['container'];
  param: string;
}

/**
 * The reads of the stored context a response goes on from, started together as the request
 * arrives, so that they travel in one round trip to a database server (coalescing-client.ts), with
 * the settings' generation when it is read then: its conversation's thread, open run and history,
 * or its previous response's row, run and the chain's history. Each is looked at in planResponse's
 * order, so its errors come as they did read one after the other; a read left unlooked at fails
 * silently.
 */
interface ContextReads {
  /** The thread of its own a response not in a conversation is made on. */
  fresh: ThreadRow;
  conversation: { thread: Promise<ThreadRow>; open: Promise<OpenRun | null>; history: HistoryRead } | null;
  previous: {
    id: string;
    row: Promise<ResponseRow>;
    run: Promise<RunRow | null>;
    thread: Promise<ThreadRow | null>;
    history: HistoryRead;
  } | null;
}

/** A history read as the request arrived, and how to read it again. */
interface HistoryRead {
  of: HistoryOf;
  read: Promise<History>;
}

function contextReads(deps: ResponseCommandDeps, workspaceId: string, body: InputTokensBody, at: number): ContextReads {
  const { db, config } = deps;
  const conversationId = conversationOf(body);
  const previousId = body.previous_response_id ?? null;
  if (conversationId !== undefined && previousId !== null) {
    throw new ApiError(
      'invalid_value',
      "Mutually exclusive parameters: give either 'previous_response_id' or 'conversation', not both.",
      { param: 'previous_response_id' },
    );
  }
  const fresh = newThread(workspaceId, undefined, at);
  const quiet = <T>(read: Promise<T>): Promise<T> => {
    read.catch(() => undefined);
    return read;
  };
  const history = (of: HistoryOf): HistoryRead => ({
    of,
    read: quiet(readHistory(db, of, config.GATEWAY_MAX_HISTORY_BYTES)),
  });
  const of = { workspaceId, runId: null };
  return {
    fresh,
    conversation:
      conversationId === undefined
        ? null
        : {
            // A conversation is a thread: its id is the thread's.
            thread: quiet(getConversation(db, workspaceId, conversationId)),
            open: quiet(openRunOf(db, conversationId)),
            history: history({ ...of, threadId: conversationId }),
          },
    previous:
      previousId === null
        ? null
        : {
            id: previousId,
            row: quiet(getResponseRow(db, workspaceId, previousId, 'previous_response_id')),
            run: quiet(getRunById(db, previousId)),
            thread: quiet(responseThread(db, workspaceId, previousId)),
            history: history({ ...of, threadId: fresh.id, chain: { previousResponseId: previousId } }),
          },
  };
}

async function planResponse(
  deps: ResponseCommandDeps,
  actor: Actor,
  snapshot: Settings,
  body: InputTokensBody,
  reads: ContextReads,
  at: number,
): Promise<ResponsePlan> {
  const { db } = deps;
  const assistant = body.prompt ? await promptAssistant(snapshot, actor.workspaceId, body.prompt.id) : null;
  const { tools, toolResources, echo, code } = responseTools(body.tools, assistant);
  const settings = responseSettings(body, assistant, tools, toolResources);
  await checkSandbox(deps.sandbox, tools, {
    assistantId: assistant?.id ?? '',
    toolsFromRequest: body.tools !== undefined && body.tools !== null,
  }).catch((error: unknown) => {
    // A prompt's tools are its assistant's: the refusal names the prompt, which the request gave.
    throw error instanceof ApiError && error.param === 'assistant_id'
      ? new ApiError(error.code, error.message, { param: 'prompt.id' })
      : error;
  });
  await checkToolResources(db, actor.workspaceId, settings.toolResources, 'tools');
  const items = inputOf(body);

  let thread: ThreadRow;
  let earlier: ThreadRow;
  let history: History;
  const { conversation, previous } = reads;
  if (conversation) {
    thread = await conversation.thread.catch((error: unknown) => {
      throw error instanceof ApiError && error.code === 'conversation_not_found'
        ? new ApiError('conversation_not_found', error.message, { param: 'conversation' })
        : error;
    });
    earlier = thread;
    const open = await conversation.open;
    const blocking = await blockingRun(deps, thread.id, open);
    if (blocking) throw activeRunError(thread.id, blocking);
    // An open run settled now as left behind (recovery) may have changed what the history was.
    history = await (open === null ? conversation.history.read : historyAgain(deps, conversation.history));
  } else {
    thread = reads.fresh;
    if (previous) {
      const found = await previousThread(deps, actor.workspaceId, previous);
      earlier = found.thread;
      history = await (found.settledNow ? historyAgain(deps, previous.history) : previous.history.read);
    } else {
      earlier = thread;
      // A new thread without a chain has no history to read.
      history = NO_HISTORY;
    }
  }
  const input = await threadItemWrites(deps, thread, items, 'input', at, { earlier });
  return {
    thread,
    conversation: conversation !== null,
    assistant,
    settings,
    echoTools: echo,
    items,
    input,
    history: { messages: history.messages, steps: answered(history.steps, input.outputs) },
    code,
  };
}

/** The conversation a response is made in, as the request names it. */
const conversationOf = (body: InputTokensBody): string | undefined =>
  typeof body.conversation === 'string' ? body.conversation : body.conversation?.id;

/** The request's input as items: a string is one user message. */
const inputOf = (body: InputTokensBody): InputItem[] =>
  typeof body.input === 'string' ? [{ type: 'message', role: 'user', content: body.input }] : (body.input ?? []);

/**
 * The container a response's code runs in: the one its tool names (running: an expired one is
 * refused), or for `auto` the container of the latest code call of its context (its conversation,
 * or its previous responses) while it runs, else its thread's own (made now); `auto`'s files are
 * put in it.
 */
async function responseContainer(
  deps: ResponseCommandDeps,
  workspaceId: string,
  code: CodeContainer,
  plan: Pick<ResponsePlan, 'thread' | 'history'>,
): Promise<string> {
  const { container, param } = code;
  if (typeof container === 'string') return (await runningContainer(deps, workspaceId, container, param)).id;
  const fileIds = container.file_ids ?? [];
  // Checked before anything is made: a missing file is a 400 and no container.
  const files = await userFiles(deps, workspaceId, '', fileIds, `${param}.file_ids`);
  const latest = latestContainerId(plan.history.steps);
  const reused =
    latest === null
      ? null
      : await runningContainer(deps, workspaceId, latest, param).catch((error: unknown) => {
          // Gone or expired since: a new one, as OpenAI's auto makes.
          if (error instanceof ApiError) return null;
          throw error;
        });
  const id = reused?.id ?? (await ownContainer(deps, workspaceId, plan.thread.id)).id;
  for (const file of files) await upsertContainerFile(deps.db, { ...file, containerId: id });
  return id;
}

/** The container of the latest code call among `steps`, if any. */
function latestContainerId(steps: readonly HistoryStep[]): string | null {
  for (const step of [...steps].reverse()) {
    if (step.stepDetails.type !== 'tool_calls') continue;
    for (const call of [...step.stepDetails.tool_calls].reverse()) {
      if (call.type === 'code_interpreter' && call.container_id !== undefined) return call.container_id;
    }
  }
  return null;
}

/**
 * The thread of the previous response a new one goes on from: the workspace's, kept (not made with
 * `store: false`), and ended (a response still executing has no output to go on from). Its row and
 * run come from `previous`'s reads; `settledNow` when recovery settled the run now, as left behind,
 * which may have changed the chain's history read beside them.
 */
async function previousThread(
  deps: ResponseCommandDeps,
  workspaceId: string,
  previous: NonNullable<ContextReads['previous']>,
): Promise<{ thread: ThreadRow; settledNow: boolean }> {
  const { id } = previous;
  const row = await previous.row;
  const param = { param: 'previous_response_id' };
  if (!row.stored) {
    throw new ApiError(
      'invalid_value',
      `Response '${id}' was made with store: false, so it was not kept and cannot be continued. ` +
        'Send its input and output again as items instead.',
      param,
    );
  }
  const run = await previous.run;
  if (!run) throw responseNotFound(id, 'previous_response_id');
  const now = await reconcileRun(deps, run);
  if (!isTerminal(now.status)) {
    throw new ApiError('invalid_value', `Response '${id}' is still ${now.status}: wait for it to end.`, param);
  }
  // Not found beside the row (the thread deleted since): getThread says so, as it would have.
  const thread = (await previous.thread) ?? (await getThread(deps.db, workspaceId, row.threadId));
  return { thread, settledNow: now !== run };
}

/** A history read again, after what it was read from changed. */
const historyAgain = (deps: ResponseCommandDeps, history: HistoryRead) =>
  readHistory(deps.db, history.of, deps.config.GATEWAY_MAX_HISTORY_BYTES);

/**
 * The history's steps with the outputs this input gives filled in (the calls' steps are written
 * so in the response's batch: outputStatements). A call of the history still without an output
 * is refused: the model is sent each call with its output, as OpenAI requires.
 */
function answered(steps: HistoryStep[], outputs: readonly CallOutput[]): HistoryStep[] {
  return steps.map((step) => {
    const details = step.stepDetails;
    if (details.type !== 'tool_calls') return step;
    const calls = details.tool_calls.map((call, index) => {
      if (call.type !== 'function' || call.function.output !== null) return call;
      const given = outputs.find((output) => output.stepId === step.id && output.index === index);
      if (!given) {
        throw new ApiError('invalid_value', `No tool output found for function call ${call.id}.`, { param: 'input' });
      }
      return { ...call, function: { ...call.function, output: given.output } };
    });
    return { ...step, stepDetails: { type: 'tool_calls', tool_calls: calls } };
  });
}

/**
 * The function calls of known steps (threads/known-histories.ts) that a function_call_output may
 * name, as threadItemWrites takes them: those of `runId`'s steps, or of every step. A call not
 * among them is read for (the path of reads), which answers whether it can be given an output.
 */
function knownCalls(steps: readonly HistoryStep[], runId?: string): Map<string, ThreadCall> {
  const calls = new Map<string, ThreadCall>();
  for (const { id, runId: stepRun, status, stepDetails } of steps) {
    if (stepDetails.type !== 'tool_calls' || (runId !== undefined && stepRun !== runId)) continue;
    for (const [index, call] of stepDetails.tool_calls.entries()) {
      if (call.type !== 'function') continue;
      const open = status === 'completed' && call.function.output === null;
      calls.set(call.id, { callId: call.id, stepId: id, index, type: 'function', open });
    }
  }
  return calls;
}

/** The assistant a `prompt` names: a stored prompt, as OpenAI's dashboard prompts were. */
async function promptAssistant(snapshot: Settings, workspaceId: string, id: string): Promise<AssistantRow> {
  try {
    return await snapshot.assistant(workspaceId, id);
  } catch (error) {
    if (error instanceof ApiError && error.code === 'assistant_not_found') {
      throw new ApiError(
        'assistant_not_found',
        `No prompt found with id '${id}': a prompt here is an assistant's id.`,
        {
          param: 'prompt.id',
        },
      );
    }
    throw error;
  }
}

/**
 * The request's tools as a run's: function tools and file_search (its vector store as the run's
 * tool resources); any other type is refused by name. Without tools, a prompt's assistant's.
 */
function responseTools(
  given: CreateResponseBody['tools'],
  assistant: AssistantRow | null,
): { tools: Tool[]; toolResources: ToolResources | null; echo: ResponseObject['tools']; code: CodeContainer | null } {
  if (!given) {
    const tools = assistant?.tools ?? [];
    // A prompt's code runs as an `auto` container's, with its assistant's files (its tool resources).
    const code = tools.some((tool) => tool.type === 'code_interpreter')
      ? { container: { type: 'auto' as const }, param: 'prompt.id' }
      : null;
    return { tools, toolResources: assistant?.toolResources ?? null, echo: tools.map(echoTool), code };
  }
  const tools: Tool[] = [];
  let toolResources: ToolResources | null = null;
  let code: CodeContainer | null = null;
  const names = new Set<string>();
  given.forEach((tool, index) => {
    const param = `tools[${index}]`;
    if (tool.type === 'function') {
      const parsed = responseFunctionTool.safeParse(tool);
      if (!parsed.success)
        throw validationError(prefixed(parsed.error.issues, ['tools', index]), { tools: given }, 'json');
      const { name, description, parameters, strict } = parsed.data;
      if (names.has(name)) {
        throw new ApiError('invalid_value', `Two function tools are named '${name}'.`, { param: `${param}.name` });
      }
      names.add(name);
      tools.push({
        type: 'function',
        function: {
          name,
          ...(description ? { description } : {}),
          ...(parameters ? { parameters } : {}),
          ...(strict !== undefined && strict !== null ? { strict } : {}),
        },
      });
      return;
    }
    if (tool.type === 'file_search') {
      const parsed = responseFileSearchTool.safeParse(tool);
      if (!parsed.success)
        throw validationError(prefixed(parsed.error.issues, ['tools', index]), { tools: given }, 'json');
      if (toolResources) {
        throw new ApiError('invalid_value', 'Only one file_search tool can be given.', { param });
      }
      const { vector_store_ids, max_num_results, ranking_options } = parsed.data;
      toolResources = { file_search: { vector_store_ids } };
      const ranking =
        ranking_options?.score_threshold === undefined
          ? undefined
          : { ranker: 'auto' as const, score_threshold: ranking_options.score_threshold };
      tools.push({
        type: 'file_search',
        file_search: {
          ...(max_num_results ? { max_num_results } : {}),
          ...(ranking ? { ranking_options: ranking } : {}),
        },
      });
      return;
    }
    if (tool.type === 'code_interpreter') {
      const parsed = responseCodeInterpreterTool.safeParse(tool);
      if (!parsed.success)
        throw validationError(prefixed(parsed.error.issues, ['tools', index]), { tools: given }, 'json');
      if (code) throw new ApiError('invalid_value', 'Only one code_interpreter tool can be given.', { param });
      code = { container: parsed.data.container, param: `${param}.container` };
      tools.push({ type: 'code_interpreter' });
      return;
    }
    throw new ApiError(
      'unsupported_tool',
      `The ${tool.type} tool is not served by this gateway yet: function, file_search and code_interpreter tools are.`,
      { param: `${param}.type` },
    );
  });
  return { tools, toolResources, echo: given, code };
}

function prefixed<Issue extends { path: PropertyKey[] }>(issues: readonly Issue[], prefix: PropertyKey[]): Issue[] {
  return issues.map((issue) => ({ ...issue, path: [...prefix, ...issue.path] }));
}

/** An assistant's tool as a response's `tools` shows it. */
function echoTool(tool: Tool): ResponseObject['tools'][number] {
  if (tool.type === 'function') return { type: 'function', ...tool.function };
  // A prompt's code runs in an `auto` container (responseTools): said so, as the tool requires a container.
  if (tool.type === 'code_interpreter') return { type: tool.type, container: { type: 'auto' } };
  return { type: tool.type };
}

/** The run settings of a response: the request's, else its prompt's assistant's, else the default. */
function responseSettings(
  body: InputTokensBody & Partial<CreateResponseBody>,
  assistant: AssistantRow | null,
  tools: Tool[],
  toolResources: ToolResources | null,
): RunSettings {
  const model = body.model ?? assistant?.model;
  if (!model) {
    throw new ApiError('missing_required_parameter', "Missing required parameter: 'model'.", { param: 'model' });
  }
  const instructions = body.instructions ?? assistant?.instructions ?? '';
  return {
    model,
    instructions: fillVariables(instructions, body.prompt?.variables),
    tools,
    toolResources,
    metadata: body.metadata ?? {},
    temperature: body.temperature ?? assistant?.temperature ?? null,
    topP: body.top_p ?? assistant?.topP ?? null,
    maxPromptTokens: null,
    maxCompletionTokens: body.max_output_tokens ?? null,
    truncationStrategy: { type: 'auto', last_messages: null },
    toolChoice: runToolChoice(body.tool_choice),
    parallelToolCalls: body.parallel_tool_calls ?? true,
    responseFormat: body.text?.format ? runResponseFormat(body.text.format) : (assistant?.responseFormat ?? 'auto'),
    reasoningEffort: body.reasoning?.effort ?? null,
  };
}

/** `{{name}}` in a prompt's instructions, filled from its variables (text ones: others are named as unsupported). */
function fillVariables(
  instructions: string,
  variables: NonNullable<CreateResponseBody['prompt']>['variables'],
): string {
  if (!variables) return instructions;
  return instructions.replace(/\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g, (whole, name: string) => {
    const value = variables[name];
    if (value === undefined) return whole;
    if (typeof value === 'string') return value;
    if (value.type === 'input_text' && typeof value.text === 'string') return value.text;
    throw new ApiError('invalid_value', `Prompt variable '${name}' must be text here.`, {
      param: `prompt.variables.${name}`,
    });
  });
}

function runToolChoice(choice: CreateResponseBody['tool_choice']): ToolChoice {
  if (!choice) return 'auto';
  if (typeof choice === 'string') return choice;
  return choice.type === 'function' ? { type: 'function', function: { name: choice.name } } : { type: 'file_search' };
}

function runResponseFormat(format: TextFormat): ResponseFormat {
  if (format.type !== 'json_schema') return { type: format.type };
  const { name, schema, description, strict } = format;
  return {
    type: 'json_schema',
    json_schema: { name, schema, ...(description ? { description } : {}), ...(strict != null ? { strict } : {}) },
  };
}

/**
 * The input as `input_items` lists it: each item as given, a message with the id of the message it
 * became and an output with its item's id in the conversation (the messages and outputs are made
 * in the items' order; a message given back by its id is not made again).
 */
function inputItems(items: InputItem[], writes: ThreadItemWrites): Record<string, unknown>[] {
  let message = 0;
  let output = 0;
  return items.map((item) => {
    if (item.type === 'function_call_output') {
      const written = writes.outputs[output++];
      return written ? { id: toolItemId('fco', written.stepId, written.index), ...item } : item;
    }
    if (item.type !== 'message') return item;
    const content = typeof item.content === 'string' ? [{ type: 'input_text', text: item.content }] : item.content;
    const id = item.id ?? writes.messages[message++]?.id;
    return { ...item, id, status: item.status ?? 'completed', content };
  });
}

/** GET /v1/responses/{id}: the response as it stands (settled first if its executor was lost). */
export async function retrieveResponse(
  deps: ResponseCommandDeps,
  workspaceId: string,
  id: string,
): Promise<ResponseObject> {
  // Read together (one round trip to a database server): what is read by the id is looked at only
  // once the response is found the workspace's, whose 404 comes first.
  const reads = responseReads(deps, id);
  const row = await getResponseRow(deps.db, workspaceId, id);
  if (!row.stored) throw responseNotFound(id);
  return responseJson(deps, row, reads);
}

/** How often a replay waiting for a background response to end looks at it again. */
const REPLAY_POLL_MS = 250;

/**
 * GET /v1/responses/{id}?stream=true: the response's stream told again from what it stored
 * (replay.ts), after the `starting_after` sequence number. A response still executing is waited
 * for: its events come once it ended.
 */
export async function streamResponse(
  deps: ResponseCommandDeps,
  workspaceId: string,
  id: string,
  startingAfter: number | undefined,
): Promise<ReadableStream<Uint8Array>> {
  const row = await getResponseRow(deps.db, workspaceId, id);
  if (!row.stored) throw responseNotFound(id);
  const first = await getRunById(deps.db, id);
  if (!first) throw responseNotFound(id);
  const stream = new EventStream({
    stallMs: deps.config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS,
    slices: deps.slices,
    done: false,
  });
  void (async () => {
    try {
      let run = await reconcileRun(deps, first);
      while (!isTerminal(run.status) && !stream.detached) {
        await new Promise((resolve) => setTimeout(resolve, REPLAY_POLL_MS));
        const now = await getRunById(deps.db, id);
        if (!now) return;
        run = await reconcileRun(deps, now);
      }
      if (stream.detached) return;
      const [steps, messages] = await Promise.all([listSteps(deps.db, id), runMessages(deps.db, id)]);
      await replayResponse(deps.db, stream, { run, row, steps, messages }, startingAfter);
    } catch (error) {
      deps.log.error('response replay failed', { response_id: id, error });
      await stream.fail(serverError().body);
    } finally {
      await stream.close();
    }
  })();
  return stream.readable;
}

/**
 * The response as it stands. Its run (whose id is the response's), steps and messages are read
 * together (one round trip to a database server: coalescing-client.ts); a run settled now because
 * its executor was lost (reconcileRun) has its output read again, as settling left it.
 */
/** What a response's object reads besides its row, all by the response's id: its run, steps and messages. */
function responseReads(deps: ResponseCommandDeps, id: string) {
  const reads = { run: getRunById(deps.db, id), steps: listSteps(deps.db, id), messages: runMessages(deps.db, id) };
  for (const read of Object.values(reads)) read.catch(() => undefined);
  return reads;
}

/**
 * The response's object from `reads` (issued beside its row's read, or now): its run as it really
 * stands. A run settled just now (left behind) settled its steps and messages with it: they are read again.
 */
async function responseJson(
  deps: ResponseCommandDeps,
  row: ResponseRow,
  reads = responseReads(deps, row.id),
): Promise<ResponseObject> {
  const run = await reads.run;
  if (!run) throw responseNotFound(row.id);
  const now = await reconcileRun(deps, run);
  const { steps, messages } = now === run ? reads : responseReads(deps, row.id);
  const include = ITEM_INCLUDES.filter((value) => row.options.include?.includes(value));
  const byId = new Map((await messages).map((message) => [message.id, message]));
  return toResponseJson(now, row, runOutputItems(await steps, byId, include));
}

/** DELETE /v1/responses/{id}. Its items stay in its conversation, as OpenAI's do. */
export async function deleteResponse(deps: ResponseCommandDeps, workspaceId: string, id: string): Promise<void> {
  const row = await getResponseRow(deps.db, workspaceId, id);
  if (!row.stored) throw responseNotFound(id);
  await deleteResponseRow(deps.db, workspaceId, id);
  // Nothing goes on from it now (another gateway's delete is found by the next response's guard).
  knownHistories(deps.db)?.forget(id);
}

/**
 * POST /v1/responses/{id}/cancel: a background response in progress becomes `cancelling` and its
 * host stops it; one that ended is answered as it is.
 */
export async function cancelResponse(
  deps: ResponseCommandDeps,
  workspaceId: string,
  id: string,
  context: RequestContext,
): Promise<ResponseObject> {
  const row = await getResponseRow(deps.db, workspaceId, id);
  if (!row.background) {
    throw new ApiError('invalid_value', 'Only a background response can be cancelled.', { param: 'response_id' });
  }
  const run = await getRunById(deps.db, id);
  if (run && (run.status === 'in_progress' || run.status === 'queued')) {
    await updateRun(deps.db, run.id, ['in_progress', 'queued'], { status: 'cancelling' });
    deps.runHost.cancel(run.id, context);
  }
  return retrieveResponse(deps, workspaceId, id);
}

/** GET /v1/responses/{id}/input_items: a page of its input, as given. */
export async function listInputItems(
  deps: ResponseCommandDeps,
  workspaceId: string,
  id: string,
  query: CursorListQuery,
) {
  const row = await getResponseRow(deps.db, workspaceId, id);
  if (!row.stored) throw responseNotFound(id);
  const items = row.input.map((item, index) => ({
    ...item,
    id: typeof item.id === 'string' ? item.id : `${row.id}_input_${index}`,
  }));
  const ordered = query.order === 'asc' ? items : [...items].reverse();
  const after = query.after === undefined ? -1 : ordered.findIndex((item) => item.id === query.after);
  if (query.after !== undefined && after === -1) {
    throw new ApiError('invalid_value', `No input item '${query.after}' in this response to list after.`, {
      param: 'after',
    });
  }
  const start = after + 1;
  const page = ordered.slice(start, start + query.limit);
  return {
    object: 'list' as const,
    data: page,
    first_id: page[0]?.id ?? null,
    last_id: page.at(-1)?.id ?? null,
    has_more: start + query.limit < ordered.length,
  };
}

/**
 * POST /v1/responses/input_tokens: the tokens the response's prompt would take, as the gateway
 * estimates it for rate limits (its prompt's characters), since providers have no such call.
 */
export async function countInputTokens(
  deps: ResponseCommandDeps,
  actor: Actor,
  snapshot: Settings,
  body: InputTokensBody,
): Promise<number> {
  const at = deps.now();
  const plan = await planResponse(deps, actor, snapshot, body, contextReads(deps, actor.workspaceId, body, at), at);
  const messages = plan.input.messages;
  const run = { createdAt: at, instructions: plan.settings.instructions, tools: plan.settings.tools };
  const history = { messages: [...plan.history.messages, ...messages], steps: plan.history.steps };
  const limits = promptLimits({ ...plan.settings, maxPromptTokens: null }, 0, deps.config);
  return buildPrompt(run, history, [], limits).tokens;
}
