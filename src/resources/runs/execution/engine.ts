import type { RawStatement } from '../../../db/client';
import { EXECUTING_STATUSES } from '../../../db/run-statuses';
import { serverError } from '../../../errors';
import { UpstreamError, type Usage } from '../../../providers/types';
import { endTurn } from '../executor-writes';
import { getRunById, listSteps, type NewRun, type StepRow } from '../queries';
import type { History, RunRow } from '../../../db/schema';
import { readHistory } from '../../threads/history';
import { MAX_BYTES as KNOWN_HISTORY_BYTES } from '../../threads/known-histories';
import { upstreamRules } from '../../virtual-keys/upstream-rules';
import { decryptVirtualKeySecret, getVirtualKey } from '../../virtual-keys/commands';
import { toRunJson } from '../wire';
import { toMessageJson } from '../../threads/wire';
import { EventStream } from './event-stream';
import type { EventSink, ServerSentEvent } from '../../../deps';
import { RunStopped } from './executions';
import { failureSettlement, NOT_RECORDED, OutcomeNotRecorded } from './failures';
import { citationSources, searchSettings } from './file-search';
import { FileSearches } from './file-search-round';
import { CodeRuns } from './code-interpreter-round';
import { savedFiles, unshownImages } from './code-interpreter';
import { hostedFunctions, MAX_HOSTED_ROUNDS } from './hosted-tools';
import type { StreamOptions } from '../../../deps';
import { holdLease } from './lease';
import { Outbox } from './outbox';
import { completionBudget, NO_USAGE, sumUsage, turnOutcome } from './outcome';
import { laterTurnPrompt } from './prompt';
import type { Prompt } from '../../../providers/types';
import type { RunDeps } from './run-deps';
import { chargeRun, failRunAlone, logRunEnd, settleRun } from './settle';
import { TraceRecorder } from './trace';
import type { RunTrace } from '../../../db/json-columns';
import { TurnAnswer } from './turn-answer';
import { callUpstream } from './upstream-call';

/**
 * The run engine: one turn of a run, from in progress to where it ends. Each step a client can
 * observe is written to the database and emitted as an event (outbox.ts keeps the two in order).
 * Streamed and non-streamed runs take the same path; a non-streamed run just has no sink.
 *
 *   in_progress ─upstream─> completed | incomplete | requires_action | failed
 *        │  (cancel) cancelling ─> cancelled; (time) expired; (executor lost) failed by recovery.ts
 *   requires_action ─tool outputs─> in_progress ─> …
 *
 * A run is born in progress (rows.ts), and so is a run whose tool outputs were accepted: the
 * caller that put it there owns the turn and hands it to its host, which executes it here. Clients
 * are told `queued` first all the same, as OpenAI does.
 *
 * A turn is one upstream call (upstream-call.ts) streamed into the turn's answer (turn-answer.ts),
 * or several when the model uses the tools the gateway hosts (hosted-tools.ts): a round whose tool
 * calls are all file searches (file-search-round.ts) or code (code-interpreter-round.ts) is
 * answered by the gateway, its step completed with the answers, and the turn calls the upstream
 * again with them (at most MAX_HOSTED_ROUNDS times). How a turn
 * ends is decided by outcome.ts; a turn that stops without its answer settles by failures.ts; the
 * run's expiry and lease are kept by lease.ts.
 */

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

/** The steps before a run's first turn. */
const NO_STEPS: StepRow[] = [];

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
  const { response } = options;
  const events = new EventStream({
    stallMs: deps.config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS,
    slices: deps.slices,
    done: response === undefined,
  });
  const done = (async () => {
    let sink: EventSink = events;
    try {
      // A response's events are the Responses API's, translated from the run's as they are sent.
      if (response) sink = await deps.responseEvents(events, run, response);
      await executeRun(deps, run, { sink, ...options });
    } catch (error) {
      deps.log.error('run stream failed', { run_id: run.id, request_id: requestId, error });
      await sink.send([['error', serverError().body]]);
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
  readonly #answer: TurnAnswer;
  /** How the run searches files (its file_search tool), or null without one. */
  readonly #searches: FileSearches | null;
  /** How the run runs code (its code_interpreter tool), or null without one. */
  readonly #code: CodeRuns | null;
  /** For the run's trace and log line (trace.ts): when the turn started, its key's slug, its provider attempts. */
  readonly #startedAt: number;
  #virtualKeySlug: string | undefined;
  readonly #trace: TraceRecorder;
  /** Who is told how the run settled (StreamOptions.answered), until told. */
  #answered: ExecuteOptions['answered'];

  constructor(deps: RunDeps, run: RunRow, options: ExecuteOptions) {
    this.#deps = deps;
    this.#run = run;
    this.#outbox = new Outbox(options.sink, options.rowsWritten);
    this.#rowsExist = options.rowsWritten
      ? options.rowsWritten.then(
          () => true,
          () => false,
        )
      : Promise.resolve(true);
    // Rows that were never written: their upstream call stops at once.
    void this.#rowsExist.then((exist) => exist || this.#abort.abort(new Error('the run was not written')));
    this.#leading = options.leading ?? [];
    this.#preloaded = options.preloaded;
    this.#answered = options.answered;
    this.#startedAt = deps.now();
    this.#trace = new TraceRecorder(run.trace, deps.now);
    const search = searchSettings(run.tools);
    this.#searches = search && new FileSearches(deps, run, search, this.#abort.signal);
    const answer = new TurnAnswer(deps, this.#outbox, () => this.#run, {
      hosted: hostedFunctions(run.tools),
      includeContent: options.includeResultContent ?? false,
    });
    this.#answer = answer;
    this.#code = run.tools.some((tool) => tool.type === 'code_interpreter')
      ? new CodeRuns(deps, run, (delta) => answer.toolCallDelta(() => delta), this.#abort.signal)
      : null;
  }

  async run(): Promise<void> {
    const deps = this.#deps;
    deps.executions.add(this.#run.id, this.#abort);
    const expiresIn = (this.#run.expiresAt ?? Infinity) - deps.now();
    const releaseLease = holdLease(deps, this.#run, this.#abort, this.#rowsExist);
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
      releaseLease();
      deps.executions.remove(this.#run.id, this.#abort);
      if (this.#answered) await this.#tell(null);
    }
  }

  async #turn(): Promise<void> {
    const { db, config } = this.#deps;
    const run = this.#run;
    const answer = this.#answer;
    const virtualKey = this.#preloaded?.virtualKey ?? (await getVirtualKey(db, run.virtualKeyId));
    this.#virtualKeySlug = virtualKey?.slug;
    if (!virtualKey || virtualKey.revokedAt !== null) {
      throw new UpstreamError('address', 'The virtual key of this run was revoked before it could execute.');
    }
    const rules = await upstreamRules(db, config, { now: this.#deps.now() });
    const addressProblem = this.#deps.upstreamUrls.check(virtualKey.baseUrl, rules);
    if (addressProblem)
      throw new UpstreamError('address', `The virtual key's base_url is not allowed: ${addressProblem}`);

    let { prompt, steps } = this.#preloaded
      ? { prompt: this.#preloaded.prompt, steps: this.#preloaded.steps ?? NO_STEPS }
      : await this.#laterTurn();
    const secret = await decryptVirtualKeySecret(this.#deps.secrets, virtualKey);

    // Each round is one upstream call; a round whose only tool calls are hosted ones is answered
    // here (search results, code's outputs sent back) and the turn goes on with the next round.
    for (let round = 1; ; round++) {
      this.#earlierUsage = sumUsage(steps.map((step) => step.usage));
      answer.sources = citationSources(steps);
      answer.files = savedFiles(steps);
      answer.images = unshownImages(steps);
      const budget = completionBudget(run.maxCompletionTokens, this.#earlierUsage.completion_tokens);
      if (budget !== null && budget <= 0) return this.#finish('length', NO_USAGE);
      if (!prompt.fits) return this.#promptTooLong();
      const call = {
        run: this.#run,
        prompt,
        budget,
        round,
        virtualKey,
        secret,
        rules,
        answer,
        signal: this.#abort.signal,
        trace: this.#trace,
      };
      const { finishReason, usage, servedBy } = await callUpstream(this.#deps, call);
      // The run's log line names the key that answered: a fallback's, when the run's own failed.
      this.#virtualKeySlug = servedBy.slug;
      const calls = answer.calls();
      const toolStep = answer.toolStep;
      const hosted = calls.flatMap((call) => (call.hosted ? [call.hosted.kind] : []));
      if (toolStep && finishReason !== 'length' && hosted.length > 0) {
        if (round > MAX_HOSTED_ROUNDS) {
          throw new UpstreamError(
            'protocol',
            `The model called ${[...new Set(hosted)].join(' and ')} again after ${MAX_HOSTED_ROUNDS} rounds of the gateway's tools in one turn, when told to answer.`,
          );
        }
        await this.#searches?.answer(calls, answer.sources);
        await this.#code?.answer(calls);
        // Calls of the client's functions wait for its outputs (requires_action), the hosted answers kept.
        if (calls.every((call) => call.hosted)) {
          await answer.endHostedRound(toolStep, usage);
          ({ prompt, steps } = await this.#laterTurn());
          continue;
        }
      }
      return this.#finish(finishReason, usage);
    }
  }

  /**
   * A later turn's prompt and the run's steps so far: the thread read again (a first turn's comes
   * built by the use-case that created the run), its own tool calls and their outputs included.
   */
  async #laterTurn(): Promise<{ prompt: Prompt; steps: StepRow[] }> {
    const { db, config } = this.#deps;
    const run = this.#run;
    const [history, steps] = await Promise.all([
      readHistory(
        db,
        {
          workspaceId: run.workspaceId,
          threadId: run.threadId,
          runId: run.id,
          // A response's thread may go on from its previous response's (threads/history.ts).
          ...(run.kind === 'response' ? { chain: { previousResponseId: null } } : {}),
        },
        config.GATEWAY_MAX_HISTORY_BYTES,
      ),
      listSteps(db, run.id),
    ]);
    return { steps, prompt: laterTurnPrompt(run, history, steps, config) };
  }

  /**
   * The upstream finished (or the gateway cut the turn: `length`): records the turn's outcome
   * (outcome.ts) in one commit with the rows it closes.
   */
  async #finish(finishReason: string, turnUsage: Usage): Promise<void> {
    const at = this.#deps.now();
    const run = this.#run;
    const answer = this.#answer;
    const usage = sumUsage([this.#earlierUsage, turnUsage]);
    const toolStep = answer.toolStep;
    const outcome = turnOutcome({
      finishReason,
      toolCalls: toolStep !== null,
      cutAtAnswerCap: answer.cut,
      usage,
      maxPromptTokens: run.maxPromptTokens,
      maxCompletionTokens: run.maxCompletionTokens,
    });

    if (outcome.status === 'requires_action') {
      if (!toolStep) throw new Error('a turn requires action only for its tool calls');
      if (run.kind === 'response') {
        const statements = answer.handOver(toolStep, turnUsage, at);
        await this.#commit(statements, { status: 'completed', completedAt: at, leaseExpiresAt: null, usage });
        return;
      }
      const { statements, requiredAction } = answer.requiresAction(toolStep, turnUsage, at);
      // The usage so far is kept (shown once the run ends): the turn is charged now, not when the run ends.
      await this.#commit(statements, { status: 'requires_action', requiredAction, leaseExpiresAt: null, usage });
      return;
    }

    const ending: Partial<NewRun> =
      outcome.incompleteReason === null
        ? { status: 'completed', completedAt: at }
        : { status: 'incomplete', incompleteDetails: { reason: outcome.incompleteReason }, completedAt: at };
    await this.#commit(answer.ending(outcome, turnUsage, at), { usage, leaseExpiresAt: null, ...ending });
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
      updated = await endTurn(db, this.#run.id, { ...runPatch, trace: this.#traceNow() }, statements);
    } catch (error) {
      this.#outbox.failCommit();
      throw new OutcomeNotRecorded(error);
    }
    if (!updated) {
      this.#outbox.discardCommit();
      if (this.#answered) await this.#tell(null);
      const current = await getRunById(db, this.#run.id);
      if (current?.status === 'cancelling') throw new RunStopped('cancelled');
      if (current) this.#run = current;
      await this.#outbox.send(() => this.#runEvent());
      return;
    }
    this.#run = updated;
    if (this.#answered) {
      await this.#tell(updated.status === 'completed' ? this.#answer.handedBack(KNOWN_HISTORY_BYTES) : null);
    }
    await this.#outbox.committed(() => this.#runEvent());
    await chargeRun(this.#deps, updated);
    await logRunEnd(this.#deps, updated);
  }

  /**
   * Hands back how the run settled, once (StreamOptions.answered), before the event that ends it
   * leaves. A caller gone meanwhile (on Workers, its request ended) is not told: the thread stays
   * answered by the run there (KnownHistories.answering), which no later run guesses from.
   */
  async #tell(answer: History | null): Promise<void> {
    const answered = this.#answered;
    this.#answered = undefined;
    try {
      await answered?.(answer);
    } catch {
      // Gone: nothing to tell it.
    }
  }

  /** The run's trace as it stands: its attempts, the key that answered, its first token's time. */
  #traceNow(cause?: string): RunTrace {
    const firstTokenAt = this.#answer.firstTokenAt;
    return this.#trace.snapshot({
      virtualKey: this.#virtualKeySlug,
      firstTokenMs: firstTokenAt === null ? null : firstTokenAt - this.#startedAt,
      cause,
    });
  }

  /** The execution stopped without an answer: settle the run from what the database holds. */
  async #settleFailure(error: unknown): Promise<void> {
    const { log } = this.#deps;
    const failure = failureSettlement(error, this.#abort.signal.reason, log, this.#run.id);
    let internal = failure.internal;
    try {
      // The rows this turn opened must exist before they are settled (or be known not to).
      await this.#outbox.written().catch((insertError: unknown) => {
        internal = true;
        log.error('could not record a run step', { run_id: this.#run.id, error: insertError });
      });
      const settled = await settleRun(
        this.#deps,
        this.#run.id,
        EXECUTING_STATUSES,
        failure.settlement,
        this.#traceNow(),
        this.#answer.partial(),
      );
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
      const run = await failRunAlone(
        this.#deps,
        this.#run.id,
        EXECUTING_STATUSES,
        NOT_RECORDED,
        this.#traceNow('not_recorded'),
      );
      if (!run) return;
      this.#run = run;
      await this.#outbox.send(() => this.#runEvent());
    } catch (error) {
      this.#deps.log.error('could not fail a run whose outcome could not be recorded', { run_id: this.#run.id, error });
    }
  }

  /**
   * The run's event for its current status, as an object: the event stream serialises it, and a
   * response's events (Deps.responseEvents) read it as it is.
   */
  #runEvent(): ServerSentEvent {
    return [`thread.run.${this.#run.status}`, toRunJson(this.#run)];
  }
}
