import { batchRaw, type RawStatement } from '../../../db/client';
import { EXECUTING_STATUSES } from '../../../db/run-statuses';
import type { Deps } from '../../../deps';
import { ApiError, serverError } from '../../../errors';
import { newId } from '../../../lib/ids';
import { jsonWithText, TextBuilder, utf8Length, utf8Prefix } from '../../../lib/text';
import type { UpstreamUrlOptions } from '../../../lib/upstream-url';
import { ADAPTERS } from '../../../providers/adapters';
import { streamChatCompletion } from '../../../providers/chat';
import { encodeRequest, type RequestBody } from '../../../providers/request-body';
import { UpstreamError, type UpstreamEvent, type Usage } from '../../../providers/types';
import { ShareTimeout, type Share, type ShareLimits } from '../../../lib/fair-shares';
import { findStores, searchStores, type SearchableStore, type SearchResult } from '../../../retrieval/search';
import {
  endTurn,
  getRunById,
  insertTurnRows,
  leaseMs,
  listSteps,
  messageUpdate,
  renewLease,
  stepUpdate,
  turnRowsInsert,
  type NewRun,
  type RunRow,
  type Settlement,
  type StepRow,
} from '../queries';
import type { FileSearchToolCall, RequiredAction, RunError, ToolCall, ToolCallsDetails } from '../schemas';
import type { MessageContent } from '../../threads/schemas';
import { readHistory } from '../../threads/history';
import { getThread, type MessageRow } from '../../threads/queries';
import { upstreamRules } from '../../virtual-keys/upstream-rules';
import { decryptVirtualKeySecret, getVirtualKey, type VirtualKey } from '../../virtual-keys/commands';
import { toRunJson, toStepJson } from '../wire';
import { toMessageJson } from '../../threads/wire';
import { inlineImages } from '../../files/images';
import { buildChatRequest } from './chat-request';
import { EventStream, type EventSink, type ServerSentEvent } from './event-stream';
import {
  citations,
  citationSources,
  FILE_SEARCH_FUNCTION,
  MAX_SEARCH_ROUNDS,
  searchedArguments,
  searchOutput,
  searchQueries,
  searchSettings,
  storeIdsOf,
  type CitationSource,
  type SearchSettings,
} from './file-search';
import { RunStopped } from './executions';
import type { StreamOptions } from './host';
import { Outbox, type OpenedRows } from './outbox';
import { completionBudget, estimateUsage, NO_USAGE, sumUsage, turnOutcome, upstreamCause, upstreamErrorCode } from './outcome';
import { buildPrompt, promptLimits, REQUEST_FIELDS_BYTES, type Prompt } from './prompt';
import { answerMessage, newStep } from './rows';
import { chargeRun, failRunAlone, logRunEnd, settleRun, type RunEndNote } from './settle';

/**
 * The run engine: the bookkeeping of one turn of a run, from in progress to where it ends, writing
 * each step a client can observe to the database and emitting the same step as an event
 * (outbox.ts keeps the two in order). Streamed and non-streamed runs take the same path; a
 * non-streamed run just has no sink. How a turn ends is decided by outcome.ts.
 *
 *   in_progress ─upstream─> completed | incomplete | requires_action | failed
 *        │  (cancel) cancelling ─> cancelled; (time) expired; (executor lost) failed by recovery.ts
 *   requires_action ─tool outputs─> in_progress ─> …
 *
 * A run is born in progress (resources/runs/execution/rows.ts), and so is a run whose tool outputs were accepted: the
 * caller that put it there owns the turn and hands it to its host, which executes it here. Clients
 * are told `queued` first all the same, as OpenAI does.
 *
 * A turn is one upstream call, or several when the model searches files: a round whose tool calls
 * are all the file_search tool's (file-search.ts) is answered here, its step completed with the
 * results, and the turn calls the upstream again with them (at most MAX_SEARCH_ROUNDS times).
 */

/** Recording how a run ended failed (the write threw); carries what failed, for the log. */
class OutcomeNotRecorded extends Error {
  constructor(readonly reason: unknown) {
    super("the run's outcome could not be recorded");
  }
}

/** The last_error of a run whose outcome could not be recorded: what happened, without internals. */
const NOT_RECORDED = {
  code: 'server_error',
  message: "The gateway could not record the run's outcome: the write to its database failed.",
};

/** The gateway ends the run itself: failed with `lastError`, for the reason `why` (its log line's cause). */
class RunFailed extends Error {
  constructor(
    readonly lastError: RunError,
    readonly why: string,
  ) {
    super(lastError.message);
  }
}

const REQUEST_TOO_LARGE = (bytes: number, limit: number) =>
  `The request to the provider would be ${bytes} bytes, over the gateway's limit of ${limit} (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES): ` +
  "the run's instructions, tools and the turn being answered (its last user message, and the tool calls and outputs since) do not fit, even with the older history left out.";

/** What kept a provider call from starting (lib/fair-shares.ts), as a run's last_error says it. */
const SHARE_LIMITS: Record<keyof ShareLimits, (value: number) => string> = {
  callsPerKey: (n) => `this workspace's ${n} provider calls at once (GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE) were all in flight`,
  calls: (n) => `the gateway's ${n} provider calls at once (GATEWAY_UPSTREAM_CALLS) were all in flight`,
  bytesPerKey: (n) => `this workspace's requests waiting to be sent held its ${n} bytes (GATEWAY_UPSTREAM_BYTES_PER_WORKSPACE)`,
  bytes: (n) => `the requests waiting to be sent held the gateway's ${n} bytes (GATEWAY_UPSTREAM_BYTES)`,
};

/** A body never sent: a stream of it is cancelled, so that nothing it would have read stays open. */
async function cancelBody(body: RequestBody): Promise<void> {
  if (body.body instanceof ReadableStream) await body.body.cancel();
}

/** The steps before a run's first turn. */
const NO_STEPS: StepRow[] = [];

/** Why the tool calls of a turn cut short failed, by what cut them. */
const TOOL_CALLS_CUT = {
  answer_cap: (capBytes: number) =>
    `The answer reached the gateway's limit of ${capBytes} bytes (GATEWAY_MAX_ANSWER_BYTES), which cut the tool calls short.`,
  max_completion_tokens: () => 'The completion token limit cut the tool calls short.',
};

/** A tool call while it streams: its name and arguments arrive in fragments. */
interface StreamingToolCall {
  id: string;
  name: TextBuilder;
  arguments: TextBuilder;
  /** A call of the file_search tool's function, which the gateway answers itself: its search once run. */
  hosted: { search: FileSearchToolCall | null } | null;
}

/** What executing a run uses of the deps. */
export type RunDeps = Pick<
  Deps,
  'db' | 'config' | 'log' | 'secrets' | 'fetch' | 'counters' | 'policyCache' | 'now' | 'slices' | 'blobs' | 'upstreamShares' | 'executions' | 'upstreamUrls'
>;

export interface ExecuteOptions extends StreamOptions {
  /** Where the run's events go: a streamed run's event stream; none for a run that is polled. */
  sink?: EventSink;
  /**
   * The commit of the run's rows, when it is still under way (RunHost.stream): the turn starts its
   * upstream call meanwhile, but sends and writes nothing before it succeeds, and if it fails the
   * execution ends without a trace (the run never existed; its creator answers with the failure).
   */
  rowsWritten?: Promise<unknown>;
}

/**
 * Executes one turn of a run that the caller has just put in progress (by creating it, or by
 * accepting its tool outputs) and so owns: calls the upstream and settles the outcome.
 * Never throws: every failure ends the run in a state the client can see.
 */
export async function executeRun(deps: RunDeps, run: RunRow, options: ExecuteOptions = {}): Promise<void> {
  await new Execution(deps, run, options).run();
}

/**
 * Executes a run into a new event stream, wherever it executes (in this process on Node, in its
 * executor object on Workers): the stream to answer with, and the execution, which never rejects.
 * The stream ends with `done`, after an `error` event if the gateway itself failed once the
 * stream had begun.
 */
export function executeStreamed(
  deps: RunDeps,
  run: RunRow,
  options: StreamOptions & Pick<ExecuteOptions, 'rowsWritten'>,
  requestId?: string,
): { readable: ReadableStream<Uint8Array>; done: Promise<void> } {
  // A client that reads nothing is given as long as a silent upstream.
  const events = new EventStream({ stallMs: deps.config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS, slices: deps.slices });
  const done = (async () => {
    try {
      await executeRun(deps, run, { sink: events, ...options });
    } catch (error) {
      deps.log.error('run stream failed', { run_id: run.id, request_id: requestId, error });
      await events.fail(serverError().body);
    } finally {
      await events.close();
    }
  })();
  return { readable: events.readable, done };
}

class Execution {
  readonly #deps: RunDeps;
  readonly #outbox: Outbox;
  readonly #leading: ServerSentEvent[];
  readonly #preloaded: ExecuteOptions['preloaded'];
  readonly #abort = new AbortController();
  /** Whether the run's rows exist: at once, unless their commit was still under way (ExecuteOptions). */
  readonly #rowsExist: Promise<boolean>;
  #run: RunRow;
  /** Usage of earlier turns of this run (before tool outputs were submitted). */
  #earlierUsage: Usage = NO_USAGE;
  #message: { row: MessageRow; step: StepRow; text: TextBuilder; started: boolean; opened: OpenedRows } | null = null;
  /** The turn's tool calls by the upstream's index (0 to MAX_TOOL_CALLS - 1, checked by the reader). */
  #toolStep: { row: StepRow; calls: Map<number, StreamingToolCall>; opened: OpenedRows } | null = null;
  /**
   * UTF-8 bytes of answer text, tool-call names and arguments this turn kept, over all its rounds
   * (GATEWAY_MAX_ANSWER_BYTES): a model that searches again and again shares one cap.
   */
  #answerBytes = 0;
  /** Whether the turn's answer reached GATEWAY_MAX_ANSWER_BYTES and was cut there. */
  #cut = false;
  /** For the run's log line (settle.ts): when the turn started, its first token, its key's slug. */
  readonly #startedAt: number;
  #firstTokenAt: number | null = null;
  #virtualKeySlug: string | undefined;
  /** How the run searches files (its file_search tool), or null without one. */
  readonly #search: SearchSettings | null;
  /** The stores the run searches, read at its first search. */
  #stores: SearchableStore[] | null = null;
  /** What the run's file search results are, by number: the sources of its answer's citations. */
  #sources: CitationSource[] = [];
  /** Whether events show file search results' content (`include[]`). */
  readonly #includeContent: boolean;

  constructor(deps: RunDeps, run: RunRow, options: ExecuteOptions) {
    this.#deps = deps;
    this.#run = run;
    this.#outbox = new Outbox(options.sink, options.rowsWritten);
    this.#rowsExist = options.rowsWritten ? options.rowsWritten.then(() => true, () => false) : Promise.resolve(true);
    // Rows that were never written: their upstream call stops at once.
    void this.#rowsExist.then((exist) => exist || this.#abort.abort(new Error('the run was not written')));
    this.#leading = options.leading ?? [];
    this.#preloaded = options.preloaded;
    this.#startedAt = deps.now();
    this.#search = searchSettings(run.tools);
    this.#includeContent = options.includeResultContent ?? false;
  }

  async run(): Promise<void> {
    const deps = this.#deps;
    deps.executions.add(this.#run.id, this.#abort);
    const expiresIn = (this.#run.expiresAt ?? Infinity) - deps.now();
    const expiry = setTimeout(() => this.#abort.abort(new RunStopped('expired')), Math.max(0, Math.min(expiresIn, 2 ** 31 - 1)));
    // Renewed a few times per lease, so that one slow renewal does not lose it.
    const renewal = setInterval(() => void this.#renew(), leaseMs(deps.config) / 3);
    try {
      const opened = this.#outbox.send(...this.#leading, () => this.#runEvent());
      // While the run's rows commit, the turn begins (its upstream call); its sends queue behind these.
      if (this.#outbox.queueing) opened.catch(() => undefined);
      else await opened;
      if (expiresIn <= 0) throw new RunStopped('expired');
      await this.#turn();
      await opened;
    } catch (error) {
      // Nothing was acknowledged of a run whose rows were not written: nothing to settle.
      if (await this.#rowsExist) await this.#settleFailure(error);
    } finally {
      clearTimeout(expiry);
      clearInterval(renewal);
      deps.executions.remove(this.#run.id, this.#abort);
    }
  }

  async #renew(): Promise<void> {
    if (!(await this.#rowsExist)) return;
    try {
      const status = await renewLease(this.#deps.db, this.#run.id, this.#deps.now() + leaseMs(this.#deps.config));
      if (status === 'cancelling' || status === null) this.#abort.abort(new RunStopped('cancelled'));
    } catch (error) {
      this.#deps.log.warn('run lease renewal failed', { run_id: this.#run.id, error });
    }
  }

  async #turn(): Promise<void> {
    const { db, config } = this.#deps;
    const run = this.#run;
    const virtualKey = this.#preloaded?.virtualKey ?? (await getVirtualKey(db, run.virtualKeyId));
    this.#virtualKeySlug = virtualKey?.slug;
    if (!virtualKey || virtualKey.revokedAt !== null) {
      throw new UpstreamError('address', 'The virtual key of this run was revoked before it could execute.');
    }
    const rules = await upstreamRules(db, config, { now: this.#deps.now() });
    const addressProblem = this.#deps.upstreamUrls.check(virtualKey.baseUrl, rules);
    if (addressProblem) throw new UpstreamError('address', `The virtual key's base_url is not allowed: ${addressProblem}`);

    let { prompt, steps } = this.#preloaded ? { prompt: this.#preloaded.prompt, steps: NO_STEPS } : await this.#laterTurn();
    const secret = await decryptVirtualKeySecret(this.#deps.secrets, virtualKey);

    // Each round is one upstream call; a round whose only tool calls are file searches is answered
    // here (the search results sent back) and the turn goes on with the next round.
    for (let round = 1; ; round++) {
      this.#earlierUsage = sumUsage(steps.map((step) => step.usage));
      this.#sources = citationSources(steps);
      const budget = completionBudget(run.maxCompletionTokens, this.#earlierUsage.completion_tokens);
      if (budget !== null && budget <= 0) return this.#finish('length', NO_USAGE);
      if (!prompt.fits) return this.#promptTooLong();
      const { finishReason, usage } = await this.#complete(prompt, budget, round, virtualKey, secret, rules);
      // In the upstream's order, as the step records them: result numbers follow it (citationSources).
      const calls = [...(this.#toolStep?.calls.entries() ?? [])].sort(([a], [b]) => a - b).map(([, call]) => call);
      if (finishReason !== 'length' && calls.some((call) => call.hosted)) {
        if (round > MAX_SEARCH_ROUNDS) {
          throw new UpstreamError('protocol', `The model called file_search again after ${MAX_SEARCH_ROUNDS} searches in one turn, when told to answer.`);
        }
        await this.#searchFiles(calls);
        // Calls of the client's functions wait for its outputs (requires_action), the searches' results kept.
        if (calls.every((call) => call.hosted)) {
          await this.#endSearchRound(usage);
          ({ prompt, steps } = await this.#laterTurn());
          continue;
        }
      }
      return this.#finish(finishReason, usage);
    }
  }

  /**
   * One upstream call of the turn, streamed into the turn's message and tool-calls step: how it
   * finished (`length` when the gateway cut it at the answer cap) and its usage. The call waits
   * for its share of the process's provider calls (#share) before its request is built, and holds
   * it until it ends.
   */
  async #complete(
    prompt: Prompt,
    budget: number | null,
    round: number,
    virtualKey: VirtualKey,
    secret: string,
    rules: UpstreamUrlOptions,
  ): Promise<{ finishReason: string; usage: Usage }> {
    const { config } = this.#deps;
    const share = await this.#share(prompt.bytes);
    try {
      const roomBytes = config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES - REQUEST_FIELDS_BYTES - prompt.bytes;
      const messages = await inlineImages(this.#deps, this.#run.workspaceId, prompt.messages, { now: this.#deps.now(), roomBytes, rules });
      const adapter = ADAPTERS[virtualKey.provider];
      const request = adapter.body(buildChatRequest(this.#run, messages, budget, round));
      const body = encodeRequest(request, this.#deps.slices);
      if (body.bytes > config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES) {
        await cancelBody(body);
        throw new RunFailed({ code: 'invalid_prompt', message: REQUEST_TOO_LARGE(body.bytes, config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES) }, 'request_too_large');
      }
      const events = streamChatCompletion(
        { model: request.model, body: body.body },
        {
          fetch: this.#deps.fetch,
          adapter,
          baseUrl: virtualKey.baseUrl,
          options: virtualKey.options,
          secret,
          firstByteTimeoutMs: config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
          queuedMs: share.waitedMs,
          sent: share.sent,
          idleTimeoutMs: config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS,
          signal: this.#abort.signal,
          slices: this.#deps.slices,
        },
      );
      return await this.#read(events, prompt);
    } finally {
      share.end();
    }
  }

  /**
   * This call's share of the provider calls the process makes (Deps.upstreamShares), for the
   * workspace, weighing `bytes` (its request, images aside): waited for in turn within the
   * first-byte timeout, past which the run fails saying which limit kept it.
   */
  async #share(bytes: number): Promise<Share> {
    const { config, upstreamShares } = this.#deps;
    const timeoutMs = config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS;
    try {
      return await upstreamShares.take(this.#run.workspaceId, bytes, timeoutMs, this.#abort.signal);
    } catch (error) {
      if (!(error instanceof ShareTimeout)) throw error;
      const message = `No call to the provider could start within ${timeoutMs} ms: ${SHARE_LIMITS[error.limit](error.value)}.`;
      throw new RunFailed({ code: 'rate_limit_exceeded', message }, 'upstream_busy');
    }
  }

  /** The call's answer, read into the turn's message and tool-calls step (#complete). */
  async #read(events: AsyncGenerator<UpstreamEvent[]>, prompt: Prompt): Promise<{ finishReason: string; usage: Usage }> {
    const { config } = this.#deps;
    const run = this.#run;
    let finishReason: string | null = null;
    let usage: Usage | null = null;
    let invalidUsage = false;
    let completionChars = 0;
    read: for await (const batch of events) {
      for (const event of batch) {
        if (event.type === 'text' || event.type === 'tool_call') this.#firstTokenAt ??= this.#deps.now();
        switch (event.type) {
          case 'text': {
            const text = this.#withinCap(event.text);
            completionChars += text.length;
            if (text) await this.#text(text);
            break;
          }
          case 'tool_call':
            completionChars += await this.#toolCall(event);
            break;
          case 'finish':
            finishReason = event.reason;
            break;
          case 'usage':
            usage = event.usage;
            break;
          case 'invalid_usage':
            // Counted from what was streamed instead (unless a valid report follows); said once a turn.
            usage = null;
            if (!invalidUsage) {
              this.#deps.log.warn('the upstream reported invalid usage; counting it from the streamed answer', { run_id: run.id, field: event.field });
            }
            invalidUsage = true;
            break;
        }
        // Leaving the loop ends the upstream call: the connection is dropped, nothing more is read.
        if (this.#cut) break read;
      }
    }
    // Recording the outcome copies the answer (up to the cap) a few times: in a slice of its own.
    while (this.#deps.slices.spent()) await this.#deps.slices.next();
    if (this.#cut) {
      this.#deps.log.warn('the upstream answer reached the answer cap and was cut', {
        run_id: run.id,
        cap_bytes: config.GATEWAY_MAX_ANSWER_BYTES,
      });
      // Estimated from the prompt as written: inlined images' bytes are not its tokens.
      return { finishReason: 'length', usage: usage ?? estimateUsage(prompt, completionChars) };
    }
    if (finishReason === null) {
      throw new UpstreamError('protocol', 'The upstream stream ended before the answer finished.');
    }
    return { finishReason, usage: usage ?? estimateUsage(prompt, completionChars) };
  }

  // ── File search ────────────────────────────────────────────────────────────────────────────

  /** Runs the searches the model asked for, numbering their results after the run's earlier ones. */
  async #searchFiles(calls: StreamingToolCall[]): Promise<void> {
    const settings = this.#search!;
    let position = 0;
    for (const call of calls) {
      if (!call.hosted) continue;
      const queries = searchQueries(call.arguments.toString(), position++);
      const found = 'problem' in queries ? { output: queries.problem, results: [] } : searchOutput(await this.#searchStores(queries), this.#sources.length);
      this.#sources.push(...found.results.map((result) => ({ fileId: result.file_id })));
      call.hosted.search = {
        id: call.id,
        type: 'file_search',
        file_search: { ranking_options: settings.rankingOptions, results: found.results },
        function: { name: FILE_SEARCH_FUNCTION, arguments: searchedArguments(queries), output: found.output },
      };
    }
  }

  /** The run's stores (its own tool resources' and its thread's), searched for `queries`. */
  async #searchStores(queries: string[]): Promise<SearchResult[]> {
    const { db } = this.#deps;
    const run = this.#run;
    const settings = this.#search!;
    try {
      if (this.#stores === null) {
        const thread = await getThread(db, run.workspaceId, run.threadId);
        this.#stores = await findStores(db, run.workspaceId, storeIdsOf(run.toolResources, thread.toolResources));
      }
      const options = { queries, maxResults: settings.maxResults, scoreThreshold: settings.rankingOptions.score_threshold, filter: null };
      return await searchStores(this.#deps, { workspaceId: run.workspaceId, apiKeyId: run.apiKeyId }, this.#stores, options, this.#abort.signal);
    } catch (error) {
      // The embeddings provider failing, or the workspace's policies refusing its tokens, fail the run saying so.
      if (error instanceof UpstreamError) throw new UpstreamError(error.kind, `file_search could not embed the query: ${error.message}`, error.status);
      if (error instanceof ApiError) throw new UpstreamError('http', `file_search could not search: ${error.message}`, error.status);
      throw error;
    }
  }

  /**
   * A round whose tool calls were all file searches: its step completes with their results (and
   * the round's usage), the message it may have begun with completes, and the turn goes on.
   */
  async #endSearchRound(usage: Usage): Promise<void> {
    const { db, now } = this.#deps;
    const at = now();
    const statements: RawStatement[] = [];
    if (this.#message) statements.push(...this.#closeMessage(null, at));
    const step = this.#toolStep!;
    const patch = { status: 'completed' as const, completedAt: at, stepDetails: this.#toolCallsDetails(), usage };
    step.row = { ...step.row, ...patch };
    statements.push(...this.#toolStepWrite(patch));
    this.#outbox.onCommit(() => ['thread.run.step.completed', toStepJson(step.row, this.#run, this.#includeContent)]);
    try {
      await this.#outbox.written();
      await batchRaw(db, statements);
    } catch (error) {
      this.#outbox.failCommit();
      throw error;
    }
    await this.#outbox.committed();
    this.#message = null;
    this.#toolStep = null;
  }

  /** The turn's tool calls as its step records them, in the upstream's order. */
  #toolCallsDetails(): ToolCallsDetails {
    const calls = [...this.#toolStep!.calls.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, call]): ToolCall =>
        call.hosted?.search ?? { id: call.id, type: 'function', function: { name: call.name.toString(), arguments: call.arguments.toString(), output: null } },
      );
    return { type: 'tool_calls', tool_calls: calls };
  }

  /**
   * A later turn's prompt and the run's steps so far: the thread read again (a first turn's comes
   * built by the use-case that created the run), its own tool calls and their outputs included.
   */
  async #laterTurn(): Promise<{ prompt: Prompt; steps: StepRow[] }> {
    const { db, config } = this.#deps;
    const run = this.#run;
    const [history, steps] = await Promise.all([
      readHistory(db, { workspaceId: run.workspaceId, threadId: run.threadId, runId: run.id }, config.GATEWAY_MAX_HISTORY_BYTES),
      listSteps(db, run.id),
    ]);
    const earlier = sumUsage(steps.map((step) => step.usage));
    return { steps, prompt: buildPrompt(run, history, steps, promptLimits(run, earlier.prompt_tokens, config)) };
  }

  /**
   * The part of `text` that fits in what is left of the turn's answer cap (GATEWAY_MAX_ANSWER_BYTES,
   * in UTF-8 bytes, shared by text, tool-call names and arguments). Reaching past it cuts the turn.
   */
  #withinCap(text: string): string {
    const room = this.#deps.config.GATEWAY_MAX_ANSWER_BYTES - this.#answerBytes;
    const bytes = utf8Length(text);
    if (bytes <= room) {
      this.#answerBytes += bytes;
      return text;
    }
    this.#cut = true;
    const kept = utf8Prefix(text, room);
    this.#answerBytes += utf8Length(kept);
    return kept;
  }

  // ── Streaming into a message or a tool-calls step ──────────────────────────────────────────

  async #text(text: string): Promise<void> {
    if (!this.#message) this.#openMessage();
    const message = this.#message!;
    const first = !message.started;
    message.started = true;
    message.text.push(text);
    // The hot path: the delta is written as a string, not built as an object and serialised.
    await this.#outbox.send([
      'thread.message.delta',
      `{"id":"${message.row.id}","object":"thread.message.delta","delta":{"content":[{"index":0,"type":"text","text":{"value":${JSON.stringify(text)}${first ? ',"annotations":[]' : ''}}}]}}`,
    ]);
  }

  /** Opens the turn's message and its step: announced and inserted with the first delta (outbox.ts). */
  #openMessage(): void {
    const { db, now } = this.#deps;
    const run = this.#run;
    const at = now();
    const row = answerMessage(run, at);
    const step = newStep(run, { type: 'message_creation', message_creation: { message_id: row.id } }, at);
    const opened = this.#outbox.open(
      () => insertTurnRows(db, run.id, { steps: [step], message: row }),
      () => {
        const stepJson = JSON.stringify(toStepJson(step, run));
        const messageJson = JSON.stringify(toMessageJson(row));
        return [
          ['thread.run.step.created', stepJson],
          ['thread.run.step.in_progress', stepJson],
          ['thread.message.created', messageJson],
          ['thread.message.in_progress', messageJson],
        ];
      },
    );
    this.#message = { row, step, text: new TextBuilder(), started: false, opened };
  }

  /** Adds a tool-call fragment, as far as the answer cap allows; answers the characters kept. */
  async #toolCall(event: { index: number; id?: string; name?: string; arguments?: string }): Promise<number> {
    if (!this.#toolStep) this.#openToolStep();
    const step = this.#toolStep!;
    const name = event.name ? this.#withinCap(event.name) : '';
    const args = event.arguments ? this.#withinCap(event.arguments) : '';
    let call = step.calls.get(event.index);
    const isNew = !call;
    if (!call) {
      // Providers name a call in its first fragment: that decides whether it is the file_search tool's.
      const hosted = this.#search !== null && name === FILE_SEARCH_FUNCTION ? { search: null } : null;
      call = { id: event.id ?? newId('call'), name: new TextBuilder(), arguments: new TextBuilder(), hosted };
      step.calls.set(event.index, call);
    }
    call.name.push(name);
    call.arguments.push(args);
    // A file search shows as one delta, as OpenAI's do: its query is the gateway's business.
    if (call.hosted && !isNew) return name.length + args.length;
    const delta = call.hosted
      ? { index: event.index, id: call.id, type: 'file_search', file_search: {} }
      : isNew
        ? { index: event.index, id: call.id, type: 'function', function: { name, arguments: args, output: null } }
        : { index: event.index, type: 'function', function: { ...(name ? { name } : {}), arguments: args } };
    await this.#outbox.send([
      'thread.run.step.delta',
      { id: step.row.id, object: 'thread.run.step.delta', delta: { step_details: { type: 'tool_calls', tool_calls: [delta] } } },
    ]);
    return name.length + args.length;
  }

  /** Opens the turn's tool-calls step: announced and inserted with its first delta (outbox.ts). */
  #openToolStep(): void {
    const { db } = this.#deps;
    const step = newStep(this.#run, { type: 'tool_calls', tool_calls: [] }, this.#deps.now());
    const opened = this.#outbox.open(
      () => insertTurnRows(db, this.#run.id, { steps: [step] }),
      () => {
        const json = JSON.stringify(toStepJson(step, this.#run));
        return [
          ['thread.run.step.created', json],
          ['thread.run.step.in_progress', json],
        ];
      },
    );
    this.#toolStep = { row: step, calls: new Map(), opened };
  }

  // ── Outcomes ───────────────────────────────────────────────────────────────────────────────

  /**
   * The upstream finished (or the gateway cut the turn: `length`): records the turn's outcome
   * (outcome.ts) in one commit with the rows it closes.
   */
  async #finish(finishReason: string, turnUsage: Usage): Promise<void> {
    const { now } = this.#deps;
    const at = now();
    const run = this.#run;
    const usage = sumUsage([this.#earlierUsage, turnUsage]);
    const outcome = turnOutcome({
      finishReason,
      toolCalls: this.#toolStep !== null,
      cutAtAnswerCap: this.#cut,
      usage,
      maxPromptTokens: run.maxPromptTokens,
      maxCompletionTokens: run.maxCompletionTokens,
    });
    const statements: RawStatement[] = [];

    if (outcome.status === 'requires_action') {
      if (this.#message) statements.push(...this.#closeMessage(null, at));
      const step = this.#toolStep!;
      const details = this.#toolCallsDetails();
      step.row = { ...step.row, stepDetails: details, usage: turnUsage };
      statements.push(...this.#toolStepWrite({ stepDetails: details, usage: turnUsage }));
      // The client is asked for its functions' outputs only: file searches of the turn were answered already.
      const requiredAction: RequiredAction = {
        type: 'submit_tool_outputs',
        submit_tool_outputs: {
          tool_calls: details.tool_calls.flatMap((call) =>
            call.type === 'function' ? [{ id: call.id, type: 'function' as const, function: { name: call.function.name, arguments: call.function.arguments } }] : [],
          ),
        },
      };
      // The usage so far is kept (shown once the run ends): the turn is charged now, not when the run ends.
      await this.#commit(statements, { status: 'requires_action', requiredAction, leaseExpiresAt: null, usage });
      return;
    }

    // Every ending turn leaves a message, even an empty one: it carries the step and its usage.
    if (!this.#message) this.#openMessage();
    statements.push(...this.#closeMessage(outcome.messageIncompleteReason, at, turnUsage));
    if (outcome.toolCallsCutBy) {
      const message = TOOL_CALLS_CUT[outcome.toolCallsCutBy](this.#deps.config.GATEWAY_MAX_ANSWER_BYTES);
      statements.push(...this.#failToolStep({ code: 'server_error', message }, at));
    }
    const ending: Partial<NewRun> =
      outcome.incompleteReason === null
        ? { status: 'completed', completedAt: at }
        : { status: 'incomplete', incompleteDetails: { reason: outcome.incompleteReason }, completedAt: at };
    await this.#commit(statements, { usage, leaseExpiresAt: null, ...ending });
  }

  /**
   * The prompt does not fit what max_prompt_tokens leaves for the turn, even with the history left
   * out that truncation may leave out: the run ends incomplete without calling the upstream.
   */
  async #promptTooLong(): Promise<void> {
    const at = this.#deps.now();
    await this.#commit([], {
      status: 'incomplete',
      incompleteDetails: { reason: 'max_prompt_tokens' },
      completedAt: at,
      usage: this.#earlierUsage,
      leaseExpiresAt: null,
    });
  }

  /**
   * Statements that complete the open message's step and end the message: completed, or
   * `incomplete` with a reason (`max_tokens`, `content_filter`). In-memory rows updated to match,
   * but for the message's content: the answer is joined only where it is needed whole, to find
   * citations (after a file search) and for the events of a streamed run; its write takes the
   * pieces it was streamed in (messageUpdate).
   */
  #closeMessage(reason: string | null, at: number, usage?: Usage) {
    const message = this.#message!;
    // Joined only when citations need it: the write and the event take the answer in parts.
    const annotations = this.#sources.length === 0 ? [] : citations(message.text.toString(), this.#sources);
    const messagePatch =
      reason === null
        ? { status: 'completed' as const, completedAt: at }
        : { status: 'incomplete' as const, incompleteAt: at, incompleteDetails: { reason } };
    message.row = { ...message.row, ...messagePatch };
    const stepPatch = { status: 'completed' as const, completedAt: at, usage: usage ?? null };
    message.step = { ...message.step, ...stepPatch };
    // Citations are known once the answer is whole: one delta carries them, before the message ends.
    if (annotations.length > 0) {
      this.#outbox.onCommit(() => [
        'thread.message.delta',
        {
          id: message.row.id,
          object: 'thread.message.delta',
          delta: { content: [{ index: 0, type: 'text', text: { annotations: annotations.map((annotation, index) => ({ index, ...annotation })) } }] },
        },
      ]);
    }
    // The message with its whole answer: a long answer is written from its parts, never joined.
    this.#outbox.onCommit(() => {
      const withText = (value: string) => {
        const content: MessageContent[] = [{ type: 'text', text: { value, annotations } }];
        return toMessageJson({ ...message.row, content });
      };
      return [`thread.message.${messagePatch.status}`, jsonWithText(withText, message.text)];
    });
    this.#outbox.onCommit(() => ['thread.run.step.completed', toStepJson(message.step, this.#run)]);
    const answer = { value: message.text, annotations };
    // Rows whose insert had not started are inserted as they end (outbox.ts, take).
    const runId = this.#run.id;
    if (this.#outbox.take(message.opened)) return turnRowsInsert(runId, { steps: [message.step], message: message.row, answer });
    return [messageUpdate(runId, message.row.id, messagePatch, answer), stepUpdate(runId, message.step.id, stepPatch)];
  }

  #failToolStep(lastError: RunError, at: number) {
    const step = this.#toolStep!;
    const patch = { status: 'failed' as const, failedAt: at, lastError };
    step.row = { ...step.row, ...patch };
    this.#outbox.onCommit(() => ['thread.run.step.failed', toStepJson(step.row, this.#run, this.#includeContent)]);
    return this.#toolStepWrite(patch);
  }

  /** The tool-calls step's change to the database: `patch`, or the step inserted as it now is if its insert had not started (outbox.ts, take). */
  #toolStepWrite(patch: Partial<StepRow>): RawStatement[] {
    const step = this.#toolStep!;
    const runId = this.#run.id;
    return this.#outbox.take(step.opened) ? turnRowsInsert(runId, { steps: [step.row] }) : [stepUpdate(runId, step.row.id, patch)];
  }

  /**
   * Writes the statements and the run's new state in one transaction, then emits their events and
   * the run's. If the run was no longer in progress (cancelled, expired by a sweep), nothing is
   * written and the run's actual state is reported instead. Every commit ends a turn
   * (requires_action or an end), whose tokens are charged then.
   */
  async #commit(statements: RawStatement[], runPatch: Partial<NewRun>) {
    const { db } = this.#deps;
    let updated: RunRow | null;
    try {
      await this.#outbox.written();
      updated = await endTurn(db, this.#run.id, runPatch, statements);
    } catch (error) {
      this.#outbox.failCommit();
      throw new OutcomeNotRecorded(error);
    }
    if (!updated) {
      this.#outbox.discardCommit();
      const current = await getRunById(db, this.#run.id);
      if (current?.status === 'cancelling') throw new RunStopped('cancelled');
      if (current) this.#run = current;
      await this.#outbox.send(() => this.#runEvent());
      return;
    }
    this.#run = updated;
    await this.#outbox.committed(() => this.#runEvent());
    await chargeRun(this.#deps, updated);
    await logRunEnd(this.#deps, updated, this.#endNote());
  }

  #endNote(): RunEndNote {
    const firstTokenMs = this.#firstTokenAt === null ? null : this.#firstTokenAt - this.#startedAt;
    return { virtualKeySlug: this.#virtualKeySlug, firstTokenMs };
  }

  /** The execution stopped without an answer: settle the run from what the database holds. */
  async #settleFailure(error: unknown): Promise<void> {
    const { log } = this.#deps;
    const stopped = error instanceof RunStopped ? error : this.#abort.signal.reason instanceof RunStopped ? this.#abort.signal.reason : null;
    let settlement: Settlement;
    let internal = false;
    if (stopped) {
      settlement = { status: stopped.outcome };
    } else if (error instanceof RunFailed) {
      settlement = { status: 'failed', lastError: error.lastError, cause: error.why };
    } else if (error instanceof UpstreamError) {
      settlement = {
        status: 'failed',
        lastError: { code: upstreamErrorCode(error), message: error.message },
        cause: upstreamCause(error),
      };
    } else if (error instanceof OutcomeNotRecorded) {
      internal = true;
      log.error('could not record how a run ended', { run_id: this.#run.id, error: error.reason });
      settlement = { status: 'failed', lastError: NOT_RECORDED, cause: 'not_recorded' };
    } else {
      internal = true;
      log.error('run failed inside the gateway', { run_id: this.#run.id, error });
      settlement = {
        status: 'failed',
        lastError: { code: 'server_error', message: 'The gateway had an internal error while executing the run.' },
        cause: 'internal',
      };
    }
    try {
      // The rows this turn opened must exist before they are settled (or be known not to).
      await this.#outbox.written().catch((insertError: unknown) => {
        internal = true;
        log.error('could not record a run step', { run_id: this.#run.id, error: insertError });
      });
      const partial = this.#message ? { messageId: this.#message.row.id, text: this.#message.text.toString() } : undefined;
      const settled = await settleRun(this.#deps, this.#run.id, EXECUTING_STATUSES, settlement, partial, this.#endNote());
      this.#run = settled.run ?? (await getRunById(this.#deps.db, this.#run.id)) ?? this.#run;
      const message = settled.message;
      await this.#outbox.send(
        ...(message ? [(): ServerSentEvent => ['thread.message.incomplete', toMessageJson(message)]] : []),
        () => this.#runEvent(),
      );
    } catch (settleError) {
      internal = true;
      log.error('could not record how a run ended', { run_id: this.#run.id, error: settleError });
      await this.#failAlone();
    }
    if (internal) await this.#outbox.send(['error', serverError().body]);
  }

  /**
   * Settling the run failed too: fails the run's row alone, in one small write, so that it ends
   * now and says why instead of waiting for its lease to run out (which would blame a crash).
   */
  async #failAlone(): Promise<void> {
    try {
      const run = await failRunAlone(this.#deps, this.#run.id, EXECUTING_STATUSES, NOT_RECORDED);
      if (!run) return;
      this.#run = run;
      await this.#outbox.send(() => this.#runEvent());
    } catch (error) {
      this.#deps.log.error('could not fail a run whose outcome could not be recorded', { run_id: this.#run.id, error });
    }
  }

  /** The run's event for its current status. */
  #runEvent(): ServerSentEvent {
    return [`thread.run.${this.#run.status}`, JSON.stringify(toRunJson(this.#run))];
  }
}
