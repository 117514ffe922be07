import type { Actor, RequestContext } from '../../actor';
import type { Deps, StreamOptions } from '../../deps';
import { holdsThread } from '../../db/run-statuses';
import { ApiError } from '../../errors';
import { giveBack, settleTokens, type Admission } from '../../ratelimit';
import { admit, admitBeforePrompt, firstTurn, nextTurn, unlessWritten } from './admission';
import type { CursorListQuery } from '../../http/schemas';
import type {
  CreateRunBody,
  CreateThreadAndRunBody,
  ListWorkspaceRunsQuery,
  ModifyRunBody,
  RunOverrides,
  SubmitToolOutputsBody,
} from './schemas';
import type { ThreadMessageInput } from '../threads/schemas';
import type { Settings } from '../../db/settings-cache';
import { historyStep, readHistory } from '../threads/history';
import { historyGuard, knownHistories, knownHistoryKey } from '../threads/known-histories';
import {
  acceptToolOutputs,
  activeRunError,
  getRun,
  getRunById,
  getStep,
  insertRunOnThread,
  insertRunWhileIdle,
  insertThreadAndRun,
  insertThreadAndRunGuarded,
  leaseMs,
  listRuns as listRunsPage,
  listWorkspaceRuns as listWorkspaceRunsPage,
  listSteps,
  listStepsPage,
  setRunMetadata,
  toolCallsStepInProgress,
  updateRun,
  withToolOutputs,
} from './queries';
import type { History, ResponseRow, RunRow, VirtualKey } from '../../db/schema';
import {
  getThread,
  openRunOf,
  setToolResources,
  type MessageRow,
  type ThreadKey,
  type ThreadRow,
} from '../threads/queries';
import { getRunVirtualKey } from '../virtual-keys/commands';
import { toRunJson, toStepJson } from './wire';
import { wakeIngestion } from '../vector-stores/commands';
import { attachedFiles, threadStoreWrites } from '../threads/thread-stores';
import { checkToolResources, storedToolResources } from '../vector-stores/tool-resources';
import { toThreadJson } from '../threads/wire';
import type { ServerSentEvent } from '../../deps';
import { besideRow, type RawStatement } from '../../db/client';
import { buildPrompt, laterTurnPrompt, promptLimits } from './execution/prompt';
import { reconcileRun } from './execution/recovery';
import { checkImages } from '../files/images';
import { checkCodeAttachments } from '../threads/code-attachments';
import { newRun } from './execution/rows';
import { clientMessage, newThread } from '../threads/rows';
import { checkSandbox, runSettings, type RunSettings } from './execution/settings';
import { settleRun } from './execution/settle';
import { settledTrace } from './execution/trace';
import { guardedWrite, liveBeside } from '../identities/middleware/api-key-auth';

/**
 * The run use-cases, each in the order it must happen. A run is created or continued in four steps:
 *
 *   validate (settings, tool outputs) ─> admit (rate limits: a refusal writes nothing)
 *     ─> write (one batch; the run is in progress from here) ─> host (RunHost.start or .stream)
 *
 * The routes (resources/runs/routes.ts) validate the request, call one of these and answer what it returns.
 */

/** What the run use-cases use of the deps. */
export type RunCommandDeps = Pick<
  Deps,
  'db' | 'config' | 'log' | 'now' | 'counters' | 'policyCache' | 'runHost' | 'blobs' | 'ingestion' | 'sandbox'
> &
  Pick<Deps, 'metrics'>;

/** A run in a thread, as its path names it. */
export interface RunPath {
  threadId: string;
  runId: string;
}

/**
 * How a run put in progress is answered: `queued` while it executes in the background, `stream`
 * with the event stream of its execution, or `ended` once its turn has ended (no event is built).
 */
export type RunAnswerKind = 'queued' | 'stream' | 'ended';

/**
 * A run just put in progress, answered with its rate-limit headers: as the run object clients are
 * told first (queued) while it executes in the background, or as the event stream of its execution;
 * a run answered `ended` comes as it was put in progress, for the caller to read back.
 */
export type RunAnswer =
  | { stream: false; run: RunRow; headers: Record<string, string> }
  | { stream: true; events: ReadableStream<Uint8Array>; headers: Record<string, string> };

/** POST /v1/threads/runs: a new thread with its messages, and a run on it. */
export async function createThreadAndRun(
  deps: RunCommandDeps,
  actor: Actor,
  snapshot: Settings,
  body: CreateThreadAndRunBody,
  context: RequestContext,
): Promise<RunAnswer> {
  const inOneTrip = await threadAndRunInOneTrip(deps, actor, snapshot, body, context);
  if (inOneTrip) return inOneTrip;
  // Started on settings assumed unchanged, the run asks whether its key is live (the assistant read beside it) first.
  const assistant = await liveBeside(snapshot, snapshot.assistant(actor.workspaceId, body.assistant_id));
  const settings = runSettings(assistant, body);
  await checkSandbox(deps.sandbox, settings.tools, {
    assistantId: assistant.id,
    toolsFromRequest: body.tools !== undefined && body.tools !== null,
  });
  const at = deps.now();
  const thread = newThread(
    actor.workspaceId,
    { metadata: body.thread?.metadata, tool_resources: storedToolResources(body.thread?.tool_resources) },
    at,
  );
  await checkToolResources(deps.db, actor.workspaceId, body.tool_resources, 'tool_resources');
  await checkToolResources(deps.db, actor.workspaceId, thread.toolResources, 'thread.tool_resources');
  // The thread's vector store, when its tool_resources create one or its messages attach files for file_search.
  const stores = await threadStoreWrites(deps, actor, thread, {
    inline: body.thread?.tool_resources?.file_search?.vector_stores?.[0],
    inlineParam: 'thread.tool_resources',
    attached: attachedFiles(body.thread?.messages ?? [], (index) => `thread.messages[${index}].`),
  });
  if (stores.toolResources) thread.toolResources = stores.toolResources;
  const answer = await startRun(deps, actor, snapshot, context, {
    at,
    thread,
    assistantId: assistant.id,
    settings,
    messages: () => clientMessages(deps, actor, thread, body.thread?.messages ?? [], 'thread.messages', at),
    history: NO_HISTORY,
    write: (messages, run) => insertThreadAndRun(deps.db, thread, messages, run, stores.statements),
    leading: [['thread.created', toThreadJson(thread)]],
    answer: body.stream === true ? 'stream' : 'queued',
  });
  if (stores.queued) wakeIngestion(deps, context);
  return answer;
}

/**
 * POST /v1/threads/{thread_id}/runs: a run on an existing thread, its additional_messages added
 * to the thread with it. A thread takes one open run at a time (activeRunError otherwise): its
 * open run is looked at first, so that a run that cannot be created is refused before it is
 * admitted; the unique index then decides, race-free, between runs that arrive together.
 */
export async function createRun(
  deps: RunCommandDeps,
  actor: Actor,
  snapshot: Settings,
  threadId: string,
  body: CreateRunBody,
  context: RequestContext,
  includeResultContent = false,
): Promise<RunAnswer> {
  const inOneTrip = await runInOneTrip(deps, actor, snapshot, threadId, body, context, includeResultContent);
  if (inOneTrip) return inOneTrip;
  const { db, config } = deps;
  // Read together (one round trip to a database server: coalescing-client.ts); their errors are
  // reported in this order, whichever comes first. The open run is read by the path's thread id
  // before the thread is known to be the workspace's, and looked at only once it is.
  // Started on settings assumed unchanged, the run asks whether its key is live (answered with these
  // reads), before anything else is told.
  const [thread, assistant, history, open] = await liveBeside(
    snapshot,
    besideRow(
      getThread(db, actor.workspaceId, threadId),
      snapshot.assistant(actor.workspaceId, body.assistant_id),
      readHistory(db, { workspaceId: actor.workspaceId, threadId, runId: null }, config.GATEWAY_MAX_HISTORY_BYTES),
      openRunOf(db, threadId),
    ),
  );
  const settings = runSettings(assistant, body);
  await checkSandbox(deps.sandbox, settings.tools, {
    assistantId: assistant.id,
    toolsFromRequest: body.tools !== undefined && body.tools !== null,
  });
  const blocking = await blockingRun(deps, thread.id, open);
  if (blocking) throw activeRunError(thread.id, blocking);
  // additional_messages' file_search attachments go to the thread's store (created if it has none),
  // in the run's batch: written with it or not at all.
  const stores = await threadStoreWrites(deps, actor, thread, {
    attached: attachedFiles(body.additional_messages ?? [], (index) => `additional_messages[${index}].`),
  });
  const extra = stores.toolResources
    ? [...stores.statements, setToolResources(db, thread.id, stores.toolResources)]
    : stores.statements;
  const at = deps.now();
  const answer = await startRun(deps, actor, snapshot, context, {
    at,
    thread,
    assistantId: assistant.id,
    settings,
    messages: () => clientMessages(deps, actor, thread, body.additional_messages ?? [], 'additional_messages', at),
    history,
    write: async (messages, run) => {
      if (await insertRunOnThread(db, messages, run, extra)) return;
      // The open run in the way may have been left behind: settled by recovery, it is in the way no more.
      const blocking = await blockingRun(deps, thread.id);
      if (blocking === null && (await insertRunOnThread(db, messages, run, extra))) return;
      throw activeRunError(thread.id, blocking ?? (await openRunOf(db, thread.id)));
    },
    leading: [],
    answer: body.stream === true ? 'stream' : 'queued',
    includeResultContent,
  });
  if (stores.queued) wakeIngestion(deps, context);
  return answer;
}

/** The history of a new thread: nothing before the run's own messages. */
export const NO_HISTORY: History = { messages: [], steps: [] };

/**
 * A run on a thread in one round trip to a database server, where createRun's reads, then its
 * write, take two: nothing is read before the write. What the run's row needs comes from what this
 * process or isolate holds (heldRun); then one transaction carries the thread's history read and
 * the rows, under checks the database makes (the settings' guard fails it if the generation moved;
 * each row is inserted only while the thread is the workspace's and idle). When the thread's
 * messages are known (threads/known-histories.ts: a thread written here, or whose last run,
 * streamed from here, handed its answer back), nothing is read at all: the prompt is built from them and the
 * provider called beside the write (speculate), the write guarded by them too. When any of it
 * does not hold, the answer is null, nothing was written and any admission is given back, and
 * createRun makes the run as before: so every refusal (404, 400, the key revoked) comes from that
 * path, in its order. Only a rate limit's 429 is answered from here, before the thread is looked
 * at. On the embedded file (no guard: reads cost no round trip) the answer is always null.
 */
async function runInOneTrip(
  deps: RunCommandDeps,
  actor: Actor,
  snapshot: Settings,
  threadId: string,
  body: CreateRunBody,
  context: RequestContext,
  includeResultContent: boolean,
): Promise<RunAnswer | null> {
  const thread = { id: threadId, workspaceId: actor.workspaceId };
  // Whatever comes of this run, the thread's messages as known are its history no more.
  const known = knownHistories(deps.db)?.take(thread, deps.config.GATEWAY_MAX_HISTORY_BYTES) ?? null;
  const inputs = body.additional_messages ?? [];
  // Files attached for file_search go to the thread's store, which needs the thread read first.
  if (attachedFiles(inputs, () => '').length > 0) return null;
  const held = await heldRun(deps, actor, snapshot, { thread, body, inputs, param: 'additional_messages' });
  if (!held) return null;
  const { guard, run, messages } = held;
  const options = { answer: answerKind(body), includeResultContent, leading: [] };
  if (known) {
    const write = insertRunWhileIdle(deps.db, [guard, historyGuard(known)], messages, run);
    return speculate(deps, { actor, snapshot, context, held, history: known, write, ...options });
  }
  const history = readHistory(
    deps.db,
    { workspaceId: actor.workspaceId, threadId, runId: null },
    deps.config.GATEWAY_MAX_HISTORY_BYTES,
  );
  history.catch(() => undefined);
  const write = insertRunWhileIdle(deps.db, [guard], messages, run);
  return hostAfterWrite(deps, { actor, snapshot, context, held, history, write, ...options });
}

/**
 * A held run whose history is read in its write's own transaction (the read issued just before a
 * write that carries it: batchWithReads), handed to its host once the write committed, its prompt
 * built from what was read: one round trip before the provider is called. Null, the admission
 * given back, when a guard failed the write (nothing written). Its answer is handed back for the
 * next turn (answerHandedBack). A response takes it too (resources/responses/commands.ts).
 */
export async function hostAfterWrite(
  deps: RunCommandDeps,
  started: Omit<Speculation, 'history'> & { history: Promise<History> },
): Promise<RunAnswer | null> {
  const { actor, snapshot, context, held, history, write, ...options } = started;
  const { run, messages, virtualKey, admission } = held;
  if (!(await unlessWritten(deps, admission, write))) {
    await giveBack(deps, admission, actor.workspaceId);
    return null;
  }
  snapshot.guardHeld();
  const read = await history;
  const whole = { messages: [...read.messages, ...messages], steps: read.steps };
  const prompt = buildPrompt(run, whole, [], promptLimits(run, 0, deps.config));
  const handBack = answerHandedBack(deps, run, whole, options);
  return hostNewRun(deps, run, admission, context, { ...options, ...handBack, preloaded: { virtualKey, prompt } });
}

/**
 * POST /v1/threads/runs in one round trip, as runInOneTrip: the new thread has no history but its
 * messages, so the provider is called beside the write (speculate), which the settings' guard
 * leads. Null, nothing written, when it cannot be (the thread's tool_resources or its messages'
 * file_search attachments need reads; what heldRun needs is not held; the guard failed).
 */
async function threadAndRunInOneTrip(
  deps: RunCommandDeps,
  actor: Actor,
  snapshot: Settings,
  body: CreateThreadAndRunBody,
  context: RequestContext,
): Promise<RunAnswer | null> {
  const inputs = body.thread?.messages ?? [];
  if (body.tool_resources || body.thread?.tool_resources || attachedFiles(inputs, () => '').length > 0) return null;
  const thread = newThread(actor.workspaceId, { metadata: body.thread?.metadata, tool_resources: null }, deps.now());
  const held = await heldRun(deps, actor, snapshot, { thread, body, inputs, param: 'thread.messages' });
  if (!held) return null;
  const write = insertThreadAndRunGuarded(deps.db, [held.guard], thread, held.messages, held.run);
  return speculate(deps, {
    actor,
    snapshot,
    context,
    held,
    history: NO_HISTORY,
    write,
    answer: answerKind(body),
    leading: [['thread.created', toThreadJson(thread)]],
  });
}

/** A run's row made from what this process or isolate holds, admitted, and the guard its write must carry. */
export interface HeldRun {
  guard: RawStatement;
  run: RunRow;
  messages: MessageRow[];
  virtualKey: VirtualKey;
  admission: Admission;
}

/**
 * A new run's row, its messages and its admission, from what this process or isolate holds at the
 * settings' generation last seen (the assistant, the virtual key for its model, the workspace's
 * policies: Settings.keptAssistant, keptVirtualKey, PolicyCache.peek), nothing read; admission
 * comes first, which needs no prompt when no tokens policy matches. Null, nothing counted, when
 * any of it is not held or the request is wrong (its error comes from the path of reads, in its
 * order: a missing thread is a 404 before a bad setting's 400); a 429 when a requests policy refuses
 * it on settings that are still the database's.
 */
async function heldRun(
  deps: RunCommandDeps,
  actor: Actor,
  snapshot: Settings,
  request: {
    thread: ThreadKey;
    body: RunOverrides & { assistant_id: string };
    inputs: ThreadMessageInput[];
    param: string;
  },
): Promise<HeldRun | null> {
  const { thread, body } = request;
  const guard = snapshot.guard();
  if (!guard) return null;
  const assistant = snapshot.keptAssistant(actor.workspaceId, body.assistant_id);
  if (!assistant) return null;
  let prepared: { settings: RunSettings; virtualKey: VirtualKey; messages: MessageRow[]; at: number } | undefined;
  try {
    const settings = runSettings(assistant, body);
    const virtualKey = snapshot.keptVirtualKey(actor.workspaceId, {
      slug: actor.virtualKeySlug,
      model: settings.model,
    });
    if (!virtualKey) return null;
    await checkSandbox(deps.sandbox, settings.tools, {
      assistantId: assistant.id,
      toolsFromRequest: body.tools !== undefined && body.tools !== null,
    });
    const at = deps.now();
    prepared = {
      settings,
      virtualKey,
      messages: await clientMessages(deps, actor, thread, request.inputs, request.param, at),
      at,
    };
  } catch {
    // Its error comes from the path of reads, in its order (a missing thread is a 404 before a bad setting's 400).
    return null;
  }
  const { settings, virtualKey, messages, at } = prepared;
  const run = newRun(
    settings,
    { thread, assistantId: assistant.id, virtualKey, apiKeyId: actor.apiKeyId },
    deps.config,
    at,
  );
  const admission = await admitBeforePrompt(deps, actor, snapshot, virtualKey, run);
  return admission && { guard, run, messages, virtualKey, admission };
}

/**
 * A held run whose prompt is known before its write: what speculate takes. Its events open with
 * `leading`; a response's (`response`) are the Responses API's.
 */
export interface Speculation extends Pick<StreamOptions, 'leading' | 'includeResultContent' | 'response'> {
  actor: Actor;
  snapshot: Settings;
  context: RequestContext;
  held: HeldRun;
  /**
   * What comes before the run's own messages (its thread's, or a response's chain's): its prompt's
   * history, the steps a prompt places among its messages with them.
   */
  history: History;
  /** The write, under way, that makes the run real; false when a guard failed it, writing nothing. */
  write: Promise<boolean>;
  answer: RunAnswerKind;
}

/**
 * A held run whose prompt is known before its write (`history`, what comes before the run's
 * own messages): handed to its host while `write` is under way, so that the provider's call starts beside
 * it. Its events, `thread.run.created` first, leave only once the write has committed; when the
 * write's guards fail it (false: nothing written), the execution stops its provider call and
 * nothing of it is told, the admission is given back, and the answer is null, for the caller to
 * make the run from what it reads. A response takes it too (resources/responses/commands.ts).
 */
export async function speculate(deps: RunCommandDeps, speculation: Speculation): Promise<RunAnswer | null> {
  const { actor, snapshot, context, held, history, write, ...options } = speculation;
  const { run, admission, virtualKey } = held;
  const whole = { messages: [...history.messages, ...held.messages], steps: history.steps };
  const prompt = buildPrompt(run, whole, [], promptLimits(run, 0, deps.config));
  const inserted = unlessWritten(deps, admission, write);
  const written = inserted.then((ok) => {
    if (!ok) throw new Error('the run was not written: a guard failed');
  });
  const handBack = answerHandedBack(deps, run, whole, options);
  try {
    const answer = await hostNewRun(
      deps,
      run,
      admission,
      context,
      { ...options, ...handBack, preloaded: { virtualKey, prompt } },
      written,
    );
    snapshot.guardHeld();
    return answer;
  } catch (error) {
    // Written, or failed otherwise (the database unreachable): that is the answer, as today.
    if (await inserted.catch(() => true)) throw error;
    await giveBack(deps, admission, actor.workspaceId);
    return null;
  }
}

/**
 * A run about to be handed to its host, whose history, all of it, is `history` (its prompt's) once
 * its write commits: the history is held as the run's to answer (KnownHistories.answering), and
 * the host is given `answered`, which the engine tells, where the run executes, how the run
 * settled (deps.ts, Answered) before the client is told it ended. Its answer then extends the
 * known history, for the next turn to be made as this one was, the provider called beside the
 * write (speculate). The history is its thread's, or a response's chain's (knownHistoryKey). A run
 * answered before it executes (queued) is not handed back: what follows it is not known.
 */
function answerHandedBack(
  deps: RunCommandDeps,
  run: RunRow,
  history: History,
  how: { answer: RunAnswerKind; response?: ResponseRow },
): Pick<StreamOptions, 'answered'> {
  const histories = knownHistories(deps.db);
  const key = knownHistoryKey(run, how.response);
  if (how.answer === 'queued' || !histories || !key) return {};
  const answering = histories.answering(key, history);
  return { answered: (answer) => histories.ran(answering, answer) };
}

const answerKind = (body: { stream?: boolean | null }): 'stream' | 'queued' =>
  body.stream === true ? 'stream' : 'queued';

/** What a new run is, and how it comes about; startRun does the rest. */
export interface RunStart {
  /** A response executed as the run (resources/responses/): its row, written by `write`; its id is the run's. */
  response?: ResponseRow;
  /** When the run and its messages are created. */
  at: number;
  thread: ThreadRow;
  assistantId: string;
  settings: RunSettings;
  /** Makes the messages the request adds to the thread with the run, checked (a 400 naming one that is wrong). */
  messages: () => Promise<MessageRow[]>;
  /** The thread's history before them. */
  history: History;
  /** Writes the run and the messages (with its thread, if new) in one batch, or throws and writes nothing. */
  write: (messages: MessageRow[], run: RunRow) => Promise<void>;
  /** The events before thread.run.created: thread.created for a new thread. */
  leading: ServerSentEvent[];
  answer: RunAnswerKind;
  /** Whether the stream's file search steps show their results' content. */
  includeResultContent?: boolean;
  /**
   * Whether the run's answer is handed back for the turn after it (answerHandedBack): when
   * `history` is all of what a next turn would read (the guard of a turn made from it checks).
   */
  handBack?: boolean;
}

/**
 * A new run, in the order it must happen: its virtual key (by the model it runs), its rows, its
 * first prompt, admission (its reservation sized by that prompt), the write, and the host, which
 * gets the prompt and the key: the first turn reads nothing more.
 */
export async function startRun(
  deps: RunCommandDeps,
  actor: Actor,
  snapshot: Settings,
  context: RequestContext,
  start: RunStart,
): Promise<RunAnswer> {
  const { thread, settings } = start;
  const virtualKey = await snapshot.virtualKey(actor.workspaceId, {
    slug: actor.virtualKeySlug,
    model: settings.model,
  });
  const { at } = start;
  const messages = await start.messages();
  const run = newRun(
    settings,
    { thread, assistantId: start.assistantId, virtualKey, apiKeyId: actor.apiKeyId, response: start.response },
    deps.config,
    at,
  );
  const history = { messages: [...start.history.messages, ...messages], steps: start.history.steps };
  const prompt = buildPrompt(run, history, [], promptLimits(run, 0, deps.config));
  const admission = await admit(deps, actor, snapshot, virtualKey, run, firstTurn(deps, run, prompt));
  run.rateLimit = admission.ticket;
  const written = unlessWritten(deps, admission, start.write(messages, run));
  const handBack = start.handBack ? answerHandedBack(deps, run, history, start) : {};
  return hostNewRun(
    deps,
    run,
    admission,
    context,
    {
      answer: start.answer,
      leading: start.leading,
      preloaded: { virtualKey, prompt },
      includeResultContent: start.includeResultContent,
      response: start.response,
      ...handBack,
    },
    written,
  );
}

/** A new run handed to its host (`host`), its stream opening with `leading`, then created and queued. */
async function hostNewRun(
  deps: RunCommandDeps,
  run: RunRow,
  admission: Admission,
  context: RequestContext,
  options: StreamOptions & { answer: RunAnswerKind },
  written?: Promise<unknown>,
): Promise<RunAnswer> {
  const { answer, leading = [], ...rest } = options;
  // Serialised once for the two events that carry it.
  const queued = JSON.stringify(toRunJson(asQueued(run)));
  return host(
    deps,
    run,
    admission,
    answer,
    context,
    { ...rest, leading: [...leading, ['thread.run.created', queued], ['thread.run.queued', queued]] },
    written,
  );
}

/** A run's request messages (`param`: where the request has them) as its thread's, their images checked. */
async function clientMessages(
  deps: RunCommandDeps,
  actor: Actor,
  thread: ThreadKey,
  inputs: ThreadMessageInput[],
  param: string,
  at: number,
): Promise<MessageRow[]> {
  const messages = inputs.map((message, index) => clientMessage(thread, message, `${param}[${index}]`, at));
  await checkImages(deps, actor.workspaceId, inputs, (index) => `${param}[${index}].`);
  await checkCodeAttachments(deps, actor.workspaceId, inputs, (index) => `${param}[${index}].`);
  return messages;
}

/**
 * The run that keeps the thread from taking a new one: its open run, unless that run was left
 * behind (its executor gone, or waiting for tool outputs past its expiry), in which case recovery
 * settles it and there is none.
 */
export async function blockingRun(
  deps: RunCommandDeps,
  threadId: string,
  /** The thread's open run, when the caller read it already (with its other reads). */
  read?: RunRow | null,
): Promise<RunRow | null> {
  const open = read === undefined ? await openRunOf(deps.db, threadId) : read;
  if (!open) return null;
  const now = await reconcileRun(deps, open);
  return holdsThread(now.status) ? now : null;
}

/** GET /v1/threads/{thread_id}/runs: a page of the thread's runs, each as it really stands. */
export async function listRuns(deps: RunCommandDeps, workspaceId: string, threadId: string, query: CursorListQuery) {
  // The page, by the path's thread id, is looked at only once the thread is the workspace's.
  const [, page] = await besideRow(getThread(deps.db, workspaceId, threadId), listRunsPage(deps.db, threadId, query));
  return reconciled(deps, page);
}

/** GET /v1/runs: a page of the workspace's runs across its threads, each settled as listRuns settles them. */
export async function listWorkspaceRuns(deps: RunCommandDeps, workspaceId: string, query: ListWorkspaceRunsQuery) {
  return reconciled(deps, await listWorkspaceRunsPage(deps.db, workspaceId, query));
}

/** A page of runs, each as reconcileRun leaves it: a run whose executor was lost is shown settled. */
async function reconciled(deps: RunCommandDeps, page: { rows: RunRow[]; hasMore: boolean }) {
  return { ...page, rows: await Promise.all(page.rows.map((run) => reconcileRun(deps, run))) };
}

/** POST /v1/threads/{thread_id}/runs/{run_id}: a run's metadata, replaced (absent or null: unchanged). */
export async function modifyRun(
  deps: RunCommandDeps,
  settings: Settings,
  workspaceId: string,
  path: RunPath,
  body: ModifyRunBody,
): Promise<RunRow> {
  const { metadata } = body;
  if (!metadata) return retrieveRun(deps, workspaceId, path);
  const run = await guardedWrite(settings, (guard) =>
    setRunMetadata(deps.db, workspaceId, path.threadId, path.runId, metadata, guard),
  );
  return reconcileRun(deps, run);
}

/** GET …/runs/{run_id}/steps: a page of the run's steps, with the run they belong to. */
export async function listRunSteps(deps: RunCommandDeps, workspaceId: string, path: RunPath, query: CursorListQuery) {
  const { run, read: page } = await withRun(deps, workspaceId, path, (runId) => listStepsPage(deps.db, runId, query));
  return { run, page };
}

/** GET …/runs/{run_id}/steps/{step_id}: one step, with the run it belongs to. */
export async function retrieveRunStep(deps: RunCommandDeps, workspaceId: string, path: RunPath, stepId: string) {
  const { run, read: step } = await withRun(deps, workspaceId, path, (runId) => getStep(deps.db, runId, stepId));
  return { run, step };
}

/**
 * The run `path` names, as it really stands, and what `read` reads by its id, read together (one
 * round trip to a database server): the run's 404 comes first, and what was read beside it is
 * looked at only once it is the workspace's. A run settled just now (left behind) settled its
 * steps with it: they are read again.
 */
async function withRun<T>(
  deps: RunCommandDeps,
  workspaceId: string,
  path: RunPath,
  read: (runId: string) => Promise<T>,
): Promise<{ run: RunRow; read: T }> {
  const beside = read(path.runId);
  beside.catch(() => undefined);
  const found = await getRun(deps.db, workspaceId, path.threadId, path.runId);
  const run = await reconcileRun(deps, found);
  return { run, read: run === found ? await beside : await read(run.id) };
}

/** The steps a run's trace shows events of: its first ones. */
export const MAX_TRACE_STEPS = 100;

/**
 * GET /v1/runs/{run_id}/trace: the workspace's run as it really stands (404 for another
 * workspace's, or a response's), its first steps, and the slug of the key that answered it. The
 * steps and the run's key are read beside the run, by its id (one round trip to a database
 * server), and looked at only once it is the workspace's; a run settled just now has its steps read again.
 */
export async function retrieveRunTrace(deps: RunCommandDeps, workspaceId: string, runId: string) {
  const steps = () => listStepsPage(deps.db, runId, { order: 'asc', limit: MAX_TRACE_STEPS });
  const beside = Promise.all([steps(), getRunVirtualKey(deps.db, runId)]);
  beside.catch(() => undefined);
  const found = await getRunById(deps.db, runId);
  if (!found || found.workspaceId !== workspaceId || found.kind !== 'run')
    throw new ApiError('run_not_found', `No run found with id '${runId}'.`);
  const run = await reconcileRun(deps, found);
  const [page, key] = await beside;
  // The key that answered, as answeringKey finds it: the trace's, else the run's own.
  return { run, steps: run === found ? page : await steps(), virtualKey: run.trace?.virtual_key ?? key?.slug ?? null };
}

/** GET of a run: the run as it really stands, settled first if it was left behind (recovery.ts). */
export async function retrieveRun(deps: RunCommandDeps, workspaceId: string, path: RunPath): Promise<RunRow> {
  return reconcileRun(deps, await getRun(deps.db, workspaceId, path.threadId, path.runId));
}

/**
 * Tool outputs for a run in requires_action: its next turn executes at once. What the turn needs
 * is read together, one round trip to a database server (the run, its steps, its virtual key, its
 * thread's history, with the settings' generation when the request started on settings assumed
 * unchanged), and its prompt is built from them with the outputs in, as the write will leave the
 * step: so the provider is called beside that write, as a new run's is (startRun), and nothing of
 * the turn is told before it commits. The write moves the run only from requires_action: a
 * submission that another (or a cancel, or its expiry) got to first writes nothing, its provider
 * call stops, and it is answered `run_not_active`.
 */
export async function submitToolOutputs(
  deps: RunCommandDeps,
  actor: Actor,
  snapshot: Settings,
  path: RunPath,
  body: SubmitToolOutputsBody,
  context: RequestContext,
): Promise<RunAnswer> {
  const { db, config } = deps;
  // Started on settings assumed unchanged, the submission asks whether its key is live (answered
  // with these reads) before anything else is told; then the run's 404 before anything else (the
  // other reads, by the path's ids, are looked at only once the run is the workspace's).
  const [found, steps, key, history] = await liveBeside(
    snapshot,
    besideRow(
      getRun(db, actor.workspaceId, path.threadId, path.runId),
      listSteps(db, path.runId),
      getRunVirtualKey(db, path.runId),
      readHistory(db, { workspaceId: actor.workspaceId, ...path }, config.GATEWAY_MAX_HISTORY_BYTES),
    ),
  );
  const run = await reconcileRun(deps, found);
  if (run.status !== 'requires_action') {
    throw new ApiError('run_not_active', `Runs in status '${run.status}' do not accept tool outputs.`);
  }
  const step = toolCallsStepInProgress(steps, run.id);
  const outputs = matchToolOutputs(run, body.tool_outputs);
  if (!key || key.revokedAt !== null) {
    throw new ApiError('invalid_virtual_key', "The run's virtual key was revoked; the run cannot continue.");
  }
  const at = deps.now();
  const completed = withToolOutputs(step, outputs, at);
  const turnSteps = steps.map((row) => (row.id === step.id ? completed : row));
  const admission = await admit(deps, actor, snapshot, key, run, nextTurn(deps, run, step, outputs));
  const resumed: RunRow = {
    ...run,
    status: 'in_progress',
    requiredAction: null,
    leaseExpiresAt: at + leaseMs(config),
    rateLimit: admission.ticket,
  };
  const prompt = laterTurnPrompt(resumed, history, turnSteps, config);
  // The thread's history as the turn's prompt was built from it, the run's own steps placed in it:
  // what the turn's answer, handed back, extends for the next run (answerHandedBack).
  const handBack = answerHandedBack(
    deps,
    resumed,
    {
      messages: history.messages,
      steps: [...history.steps, ...turnSteps.map((row) => historyStep(row, run.createdAt))],
    },
    { answer: answerKind(body) },
  );
  const written = unlessWritten(deps, admission, acceptToolOutputs(db, resumed, completed)).then(async (moved) => {
    if (moved) return;
    await settleTokens(deps, admission.ticket, 0);
    throw new ApiError(
      'run_not_active',
      'The run stopped waiting for tool outputs (they were submitted already, or it was cancelled or expired).',
    );
  });
  return host(
    deps,
    resumed,
    admission,
    answerKind(body),
    context,
    {
      leading: [
        ['thread.run.step.completed', toStepJson(completed, resumed)],
        ['thread.run.queued', toRunJson(asQueued(resumed))],
      ],
      preloaded: { virtualKey: key, prompt, steps: turnSteps },
      ...handBack,
    },
    written,
  );
}

/**
 * Cancels a run: one waiting for tool outputs ends here (nothing executes it); one in progress
 * becomes `cancelling` and its host stops it, which settles it `cancelled`.
 */
export async function cancelRun(
  deps: RunCommandDeps,
  workspaceId: string,
  path: RunPath,
  context: RequestContext,
): Promise<RunRow> {
  const run = await retrieveRun(deps, workspaceId, path);
  switch (run.status) {
    case 'requires_action': {
      const settled = await settleRun(deps, run.id, [run.status], { status: 'cancelled' }, settledTrace(run, deps.now));
      return settled.run ?? (await retrieveRun(deps, workspaceId, path));
    }
    case 'in_progress': {
      const [cancelling] = await updateRun(deps.db, run.id, ['in_progress'], { status: 'cancelling' });
      deps.runHost.cancel(run.id, context);
      return cancelling ?? (await retrieveRun(deps, workspaceId, path));
    }
    case 'cancelling':
      return run;
    default:
      throw new ApiError('run_not_active', `Cannot cancel run with status '${run.status}'.`);
  }
}

/**
 * Hands a run put in progress to its host: executing in the background while the queued run is
 * the answer, executing into the event stream that is the answer, or executed before the answer
 * (`ended`: the run as it is then, read back by the caller). `written`, the commit that puts it in
 * progress, may still be under way: the upstream call of a run streamed or waited for starts
 * meanwhile (RunHost.stream, RunHost.execute), and any answer leaves only once it has succeeded.
 * When the host fails, a history held for the turn's answer (`answered`, answerHandedBack) is let
 * go: the turn not made, or its answer lost, what the next run goes on from is read again.
 */
async function host(
  deps: RunCommandDeps,
  run: RunRow,
  admission: Admission,
  answer: RunAnswerKind,
  context: RequestContext,
  options: StreamOptions,
  written: Promise<unknown> = Promise.resolve(),
): Promise<RunAnswer> {
  const events = answer === 'stream' ? deps.runHost.stream(run, options, context, written) : null;
  try {
    if (events) {
      const [readable] = await Promise.all([events, written]);
      return { stream: true, events: readable, headers: admission.headers };
    }
    if (answer === 'queued') {
      await written;
      deps.runHost.start(run, { preloaded: options.preloaded }, context);
      return { stream: false, run: asQueued(run), headers: admission.headers };
    }
    const executed = deps.runHost.execute(
      run,
      { preloaded: options.preloaded, answered: options.answered },
      context,
      written,
    );
    // A failed commit is the answer (the execution ends without a trace, or never reaches the host).
    executed.catch(() => undefined);
    await written;
    await executed;
    return { stream: false, run, headers: admission.headers };
  } catch (error) {
    // A stream nobody will read (its execution ends at the failed commit, writing nothing).
    events?.then((readable) => readable.cancel()).catch(() => undefined);
    await options.answered?.(null);
    throw error;
  }
}

/** The run as it is acknowledged: OpenAI answers createAndRun and starts its stream with `queued`. */
function asQueued(run: RunRow): RunRow {
  return { ...run, status: 'queued', startedAt: null };
}

/**
 * Each tool call of required_action gets exactly one output: an unknown id, a repeated id or a
 * missing call is a 400 naming it, and nothing is written.
 */
function matchToolOutputs(run: RunRow, outputs: { tool_call_id: string; output: string }[]): Map<string, string> {
  const expected = new Set(run.requiredAction?.submit_tool_outputs.tool_calls.map((call) => call.id));
  const byId = new Map<string, string>();
  outputs.forEach((output, index) => {
    const param = `tool_outputs[${index}].tool_call_id`;
    if (!expected.has(output.tool_call_id)) {
      throw new ApiError('invalid_value', `No tool call '${output.tool_call_id}' awaits an output in this run.`, {
        param,
      });
    }
    if (byId.has(output.tool_call_id)) {
      throw new ApiError('invalid_value', `Tool call '${output.tool_call_id}' has more than one output.`, { param });
    }
    byId.set(output.tool_call_id, output.output);
  });
  const missing = [...expected].filter((id) => !byId.has(id));
  if (missing.length > 0) {
    throw new ApiError('invalid_value', `Expected outputs for every tool call; missing: ${missing.join(', ')}.`, {
      param: 'tool_outputs',
    });
  }
  return byId;
}
