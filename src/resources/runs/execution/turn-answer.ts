import { batchRaw, type RawStatement } from '../../../db/client';
import { newId } from '../../../lib/ids';
import { jsonWithText, TextBuilder, utf8Length, utf8Prefix } from '../../../lib/text';
import type { Usage } from '../../../providers/types';
import {
  insertTurnRows,
  messageUpdate,
  stepUpdate,
  turnRowsInsert,
  type ImageFileContent,
  type PartialAnswer,
} from '../executor-writes';
import type { StepRow } from '../queries';
import type { History, HistoryStep, RunRow } from '../../../db/schema';
import type { RequiredAction, RunError, ToolCall, ToolCallsDetails } from '../../../db/json-columns';
import type { MessageContent } from '../../../db/schema';
import type { MessageRow } from '../../threads/queries';
import { toStepJson } from '../wire';
import { toMessageJson } from '../../threads/wire';
import { historyStep } from '../../threads/history';
import { citations, searchedArguments, type CitationSource } from './file-search';
import { filePaths } from './code-interpreter';
import { hostedCall, type HostedCall, type HostedKind } from './hosted-tools';
import type { Outbox, OpenedRows } from './outbox';
import type { TurnOutcome } from './outcome';
import { answerMessage, newStep } from './rows';
import type { RunDeps } from './run-deps';

/** A tool call while it streams: its name and arguments arrive in fragments. */
export interface StreamingToolCall {
  /** The upstream's index of the call, which its step's deltas carry. */
  index: number;
  id: string;
  name: TextBuilder;
  /** Empty for a file search, whose queries are read instead (HostedCall). */
  arguments: TextBuilder;
  /** A call of a hosted tool's function (hosted-tools.ts), which the gateway answers itself: its answer once given. */
  hosted: HostedCall | null;
}

/** Why the tool calls of a turn cut short failed, by what cut them. */
const TOOL_CALLS_CUT = {
  answer_cap: (capBytes: number) =>
    `The answer reached the gateway's limit of ${capBytes} bytes (GATEWAY_MAX_ANSWER_BYTES), which cut the tool calls short.`,
  max_completion_tokens: () => 'The completion token limit cut the tool calls short.',
};

/**
 * The event that carries a response's reasoning as it streams, `{"step_id", "delta"}`: not the
 * Assistants API's, so only a response's stream gets it (responses/events.ts makes it the Responses
 * API's reasoning events). The step it names is the one whose row keeps the text: the first the
 * answer after it opens.
 */
export const REASONING_DELTA = 'gateway.reasoning.delta';

/** What the model reasons before a round's answer: kept for the step that opens next, whose id it has already. */
interface OpenReasoning {
  stepId: string;
  text: TextBuilder;
}

interface OpenMessage {
  row: MessageRow;
  step: StepRow;
  /** The parts before its text: the figures it opens with (image_file). */
  lead: ImageFileContent[];
  text: TextBuilder;
  /** Its text's annotations, once it has ended (#closeMessage). */
  annotations?: unknown[];
  started: boolean;
  opened: OpenedRows;
}

/** The turn's tool-calls step while it is open. */
export interface OpenToolStep {
  row: StepRow;
  /** By the upstream's index (0 to MAX_TOOL_CALLS - 1, checked by the reader). */
  calls: Map<number, StreamingToolCall>;
  opened: OpenedRows;
}

/**
 * A turn's answer as the upstream streams it: its message and its tool-calls step, each opened
 * with its first fragment, their deltas sent as events, and the statements and events that close
 * them (written by the engine's commit, or here at the end of a file search round). Events and
 * rows go through the outbox (outbox.ts), which keeps them in order.
 */
export class TurnAnswer {
  readonly #deps: Pick<RunDeps, 'db' | 'now' | 'config'>;
  readonly #outbox: Outbox;
  readonly #run: () => RunRow;
  readonly #hosted: ReadonlyMap<string, HostedKind>;
  readonly #includeContent: boolean;
  #message: OpenMessage | null = null;
  #toolStep: OpenToolStep | null = null;
  /** Every message and tool-calls step the turn opened, over all its rounds, in the order they were opened. */
  readonly #steps: (OpenMessage | OpenToolStep)[] = [];
  #reasoning: OpenReasoning | null = null;
  /**
   * UTF-8 bytes of answer text, reasoning, tool-call names and arguments this turn kept, over all its rounds
   * (GATEWAY_MAX_ANSWER_BYTES): a model that searches again and again shares one cap.
   */
  #answerBytes = 0;
  #cut = false;
  /** When the turn's first token arrived: for the run's log line (settle.ts). */
  firstTokenAt: number | null = null;
  /** What the run's file search results are, by number: the sources of its answer's citations. */
  sources: CitationSource[] = [];
  /** The files the run's code wrote, by path under /mnt/data: what its answer's `sandbox:` links name. */
  files: ReadonlyMap<string, string> = new Map();
  /** The figures the run's code showed that no message of it has shown yet (unshownImages): the next message's first parts. */
  images: readonly string[] = [];

  /**
   * @param run the run as it now stands
   * @param options.hosted the run's hosted tools (hosted-tools.ts, hostedFunctions), by their function's name
   * @param options.includeContent whether events show file search results' content (`include[]`)
   */
  constructor(
    deps: Pick<RunDeps, 'db' | 'now' | 'config'>,
    outbox: Outbox,
    run: () => RunRow,
    options: { hosted: ReadonlyMap<string, HostedKind>; includeContent: boolean },
  ) {
    this.#deps = deps;
    this.#outbox = outbox;
    this.#run = run;
    this.#hosted = options.hosted;
    this.#includeContent = options.includeContent;
  }

  /** Whether the answer reached GATEWAY_MAX_ANSWER_BYTES and was cut there. */
  get cut(): boolean {
    return this.#cut;
  }

  get hasToolCalls(): boolean {
    return this.#toolStep !== null;
  }

  /** The turn's tool calls, in the upstream's order, as the step records them: result numbers follow it (citationSources). */
  calls(): StreamingToolCall[] {
    return [...(this.#toolStep?.calls.entries() ?? [])].sort(([a], [b]) => a - b).map(([, call]) => call);
  }

  /** The answer so far, for a run settled without it. */
  partial(): PartialAnswer | undefined {
    const message = this.#message;
    return message ? { messageId: message.row.id, lead: message.lead, text: message.text.toString() } : undefined;
  }

  /** Adds a text fragment, as far as the answer cap allows; answers the characters kept. */
  async text(fragment: string): Promise<number> {
    this.firstTokenAt ??= this.#deps.now();
    const text = this.#withinCap(fragment);
    if (!text) return 0;
    const message = this.#message ?? this.#openMessage();
    const first = !message.started;
    message.started = true;
    message.text.push(text);
    // The hot path: the delta is written as a string, not built as an object and serialised, and
    // only when someone receives it (a polled run's deltas are not built at all).
    await this.#outbox.send(() => [
      'thread.message.delta',
      `{"id":"${message.row.id}","object":"thread.message.delta","delta":{"content":[{"index":${message.lead.length},"type":"text","text":{"value":${JSON.stringify(text)}${first ? ',"annotations":[]' : ''}}}]}}`,
    ]);
    return text.length;
  }

  /**
   * Adds a fragment of reasoning, as far as the answer cap allows; answers the characters kept.
   * Providers send it before the answer: what comes once a round's message or calls began is left
   * out (docs/supported-operations.md), so that what is streamed is what is stored, whole, before
   * the item it precedes.
   */
  async reasoning(fragment: string): Promise<number> {
    this.firstTokenAt ??= this.#deps.now();
    if (this.#message !== null || this.#toolStep !== null) return 0;
    const text = this.#withinCap(fragment);
    if (!text) return 0;
    const reasoning = (this.#reasoning ??= { stepId: newId('step'), text: new TextBuilder() });
    reasoning.text.push(text);
    if (this.#run().kind === 'response') {
      await this.#outbox.send(() => [
        REASONING_DELTA,
        `{"step_id":"${reasoning.stepId}","delta":${JSON.stringify(text)}}`,
      ]);
    }
    return text.length;
  }

  /** The round's reasoning, taken by the step that opens now (its id, its text), if there is any. */
  #takeReasoning(): { stepId: string; text: string } | undefined {
    const reasoning = this.#reasoning;
    this.#reasoning = null;
    return reasoning ? { stepId: reasoning.stepId, text: reasoning.text.toString() } : undefined;
  }

  /** Adds a tool-call fragment, as far as the answer cap allows; answers the characters kept. */
  async toolCall(event: { index: number; id?: string; name?: string; arguments?: string }): Promise<number> {
    this.firstTokenAt ??= this.#deps.now();
    const step = this.#toolStep ?? this.#openToolStep();
    const name = event.name ? this.#withinCap(event.name) : '';
    const args = event.arguments ? this.#withinCap(event.arguments) : '';
    let call = step.calls.get(event.index);
    const isNew = !call;
    if (!call) {
      // Providers name a call in its first fragment: that decides whether it is a hosted tool's.
      const kind = this.#hosted.get(name);
      const hosted = kind === undefined ? null : hostedCall(kind);
      call = {
        index: event.index,
        id: event.id ?? newId('call'),
        name: new TextBuilder(),
        arguments: new TextBuilder(),
        hosted,
      };
      step.calls.set(event.index, call);
    }
    call.name.push(name);
    // A search's arguments are read for their queries as they come, and kept as those (searchedArguments).
    if (call.hosted?.kind === 'file_search') call.hosted.queries.push(args);
    else call.arguments.push(args);
    // A hosted call opens with one delta, as OpenAI's do: its arguments are the gateway's business
    // (a code call's input is shown once whole, code-interpreter-round.ts).
    if (call.hosted && !isNew) return name.length + args.length;
    const { index } = event;
    const { id, hosted } = call;
    await this.toolCallDelta(() =>
      hosted?.kind === 'file_search'
        ? { index, id, type: 'file_search', file_search: {} }
        : hosted?.kind === 'code_interpreter'
          ? { index, id, type: 'code_interpreter', code_interpreter: { input: '', outputs: [] } }
          : isNew
            ? { index, id, type: 'function', function: { name, arguments: args, output: null } }
            : { index, type: 'function', function: { ...(name ? { name } : {}), arguments: args } },
    );
    return name.length + args.length;
  }

  /**
   * Sends a delta of a call of the open tool-calls step (a `tool_calls` entry of
   * thread.run.step.delta), built by `delta` only when someone receives the run's events.
   */
  async toolCallDelta(delta: () => Record<string, unknown>): Promise<void> {
    const step = this.#toolStep;
    if (!step) throw new Error('a tool call delta needs the open tool-calls step');
    const stepId = step.row.id;
    await this.#outbox.send(() => [
      'thread.run.step.delta',
      {
        id: stepId,
        object: 'thread.run.step.delta',
        delta: { step_details: { type: 'tool_calls', tool_calls: [delta()] } },
      },
    ]);
  }

  /**
   * A round whose tool calls were all hosted (file searches, code): its step completes with their
   * answers (and the round's usage), the message it may have begun with completes, and the turn
   * goes on with a new message and step.
   */
  async endHostedRound(toolStep: OpenToolStep, usage: Usage): Promise<void> {
    const at = this.#deps.now();
    const statements: RawStatement[] = [];
    if (this.#message) statements.push(...this.#closeMessage(this.#message, null, at));
    const patch = { status: 'completed' as const, completedAt: at, stepDetails: toolCallsDetails(toolStep), usage };
    toolStep.row = { ...toolStep.row, ...patch };
    statements.push(...this.#toolStepWrite(toolStep, patch));
    this.#outbox.onCommit(() => [
      'thread.run.step.completed',
      toStepJson(toolStep.row, this.#run(), this.#includeContent),
    ]);
    try {
      await this.#outbox.written();
      await batchRaw(this.#deps.db, statements);
    } catch (error) {
      this.#outbox.failCommit();
      throw error;
    }
    await this.#outbox.committed();
    this.#message = null;
    this.#toolStep = null;
  }

  /** The open tool-calls step, when the turn has one. */
  get toolStep(): OpenToolStep | null {
    return this.#toolStep;
  }

  /**
   * A turn that waits for the client's outputs: the statements that record its tool calls (and
   * close its message), and what the run requires, the client's functions only: hosted calls of
   * the turn were answered already.
   */
  requiresAction(
    toolStep: OpenToolStep,
    turnUsage: Usage,
    at: number,
  ): { statements: RawStatement[]; requiredAction: RequiredAction } {
    const statements: RawStatement[] = [];
    if (this.#message) statements.push(...this.#closeMessage(this.#message, null, at));
    const details = toolCallsDetails(toolStep);
    toolStep.row = { ...toolStep.row, stepDetails: details, usage: turnUsage };
    statements.push(...this.#toolStepWrite(toolStep, { stepDetails: details, usage: turnUsage }));
    const requiredAction: RequiredAction = {
      type: 'submit_tool_outputs',
      submit_tool_outputs: {
        tool_calls: details.tool_calls.flatMap((call) =>
          call.type === 'function'
            ? [
                {
                  id: call.id,
                  type: 'function' as const,
                  function: { name: call.function.name, arguments: call.function.arguments },
                },
              ]
            : [],
        ),
      },
    };
    return { statements, requiredAction };
  }

  /**
   * A response's turn that ends with calls of the client's functions: where a run would wait for
   * their outputs, a response completes with the calls as its output, and the next response gives
   * the outputs (resources/responses/). The step completes with them unanswered.
   */
  handOver(toolStep: OpenToolStep, turnUsage: Usage, at: number): RawStatement[] {
    const statements: RawStatement[] = [];
    if (this.#message) statements.push(...this.#closeMessage(this.#message, null, at));
    const patch = {
      status: 'completed' as const,
      completedAt: at,
      stepDetails: toolCallsDetails(toolStep),
      usage: turnUsage,
    };
    toolStep.row = { ...toolStep.row, ...patch };
    this.#outbox.onCommit(() => [
      'thread.run.step.completed',
      toStepJson(toolStep.row, this.#run(), this.#includeContent),
    ]);
    statements.push(...this.#toolStepWrite(toolStep, patch));
    return statements;
  }

  /**
   * A turn that ends the run: its message (every ending turn leaves one, even empty: it carries
   * the step and its usage) closed as the outcome says, and its tool calls failed if they were cut.
   */
  ending(outcome: Exclude<TurnOutcome, { status: 'requires_action' }>, turnUsage: Usage, at: number): RawStatement[] {
    const message = this.#message ?? this.#openMessage();
    const statements = this.#closeMessage(message, outcome.messageIncompleteReason, at, turnUsage);
    if (outcome.toolCallsCutBy && this.#toolStep) {
      const lastError = {
        code: 'server_error',
        message: TOOL_CALLS_CUT[outcome.toolCallsCutBy](this.#deps.config.GATEWAY_MAX_ANSWER_BYTES),
      };
      statements.push(...this.#failToolStep(this.#toolStep, lastError, at));
    }
    return statements;
  }

  /**
   * What the turn wrote, over all its rounds, as its commits stored it, for the run's Answered
   * (deps.ts): its messages (their content as messageUpdate writes it: the figures, then the text
   * and its annotations); and its steps, tool calls (the gateway's, answered in its rounds, or, a
   * response's, the client's functions it ended on: handOver) and message creations, in the order
   * they were opened, which places the calls among the messages. Null
   * before it ended so (a step not completed, a message not closed), or when the turn kept more
   * than `maxBytes` of answer (its text is not joined then), or its steps' details are more.
   */
  handedBack(maxBytes: number): History | null {
    if (this.#answerBytes > maxBytes) return null;
    const runCreatedAt = this.#run().createdAt;
    const placed = (step: StepRow) => historyStep(step, runCreatedAt);
    const messages: MessageRow[] = [];
    const steps: HistoryStep[] = [];
    let detailsBytes = 0;
    for (const opened of this.#steps) {
      if ('text' in opened) {
        if (opened.step.status !== 'completed' || !opened.annotations) return null;
        messages.push(endedMessage(opened));
        steps.push(placed(opened.step));
      } else {
        if (opened.row.status !== 'completed') return null;
        detailsBytes += utf8Length(JSON.stringify(opened.row.stepDetails));
        steps.push(placed(opened.row));
      }
    }
    if (messages.length === 0 && detailsBytes === 0) return null;
    if (detailsBytes > maxBytes) return null;
    // Its message creations too when it called no tool: they place the calls of an earlier turn
    // of the run (before its tool outputs), which the known history keeps them for (placedSteps).
    return { messages, steps };
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

  /** Opens the turn's message and its step: announced and inserted with the first delta (outbox.ts). */
  #openMessage(): OpenMessage {
    const { db, now } = this.#deps;
    const run = this.#run();
    const at = now();
    // A response shows its figures in its code calls' items, not in its message (resources/responses/).
    const lead: ImageFileContent[] =
      run.kind === 'run' ? this.images.map((fileId) => ({ type: 'image_file', image_file: { file_id: fileId } })) : [];
    this.images = [];
    const row = answerMessage(run, at, lead);
    const step = newStep(
      run,
      { type: 'message_creation', message_creation: { message_id: row.id } },
      at,
      this.#takeReasoning(),
    );
    const opened = this.#outbox.open(
      () => insertTurnRows(db, run.id, { steps: [step], message: row }),
      () => {
        const stepJson = JSON.stringify(toStepJson(step, run));
        // As OpenAI's: the message is announced empty, and its parts come as deltas, the figures first.
        const messageJson = JSON.stringify(toMessageJson({ ...row, content: [] }));
        const events: [string, string][] = [
          ['thread.run.step.created', stepJson],
          ['thread.run.step.in_progress', stepJson],
          ['thread.message.created', messageJson],
          ['thread.message.in_progress', messageJson],
        ];
        if (lead.length > 0) {
          const content = lead.map((part, index) => ({ index, ...part }));
          const delta = { id: row.id, object: 'thread.message.delta', delta: { content } };
          events.push(['thread.message.delta', JSON.stringify(delta)]);
        }
        return events;
      },
    );
    this.#message = { row, step, lead, text: new TextBuilder(), started: false, opened };
    this.#steps.push(this.#message);
    return this.#message;
  }

  /** Opens the turn's tool-calls step: announced and inserted with its first delta (outbox.ts). */
  #openToolStep(): OpenToolStep {
    const { db } = this.#deps;
    const run = this.#run();
    const step = newStep(run, { type: 'tool_calls', tool_calls: [] }, this.#deps.now(), this.#takeReasoning());
    const opened = this.#outbox.open(
      () => insertTurnRows(db, run.id, { steps: [step] }),
      () => {
        const json = JSON.stringify(toStepJson(step, run));
        return [
          ['thread.run.step.created', json],
          ['thread.run.step.in_progress', json],
        ];
      },
    );
    this.#toolStep = { row: step, calls: new Map(), opened };
    this.#steps.push(this.#toolStep);
    return this.#toolStep;
  }

  /**
   * Statements that complete the message's step and end the message: completed, or `incomplete`
   * with a reason (`max_tokens`, `content_filter`). In-memory rows updated to match, but for the
   * message's content: the answer is joined only where it is needed whole, to find citations
   * (after a file search) and for the events of a streamed run; its write takes the pieces it was
   * streamed in (messageUpdate).
   */
  #closeMessage(message: OpenMessage, reason: string | null, at: number, usage?: Usage): RawStatement[] {
    const text = this.sources.length === 0 && this.files.size === 0 ? '' : message.text.toString();
    const annotations = [
      ...(this.sources.length === 0 ? [] : citations(text, this.sources)),
      ...filePaths(text, this.files),
    ].sort((a, b) => a.start_index - b.start_index);
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
          delta: {
            content: [
              {
                index: message.lead.length,
                type: 'text',
                text: { annotations: annotations.map((annotation, index) => ({ index, ...annotation })) },
              },
            ],
          },
        },
      ]);
    }
    // The message with its whole answer: a long answer is written from its parts, never joined.
    this.#outbox.onCommit(() => {
      const withText = (value: string) => {
        const content: MessageContent[] = [...message.lead, { type: 'text', text: { value, annotations } }];
        return toMessageJson({ ...message.row, content });
      };
      return [`thread.message.${messagePatch.status}`, jsonWithText(withText, message.text)];
    });
    this.#outbox.onCommit(() => ['thread.run.step.completed', toStepJson(message.step, this.#run())]);
    message.annotations = annotations;
    const answer = { lead: message.lead, value: message.text, annotations };
    // Rows whose insert had not started are inserted as they end (outbox.ts, take).
    const runId = this.#run().id;
    if (this.#outbox.take(message.opened))
      return turnRowsInsert(runId, { steps: [message.step], message: message.row, answer });
    return [messageUpdate(runId, message.row.id, messagePatch, answer), stepUpdate(runId, message.step.id, stepPatch)];
  }

  #failToolStep(step: OpenToolStep, lastError: RunError, at: number): RawStatement[] {
    const patch = { status: 'failed' as const, failedAt: at, lastError };
    step.row = { ...step.row, ...patch };
    this.#outbox.onCommit(() => ['thread.run.step.failed', toStepJson(step.row, this.#run(), this.#includeContent)]);
    return this.#toolStepWrite(step, patch);
  }

  /** The tool-calls step's change to the database: `patch`, or the step inserted as it now is if its insert had not started (outbox.ts, take). */
  #toolStepWrite(step: OpenToolStep, patch: Partial<StepRow>): RawStatement[] {
    const runId = this.#run().id;
    return this.#outbox.take(step.opened)
      ? turnRowsInsert(runId, { steps: [step.row] })
      : [stepUpdate(runId, step.row.id, patch)];
  }
}

/** An ended message as its commit stored it (messageUpdate): the figures, then the text and its annotations. */
function endedMessage(message: OpenMessage): MessageRow {
  const text = { value: message.text.toString(), annotations: message.annotations ?? [] };
  return { ...message.row, content: [...message.lead, { type: 'text', text }] };
}

/**
 * The turn's tool calls as its step records them, in the upstream's order: a hosted call's
 * answer, or the call as made (a search not answered with the queries it asked for).
 */
function toolCallsDetails(step: OpenToolStep): ToolCallsDetails {
  const calls = [...step.calls.entries()]
    .sort(([a], [b]) => a - b)
    .map(([, call]): ToolCall => {
      if (call.hosted?.done) return call.hosted.done;
      const args =
        call.hosted?.kind === 'file_search'
          ? searchedArguments(call.hosted.queries.queries())
          : call.arguments.toString();
      return { id: call.id, type: 'function', function: { name: call.name.toString(), arguments: args, output: null } };
    });
  return { type: 'tool_calls', tool_calls: calls };
}
