import type { Db } from '../../db/client';
import type { ServerSentEvent } from '../../deps';
import type { ErrorBody } from '../../errors';
import { jsonWithText, jsonWithTexts, TextBuilder, TextParts } from '../../lib/text';
import type { EventSink } from '../../deps';
import { searchQueries } from '../runs/execution/file-search';
import { getStep } from '../runs/queries';
import { REASONING_DELTA } from '../runs/execution/turn-answer';
import { codeImageUrl, reasoningItemId, toolItemId } from '../conversations/wire';
import { responseStatus, type ResponseStatus } from './objects';
import type { RunStatus } from '../../db/run-statuses';

/**
 * A response's stream of events, as OpenAI's Responses API sends it, translated from the events
 * the run engine sends for the run that executes the response (an EventSink between the engine
 * and the response's event stream): each batch the engine sends leaves as one batch, each event
 * numbered (`sequence_number`, from 0).
 *
 *   thread.run.created                   → response.created
 *   thread.run.in_progress               → response.in_progress
 *   gateway.reasoning.delta              → response.output_item.added (reasoning), response.content_part.added
 *                                          when it begins, response.reasoning_text.delta; when the
 *                                          answer begins: response.reasoning_text.done,
 *                                          response.content_part.done, response.output_item.done
 *   thread.message.created               → response.output_item.added (message), response.content_part.added
 *   thread.message.delta (text)          → response.output_text.delta
 *   thread.message.delta (annotations)   → response.output_text.annotation.added, one per annotation
 *   thread.message.completed/incomplete  → response.output_text.done, response.content_part.done,
 *                                          response.output_item.done
 *   thread.run.step.delta (a function)   → response.output_item.added (function_call) when it begins,
 *                                          response.function_call_arguments.delta
 *   thread.run.step.delta (file_search)  → response.output_item.added (file_search_call),
 *                                          response.file_search_call.in_progress, .searching
 *   thread.run.step.completed/failed     → response.function_call_arguments.done, or
 *                                          response.file_search_call.completed; response.output_item.done
 *   thread.run.completed                 → response.completed (the whole output, the usage)
 *   thread.run.incomplete                → response.incomplete
 *   thread.run.failed/expired            → response.failed
 *   thread.run.cancelled                 → response.failed, the response `cancelled` (the reference
 *                                          has no event of its own for it)
 *   error                                → error
 *
 * The rest (thread.run.queued, the steps' created and in_progress, thread.message.in_progress, a
 * message step's completion) says nothing the Responses API shows. Items are sent one after the
 * other, each whole, as OpenAI sends them (ResponseEvents says how). The output items' ids and
 * shapes are the ones a conversation's items have (resources/conversations/: a thread's messages
 * and its runs' tool calls as items): the message's own id, `fc_`/`fs_` + the step's id without
 * `step_` + the call's index in its step, `rs_` + the id of the step the reasoning preceded, so that a response's output and its conversation's items
 * name the same things alike.
 *
 * What it holds: the output the response keeps anyway (its messages' text and its reasoning, pieces as the engine
 * streamed them: lib/text.ts) and a little per open item; nothing grows with the number of events.
 */

/** What the whole response object in response.created/in_progress/completed/… shows of the stream. */
export interface ResponseState {
  status: ResponseStatus;
  /**
   * The output items so far, in order. A long message's text is a stand-in that the event's JSON
   * replaces with the text's pieces (jsonWithTexts): the response must hold each item as given.
   */
  output: OutputItem[];
  usage: ResponseUsage | null;
  error: { code: ResponseErrorCode; message: string } | null;
  incomplete_details: { reason: 'max_output_tokens' | 'content_filter' } | null;
  /** In seconds; only for a completed response. */
  completed_at: number | null;
}

/**
 * The response object for a state (the responses' wire module): what the events carry as
 * `response`, with `state.output` as it is given (its texts may be stand-ins: ResponseState).
 */
export type DescribeResponse = (state: ResponseState) => unknown;

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** The error codes a response's `error` may have that a run's `last_error` has too. */
export type ResponseErrorCode = 'server_error' | 'rate_limit_exceeded' | 'invalid_prompt';

export interface OutputTextPart {
  type: 'output_text';
  text: string;
  annotations: (FileCitationAnnotation | ContainerFileCitation)[];
  logprobs: [];
}

export interface FileCitationAnnotation {
  type: 'file_citation';
  file_id: string;
  index: number;
  filename: string;
}

export interface ContainerFileCitation {
  type: 'container_file_citation';
  container_id: string;
  file_id: string;
  start_index: number;
  end_index: number;
  filename: string;
}

export type ItemStatus = 'in_progress' | 'completed' | 'incomplete';

export interface MessageItem {
  id: string;
  type: 'message';
  role: 'assistant';
  content: OutputTextPart[];
  status: ItemStatus;
}

export interface FunctionCallItem {
  id: string;
  type: 'function_call';
  call_id: string;
  name: string;
  arguments: string;
  status: ItemStatus;
}

export interface FileSearchResult {
  file_id: string;
  text: string;
  filename: string;
  score: number;
}

export interface FileSearchCallItem {
  id: string;
  type: 'file_search_call';
  status: 'in_progress' | 'searching' | 'completed' | 'incomplete' | 'failed';
  queries: string[];
  /** Only with `include: ["file_search_call.results"]`; null without. */
  results: FileSearchResult[] | null;
}

export interface CodeInterpreterCallItem {
  type: 'code_interpreter_call';
  id: string;
  status: 'in_progress' | 'interpreting' | 'completed' | 'incomplete' | 'failed';
  container_id: string;
  code: string | null;
  /** Only with `include: ["code_interpreter_call.outputs"]`; null without. */
  outputs: ({ type: 'logs'; logs: string } | { type: 'image'; url: string })[] | null;
}

export interface ReasoningTextPart {
  type: 'reasoning_text';
  text: string;
}

/** What the model reasoned (its provider's reasoning text; no summary: Chat Completions providers give none). */
export interface ReasoningItem {
  type: 'reasoning';
  id: string;
  summary: [];
  content: ReasoningTextPart[];
  status: ItemStatus;
}

export type OutputItem = MessageItem | FunctionCallItem | FileSearchCallItem | CodeInterpreterCallItem | ReasoningItem;

/** A run's usage (the Assistants API's names) as a response's. */
export function responseUsage(usage: RunUsage): ResponseUsage {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: {
      cached_tokens: usage.prompt_token_details?.cached_tokens ?? 0,
      cache_write_tokens: 0,
    },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.total_tokens,
  };
}

interface RunUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_token_details?: { cached_tokens?: number };
  completion_tokens_details?: { reasoning_tokens?: number };
}

/** An Assistants file_citation annotation (runs/execution/file-search.ts, citations) as a response's. */
export function fileCitation(annotation: AssistantsCitation): FileCitationAnnotation {
  // The marker is 【number†filename】: the file's name is what follows the dagger.
  const dagger = annotation.text.indexOf('†');
  const filename = dagger < 0 ? '' : annotation.text.slice(dagger + 1, -1);
  return { type: 'file_citation', file_id: annotation.file_citation.file_id, index: annotation.start_index, filename };
}

interface AssistantsCitation {
  type: 'file_citation';
  text: string;
  start_index: number;
  file_citation: { file_id: string };
}

/**
 * The queries each file search of a step ran, by call id: the Assistants events do not carry them
 * (a file search's arguments are the gateway's business there), its stored step does.
 */
export type SearchedQueries = (stepId: string) => Promise<ReadonlyMap<string, string[]>>;

/** SearchedQueries read from the run's stored step. */
export function storedSearchQueries(db: Db, runId: string): SearchedQueries {
  return async (stepId) => {
    const step = await getStep(db, runId, stepId);
    const queries = new Map<string, string[]>();
    if (step.stepDetails.type !== 'tool_calls') return queries;
    for (const call of step.stepDetails.tool_calls) {
      if (call.type !== 'file_search') continue;
      const searched = searchQueries(call.function.arguments, 0);
      queries.set(call.id, Array.isArray(searched) ? searched : []);
    }
    return queries;
  };
}

export interface ResponseEventsOptions {
  /** The response object for a state: the response's wire module. */
  describe: DescribeResponse;
  /** Whether file_search_call items show their results (`include: ["file_search_call.results"]`). */
  includeSearchResults?: boolean;
  /** Where the queries of a file search come from (storedSearchQueries); without it, none are shown. */
  searchedQueries?: SearchedQueries;
  /** The container the response's code runs in: its code_interpreter_call items' and file links'. */
  containerId?: string | null;
  /** Whether code_interpreter_call items show their outputs (`include: ["code_interpreter_call.outputs"]`). */
  includeCodeOutputs?: boolean;
}

/** What every output item has while it streams: where it is, and how far it has gone. */
interface EntryState {
  /** Its index in the output: -1 until it is announced (output_item.added). */
  outputIndex: number;
  /** Whether its end is known (its status final). */
  finished: boolean;
  /** Whether its last event (output_item.done) has been sent. */
  done: boolean;
}

/** A message of the output: its text as it came. */
interface MessageEntry extends EntryState {
  kind: 'message';
  id: string;
  status: ItemStatus;
  text: TextBuilder;
  annotations: (FileCitationAnnotation | ContainerFileCitation)[];
  /** How its deltas begin (turn-answer.ts writes them so): what the hot path recognises. */
  deltaPrefix: string;
  /** How its output_text.delta events begin, once it has its output index. */
  eventHead: string;
}

interface CallEntry extends EntryState {
  kind: 'call';
  item: FunctionCallItem | FileSearchCallItem | CodeInterpreterCallItem;
  /** A code call's: whether its code's events (delta, done, interpreting) have been sent. */
  codeSent?: boolean;
}

/** What the model reasoned before the answer of a round: its text as it came. */
interface ReasoningEntry extends EntryState {
  kind: 'reasoning';
  id: string;
  status: ItemStatus;
  text: TextBuilder;
}

type OutputEntry = MessageEntry | CallEntry | ReasoningEntry;

/** The entries whose text is held in pieces (TextBuilder): written from them in the events that carry it whole. */
type TextEntry = MessageEntry | ReasoningEntry;

const DELTA_SUFFIX = '}}]}}';
const FIRST_DELTA_SUFFIX = ',"annotations":[]}}]}}';

/**
 * The translation. OpenAI streams a response's output items one after the other, each whole
 * (added, its parts, done) before the next is added; the engine keeps a turn's message open
 * while the turn's tool calls stream after it, ends a step's calls together at the step's end,
 * and may open a message (an empty one, that ends the turn) while a call is still open. So:
 *
 * - A tool call that begins ends the message or the function call before it: the message's text
 *   is whole (the model has moved on to calling tools), as are the call's arguments. Anything
 *   that begins ends the reasoning before it: reasoning comes before the answer it leads to.
 * - An item that begins while a file search is under way (which ends only once the gateway has
 *   searched, at its step's end), or a message that begins while a call is open, waits: it is
 *   announced when the item before it is done, with what it gathered meanwhile in one delta.
 */
export class ResponseEvents implements EventSink {
  readonly #target: EventSink;
  readonly #describe: DescribeResponse;
  readonly #includeSearchResults: boolean;
  readonly #searchedQueries: SearchedQueries | undefined;
  readonly #containerId: string;
  readonly #includeCodeOutputs: boolean;
  #sequence = 0;
  /** The output items announced, in their order; then those waiting their turn. */
  readonly #output: OutputEntry[] = [];
  readonly #waiting: OutputEntry[] = [];
  /** The messages by id, and the tool calls by `<step id>/<index in the step>`. */
  readonly #messages = new Map<string, MessageEntry>();
  readonly #calls = new Map<string, CallEntry>();
  /** The reasonings by the id of the step they precede. */
  readonly #reasonings = new Map<string, ReasoningEntry>();
  /** The message whose text is streaming (announced, not finished): the hot path's. */
  #streaming: MessageEntry | null = null;
  /** The response in progress, as JSON (#emitInProgress). */
  #inProgress: string | null = null;

  constructor(target: EventSink, options: ResponseEventsOptions) {
    this.#target = target;
    this.#describe = options.describe;
    this.#includeSearchResults = options.includeSearchResults ?? false;
    this.#searchedQueries = options.searchedQueries;
    this.#containerId = options.containerId ?? '';
    this.#includeCodeOutputs = options.includeCodeOutputs ?? false;
  }

  send(events: ServerSentEvent[]): Promise<void> {
    // The hot path: a batch of one text delta, read and written as strings, with no async step of its own.
    const [only] = events;
    if (events.length === 1 && only?.[0] === 'thread.message.delta' && typeof only[1] === 'string') {
      const out: ServerSentEvent[] = [];
      if (this.#textDelta(only[1], out)) return this.#target.send(out);
    }
    return this.#sendAll(events);
  }

  async #sendAll(events: ServerSentEvent[]): Promise<void> {
    const out: ServerSentEvent[] = [];
    for (const [name, data] of events) {
      if (name === 'thread.message.delta' && typeof data === 'string' && this.#textDelta(data, out)) continue;
      await this.#translate(name, data, out);
    }
    if (out.length > 0) await this.#target.send(out);
  }

  /** A text delta as turn-answer.ts writes it: its JSON string copied into the event, unparsed but for the text kept. */
  #textDelta(data: string, out: ServerSentEvent[]): boolean {
    const message = this.#streaming;
    if (message === null || !data.startsWith(message.deltaPrefix)) return false;
    const end = data.endsWith(FIRST_DELTA_SUFFIX)
      ? FIRST_DELTA_SUFFIX.length
      : data.endsWith(DELTA_SUFFIX)
        ? DELTA_SUFFIX.length
        : -1;
    if (end < 0) return false;
    const literal = data.slice(message.deltaPrefix.length, data.length - end);
    message.text.push(JSON.parse(literal) as string);
    out.push([
      'response.output_text.delta',
      `${message.eventHead}${literal},"sequence_number":${this.#sequence++},"logprobs":[]}`,
    ]);
    return true;
  }

  async #translate(name: string, data: unknown, out: ServerSentEvent[]): Promise<void> {
    switch (name) {
      case 'thread.run.created':
        return this.#emitInProgress(out, 'response.created');
      case REASONING_DELTA:
        return this.#reasoningDelta(reasoningDeltaOf(data), out);
      case 'thread.run.in_progress':
        return this.#emitInProgress(out, 'response.in_progress');
      case 'thread.message.created':
        this.#message(messageIdOf(data), out);
        return;
      case 'thread.message.delta':
        return this.#messageDelta(messageDeltaOf(data), out);
      case 'thread.message.completed':
      case 'thread.message.incomplete':
        return this.#finish(this.#message(messageIdOf(data), out), name === 'thread.message.completed', out);
      case 'thread.run.step.delta':
        return this.#stepDelta(stepDeltaOf(data), out);
      case 'thread.run.step.completed':
      case 'thread.run.step.failed':
        return this.#closeStep(stepOf(data), name === 'thread.run.step.completed', out);
      case 'thread.run.completed':
      case 'thread.run.incomplete':
      case 'thread.run.failed':
      case 'thread.run.cancelled':
      case 'thread.run.expired':
        return this.#end(runOf(data), out);
      case 'error':
        return this.#error(errorOf(data), out);
      default:
        // Nothing a response shows: thread.run.queued, steps created and in progress, …
        return;
    }
  }

  /** The message of this id: known, or begun now. */
  #message(id: string, out: ServerSentEvent[]): MessageEntry {
    const known = this.#messages.get(id);
    if (known) return known;
    const message: MessageEntry = {
      kind: 'message',
      id,
      outputIndex: -1,
      finished: false,
      done: false,
      status: 'in_progress',
      text: new TextBuilder(),
      annotations: [],
      deltaPrefix: `{"id":${JSON.stringify(id)},"object":"thread.message.delta","delta":{"content":[{"index":0,"type":"text","text":{"value":`,
      eventHead: '',
    };
    this.#messages.set(id, message);
    this.#begin(message, out);
    return message;
  }

  /**
   * A delta the hot path did not take: annotations (citations, known once the answer is whole),
   * text in another form, or text of a message waiting its turn (kept, and sent when it is announced).
   */
  #messageDelta(delta: MessageDelta, out: ServerSentEvent[]): void {
    const message = this.#message(delta.id, out);
    const sent = message.outputIndex >= 0 && !message.done;
    for (const content of delta.delta.content ?? []) {
      const value = content.text?.value;
      if (value) {
        message.text.push(value);
        if (sent) this.#emitTextDelta(message, value, out);
      }
      for (const annotation of content.text?.annotations ?? []) {
        const citation =
          annotation.type === 'file_citation'
            ? fileCitation(annotation)
            : annotation.type === 'file_path'
              ? containerFileCitation(annotation, this.#containerId)
              : null;
        if (citation === null) continue;
        message.annotations.push(citation);
        if (sent)
          this.#emit(out, 'response.output_text.annotation.added', {
            item_id: message.id,
            output_index: message.outputIndex,
            content_index: 0,
            annotation_index: message.annotations.length - 1,
            sequence_number: 0,
            annotation: citation,
          });
      }
    }
  }

  /** A fragment of reasoning: its item begins with the first. */
  #reasoningDelta({ step_id: stepId, delta }: ReasoningDelta, out: ServerSentEvent[]): void {
    let entry = this.#reasonings.get(stepId);
    if (!entry) {
      entry = {
        kind: 'reasoning',
        id: reasoningItemId(stepId),
        outputIndex: -1,
        finished: false,
        done: false,
        status: 'in_progress',
        text: new TextBuilder(),
      };
      this.#reasonings.set(stepId, entry);
      this.#begin(entry, out);
    }
    entry.text.push(delta);
    // Reasoning of an item waiting its turn is sent when it is announced.
    if (entry.outputIndex >= 0 && !entry.done) this.#emitReasoningDelta(entry, delta, out);
  }

  #emitReasoningDelta(entry: ReasoningEntry, delta: string, out: ServerSentEvent[]): void {
    this.#emit(out, 'response.reasoning_text.delta', {
      item_id: entry.id,
      output_index: entry.outputIndex,
      content_index: 0,
      delta,
      sequence_number: 0,
    });
  }

  #emitTextDelta(message: MessageEntry, value: string, out: ServerSentEvent[]): void {
    this.#emit(out, 'response.output_text.delta', {
      item_id: message.id,
      output_index: message.outputIndex,
      content_index: 0,
      delta: value,
      sequence_number: 0,
      logprobs: [],
    });
  }

  #stepDelta(delta: StepDelta, out: ServerSentEvent[]): void {
    const details = delta.delta.step_details;
    if (details?.type !== 'tool_calls') return;
    for (const call of details.tool_calls ?? []) {
      const entry = this.#calls.get(`${delta.id}/${call.index}`) ?? this.#openCall(delta.id, call, out);
      if (entry?.item.type === 'code_interpreter_call') {
        this.#codeDelta(entry, entry.item, call, out);
        continue;
      }
      const args = call.type === 'function' ? call.function?.arguments : undefined;
      if (entry?.item.type !== 'function_call' || !args) continue;
      entry.item.arguments += args;
      // Arguments of a call waiting its turn are sent when it is announced; after its end, not at all.
      if (entry.outputIndex < 0 || entry.done) continue;
      this.#emitArgumentsDelta(entry, args, out);
    }
  }

  /**
   * A code call's delta: its code once whole (the gateway runs it then: code-interpreter-round.ts),
   * then its outputs once it ran. The code is sent whole, in one delta, as soon as it is known.
   */
  #codeDelta(entry: CallEntry, item: CodeInterpreterCallItem, call: ToolCallDelta, out: ServerSentEvent[]): void {
    const code = call.code_interpreter?.input;
    if (code) item.code = code;
    const outputs = call.code_interpreter?.outputs;
    if (outputs && this.#includeCodeOutputs) item.outputs = [...(item.outputs ?? []), ...outputs.map(codeOutput)];
    if (code && entry.outputIndex >= 0 && !entry.done) this.#sendCode(entry, item, out);
  }

  /** A code call's code, whole: its delta, its end, and the call interpreting it. */
  #sendCode(entry: CallEntry, item: CodeInterpreterCallItem, out: ServerSentEvent[]): void {
    if (entry.codeSent) return;
    entry.codeSent = true;
    const at = { output_index: entry.outputIndex, item_id: item.id };
    const code = item.code ?? '';
    if (code !== '') this.#emit(out, 'response.code_interpreter_call_code.delta', { ...at, delta: code });
    this.#emit(out, 'response.code_interpreter_call_code.done', { ...at, code });
    this.#emit(out, 'response.code_interpreter_call.interpreting', at);
  }

  #emitArgumentsDelta(entry: CallEntry, args: string, out: ServerSentEvent[]): void {
    this.#emit(out, 'response.function_call_arguments.delta', {
      item_id: entry.item.id,
      output_index: entry.outputIndex,
      sequence_number: 0,
      delta: args,
    });
  }

  /** A call's first delta (it names the call): its item begins. */
  #openCall(stepId: string, call: ToolCallDelta, out: ServerSentEvent[]): CallEntry | undefined {
    let item: FunctionCallItem | FileSearchCallItem | CodeInterpreterCallItem;
    if (call.type === 'function') {
      item = {
        id: toolItemId('fc', stepId, call.index),
        type: 'function_call',
        call_id: call.id ?? '',
        name: call.function?.name ?? '',
        arguments: '',
        status: 'in_progress',
      };
    } else if (call.type === 'file_search') {
      item = {
        id: toolItemId('fs', stepId, call.index),
        type: 'file_search_call',
        status: 'in_progress',
        queries: [],
        results: null,
      };
    } else if (call.type === 'code_interpreter') {
      item = {
        type: 'code_interpreter_call',
        id: toolItemId('ci', stepId, call.index),
        status: 'in_progress',
        container_id: this.#containerId,
        code: '',
        outputs: null,
      };
    } else return undefined;
    const entry: CallEntry = { kind: 'call', item, outputIndex: -1, finished: false, done: false };
    this.#calls.set(`${stepId}/${call.index}`, entry);
    this.#begin(entry, out);
    return entry;
  }

  /** The item announced and not done, if any. */
  #current(): OutputEntry | undefined {
    const last = this.#output.at(-1);
    return last && !last.done ? last : undefined;
  }

  /**
   * An item begins: announced now, after ending the one before it when that is reasoning, or when
   * a call begins after a message or a function call; or waiting its turn.
   */
  #begin(entry: OutputEntry, out: ServerSentEvent[]): void {
    const current = this.#current();
    if (this.#waiting.length === 0 && current === undefined) return this.#announce(entry, out);
    const endsCurrent =
      this.#waiting.length === 0 &&
      (current?.kind === 'reasoning' ||
        (entry.kind === 'call' && (current?.kind === 'message' || current?.item.type === 'function_call')));
    if (!endsCurrent || current === undefined) {
      this.#waiting.push(entry);
      return;
    }
    this.#finish(current, true, out);
    if (this.#current() === undefined && this.#waiting.length === 0) this.#announce(entry, out);
    else this.#waiting.push(entry);
  }

  /** An item's output_item.added and what it gathered while it waited; its end too, if known already. */
  #announce(entry: OutputEntry, out: ServerSentEvent[]): void {
    entry.outputIndex = this.#output.length;
    this.#output.push(entry);
    if (entry.kind === 'message') {
      entry.eventHead = `{"type":"response.output_text.delta","item_id":${JSON.stringify(entry.id)},"output_index":${entry.outputIndex},"content_index":0,"delta":`;
      this.#emit(out, 'response.output_item.added', {
        output_index: entry.outputIndex,
        sequence_number: 0,
        item: { id: entry.id, type: 'message', role: 'assistant', content: [], status: 'in_progress' },
      });
      this.#emit(out, 'response.content_part.added', {
        item_id: entry.id,
        output_index: entry.outputIndex,
        content_index: 0,
        part: emptyPart(),
      });
      const gathered = entry.text.toString();
      if (gathered) this.#emitTextDelta(entry, gathered, out);
      if (!entry.finished) this.#streaming = entry;
    } else if (entry.kind === 'reasoning') {
      this.#emit(out, 'response.output_item.added', {
        output_index: entry.outputIndex,
        sequence_number: 0,
        item: { type: 'reasoning', id: entry.id, summary: [], content: [], status: 'in_progress' },
      });
      this.#emit(out, 'response.content_part.added', {
        item_id: entry.id,
        output_index: entry.outputIndex,
        content_index: 0,
        part: { type: 'reasoning_text', text: '' },
      });
      const gathered = entry.text.toString();
      if (gathered) this.#emitReasoningDelta(entry, gathered, out);
    } else {
      const item = entry.item;
      this.#emit(out, 'response.output_item.added', {
        output_index: entry.outputIndex,
        sequence_number: 0,
        item: { ...item, ...(item.type === 'function_call' ? { arguments: '', status: 'in_progress' } : {}) },
      });
      if (item.type === 'function_call' && item.arguments) this.#emitArgumentsDelta(entry, item.arguments, out);
      if (item.type === 'file_search_call') {
        // The search runs once the model's answer ends: it is under way from here on.
        const at = { output_index: entry.outputIndex, item_id: item.id };
        this.#emit(out, 'response.file_search_call.in_progress', at);
        this.#emit(out, 'response.file_search_call.searching', at);
      }
      if (item.type === 'code_interpreter_call') {
        this.#emit(out, 'response.code_interpreter_call.in_progress', {
          output_index: entry.outputIndex,
          item_id: item.id,
        });
        if (item.code) this.#sendCode(entry, item, out);
      }
    }
    if (entry.finished) this.#sendEnd(entry, out);
  }

  /** An item's end is known: its last events, if it is announced (else when it is), then the next items' turn. */
  #finish(entry: OutputEntry, completed: boolean, out: ServerSentEvent[]): void {
    if (entry.finished) return;
    entry.finished = true;
    if (entry.kind === 'message') {
      entry.status = completed ? 'completed' : 'incomplete';
      if (this.#streaming === entry) this.#streaming = null;
    } else if (entry.kind === 'reasoning') entry.status = completed ? 'completed' : 'incomplete';
    else if (entry.item.type === 'function_call') entry.item.status = completed ? 'completed' : 'incomplete';
    else entry.item.status = completed ? 'completed' : 'failed';
    if (entry.outputIndex < 0) return;
    this.#sendEnd(entry, out);
    while (this.#current() === undefined) {
      const next = this.#waiting.shift();
      if (!next) break;
      this.#announce(next, out);
    }
  }

  /** The last events of an announced item whose end is known. */
  #sendEnd(entry: OutputEntry, out: ServerSentEvent[]): void {
    entry.done = true;
    if (entry.kind !== 'call') return this.#sendTextEnd(entry, out);
    const item = entry.item;
    if (item.type === 'function_call') {
      // Its arguments are final either way: whole, or as far as they came before the call was cut.
      this.#emit(out, 'response.function_call_arguments.done', {
        item_id: item.id,
        name: item.name,
        output_index: entry.outputIndex,
        sequence_number: 0,
        arguments: item.arguments,
      });
    } else if (item.type === 'code_interpreter_call') {
      if (item.status === 'completed') {
        this.#sendCode(entry, item, out);
        this.#emit(out, 'response.code_interpreter_call.completed', {
          output_index: entry.outputIndex,
          item_id: item.id,
        });
      }
    } else if (item.status === 'completed') {
      this.#emit(out, 'response.file_search_call.completed', { output_index: entry.outputIndex, item_id: item.id });
    }
    this.#emit(out, 'response.output_item.done', {
      output_index: entry.outputIndex,
      sequence_number: 0,
      item: { ...item },
    });
  }

  /**
   * The last events of a message or a reasoning: its whole text in three events (the text done, its
   * part done, its item done), as OpenAI sends them; written from its pieces, never joined.
   */
  #sendTextEnd(entry: TextEntry, out: ServerSentEvent[]): void {
    const { id, outputIndex, text } = entry;
    const message = entry.kind === 'message' ? entry : null;
    const [textDone, partDone, itemDone] = [this.#sequence++, this.#sequence++, this.#sequence++];
    const at = { item_id: id, output_index: outputIndex, content_index: 0 };
    out.push(
      message
        ? [
            'response.output_text.done',
            jsonWithText(
              (value) => ({
                type: 'response.output_text.done',
                ...at,
                text: value,
                sequence_number: textDone,
                logprobs: [],
              }),
              text,
            ),
          ]
        : [
            'response.reasoning_text.done',
            jsonWithText(
              (value) => ({ type: 'response.reasoning_text.done', ...at, text: value, sequence_number: textDone }),
              text,
            ),
          ],
    );
    const part = (value: string): OutputTextPart | ReasoningTextPart =>
      message
        ? { type: 'output_text', text: value, annotations: message.annotations, logprobs: [] }
        : { type: 'reasoning_text', text: value };
    out.push([
      'response.content_part.done',
      jsonWithText(
        (value) => ({ type: 'response.content_part.done', ...at, sequence_number: partDone, part: part(value) }),
        text,
      ),
    ]);
    out.push([
      'response.output_item.done',
      jsonWithText(
        (value) => ({
          type: 'response.output_item.done',
          output_index: outputIndex,
          sequence_number: itemDone,
          item: entry.kind === 'message' ? messageItem(entry, value) : reasoningItem(entry, value),
        }),
        text,
      ),
    ]);
  }

  async #closeStep(step: RunStep, completed: boolean, out: ServerSentEvent[]): Promise<void> {
    const details = step.step_details;
    if (details.type !== 'tool_calls') return;
    const calls = details.tool_calls ?? [];
    const searched = calls.some((call) => call.type === 'file_search') ? await this.#queriesOf(step.id) : undefined;
    for (const [index, call] of calls.entries()) {
      const entry = this.#calls.get(`${step.id}/${index}`);
      if (!entry || entry.finished) continue;
      const item = entry.item;
      if (item.type === 'function_call' && call.type === 'function') {
        item.arguments = call.function?.arguments ?? item.arguments;
      } else if (item.type === 'file_search_call' && call.type === 'file_search') {
        item.queries = searched?.get(call.id) ?? [];
        if (this.#includeSearchResults) item.results = (call.file_search?.results ?? []).map(searchResult);
      } else if (item.type === 'code_interpreter_call' && call.type === 'code_interpreter') {
        item.code = call.code_interpreter?.input ?? item.code;
        if (this.#includeCodeOutputs) item.outputs = (call.code_interpreter?.outputs ?? []).map(codeOutput);
      }
      this.#finish(entry, completed, out);
    }
  }

  async #queriesOf(stepId: string): Promise<ReadonlyMap<string, string[]>> {
    return this.#searchedQueries ? this.#searchedQueries(stepId) : new Map();
  }

  /** The run ended: what is still open ends with it (incomplete), then the response's last event. */
  #end(run: RunObject, out: ServerSentEvent[]): void {
    for (const entry of [...this.#output, ...this.#waiting]) this.#finish(entry, false, out);
    const status = responseStatus(run.status);
    const type =
      status === 'completed'
        ? 'response.completed'
        : status === 'incomplete'
          ? 'response.incomplete'
          : 'response.failed';
    const sequence = this.#sequence++;
    const texts = this.#output.filter((entry): entry is TextEntry => entry.kind !== 'call');
    // The whole output once more, each message's and reasoning's text written from its pieces (jsonWithTexts).
    const event = (values: string[]) => {
      let next = 0;
      const output = this.#output.map((entry) =>
        entry.kind === 'message'
          ? messageItem(entry, values[next++] ?? '')
          : entry.kind === 'reasoning'
            ? reasoningItem(entry, values[next++] ?? '')
            : { ...entry.item },
      );
      const response = this.#describe(this.#state(run, status, output));
      return type === 'response.failed'
        ? { type, sequence_number: sequence, response }
        : { type, response, sequence_number: sequence };
    };
    out.push([
      type,
      jsonWithTexts(
        event,
        texts.map((entry) => entry.text),
      ),
    ]);
  }

  #error(body: ErrorBody, out: ServerSentEvent[]): void {
    const { code, message, param } = body.error;
    this.#emit(out, 'error', { code: code ?? null, message, param: param ?? null });
  }

  /**
   * response.created or response.in_progress: the response in progress, the same in both (a run's
   * events before its end carry no usage, no error, no output), so read from neither and
   * serialised once for the two.
   */
  #emitInProgress(out: ServerSentEvent[], type: 'response.created' | 'response.in_progress'): void {
    this.#inProgress ??= JSON.stringify(
      this.#describe({
        status: 'in_progress',
        output: [],
        usage: null,
        error: null,
        incomplete_details: null,
        completed_at: null,
      }),
    );
    out.push([type, `{"type":"${type}","response":${this.#inProgress},"sequence_number":${this.#sequence++}}`]);
  }

  #state(run: RunObject, status: ResponseState['status'], output: OutputItem[]): ResponseState {
    const reason = run.incomplete_details?.reason;
    return {
      status,
      output,
      usage: run.usage ? responseUsage(run.usage) : null,
      error:
        status === 'failed'
          ? {
              code: responseErrorCode(run.last_error?.code),
              message: run.last_error?.message ?? `The response ${run.status === 'expired' ? 'expired' : 'failed'}.`,
            }
          : null,
      incomplete_details:
        status === 'incomplete'
          ? { reason: reason === 'content_filter' ? 'content_filter' : 'max_output_tokens' }
          : null,
      completed_at: status === 'completed' ? (run.completed_at ?? null) : null,
    };
  }

  /**
   * One event: `type`, then `fields` in the reference's order; a `sequence_number` among them (any
   * value) marks where the reference puts it, else it goes last.
   */
  #emit(out: ServerSentEvent[], type: string, fields: Record<string, unknown>): void {
    const sequence = this.#sequence++;
    const event: Record<string, unknown> = { type, ...fields, sequence_number: sequence };
    out.push([type, JSON.stringify(event)]);
  }
}

const emptyPart = (): OutputTextPart => ({ type: 'output_text', text: '', annotations: [], logprobs: [] });

/** A message's item with `text` as its text (its builder's, or a stand-in: jsonWithText). */
function messageItem(message: MessageEntry, text: string): MessageItem {
  return {
    id: message.id,
    type: 'message',
    role: 'assistant',
    content: [{ type: 'output_text', text, annotations: message.annotations, logprobs: [] }],
    status: message.status,
  };
}

/** A reasoning's item with `text` as its text (its builder's, or a stand-in: jsonWithText). */
function reasoningItem(entry: ReasoningEntry, text: string): ReasoningItem {
  return {
    type: 'reasoning',
    id: entry.id,
    summary: [],
    content: [{ type: 'reasoning_text', text }],
    status: entry.status,
  };
}

/** A run's last_error code as a response's error code: those OpenAI documents for both, else server_error. */
export function responseErrorCode(code: string | undefined): ResponseErrorCode {
  return code === 'rate_limit_exceeded' || code === 'invalid_prompt' ? code : 'server_error';
}

/** An Assistants file_path annotation (a `sandbox:` link to a file the code wrote) as a container_file_citation. */
export function containerFileCitation(annotation: AssistantsFilePath, containerId: string): ContainerFileCitation {
  return {
    type: 'container_file_citation',
    container_id: containerId,
    file_id: annotation.file_path.file_id,
    start_index: annotation.start_index,
    end_index: annotation.end_index,
    filename: annotation.text.split('/').at(-1) ?? annotation.text,
  };
}

interface AssistantsFilePath {
  type: 'file_path';
  text: string;
  start_index: number;
  end_index: number;
  file_path: { file_id: string };
}

/** A code call's output (the Assistants shape) as a code_interpreter_call's (conversations/wire.ts, codeOutputs). */
function codeOutput(output: AssistantsCodeOutput): { type: 'logs'; logs: string } | { type: 'image'; url: string } {
  return output.type === 'logs'
    ? { type: 'logs', logs: output.logs ?? '' }
    : { type: 'image', url: codeImageUrl(output.image?.file_id ?? '') };
}

interface AssistantsCodeOutput {
  type: 'logs' | 'image';
  logs?: string;
  image?: { file_id: string };
}

function searchResult(result: AssistantsSearchResult): FileSearchResult {
  return {
    file_id: result.file_id,
    text: result.content?.map((part) => part.text).join('') ?? '',
    filename: result.file_name,
    score: result.score,
  };
}

// ── What the engine sends, as far as it is read here (runs/wire.ts, turn-answer.ts) ─────────

interface RunObject {
  status: RunStatus;
  usage: RunUsage | null;
  last_error: { code: string; message: string } | null;
  incomplete_details: { reason: string } | null;
  completed_at: number | null;
}

interface MessageDelta {
  id: string;
  delta: { content?: { text?: { value?: string; annotations?: (AssistantsCitation | AssistantsFilePath)[] } }[] };
}

/** turn-answer.ts, REASONING_DELTA. */
interface ReasoningDelta {
  step_id: string;
  delta: string;
}

interface ToolCallDelta {
  index: number;
  id?: string;
  type: string;
  function?: { name?: string; arguments?: string };
  code_interpreter?: { input?: string; outputs?: AssistantsCodeOutput[] };
}

interface StepDelta {
  id: string;
  delta: { step_details?: { type: string; tool_calls?: ToolCallDelta[] } };
}

interface AssistantsSearchResult {
  file_id: string;
  file_name: string;
  score: number;
  content?: { type: 'text'; text: string }[];
}

interface RunStep {
  id: string;
  step_details:
    | { type: 'message_creation' }
    | {
        type: 'tool_calls';
        tool_calls?: {
          id: string;
          type: string;
          function?: { arguments: string };
          file_search?: { results: AssistantsSearchResult[] };
          code_interpreter?: { input: string; outputs: AssistantsCodeOutput[] };
        }[];
      };
}

/**
 * The engine's event data: a JSON string, an object, or TextParts (a long message); whichever it
 * is, read as the engine's own type for the event (it wrote it from that type: runs/wire.ts).
 */
function parsed(data: unknown): unknown {
  if (typeof data === 'string') return JSON.parse(data);
  if (data instanceof TextParts) return JSON.parse(data.toString());
  return data;
}

/**
 * A message event's message id, without parsing the message: its JSON begins with it
 * (threads/wire.ts, toMessageJson), and a long answer's message is TextParts that never need joining.
 */
function messageIdOf(data: unknown): string {
  const head = data instanceof TextParts ? data.parts[0] : data;
  const id = typeof head === 'string' ? /^\{"id":"([^"\\]+)"/.exec(head)?.[1] : undefined;
  return id ?? messageOf(data).id;
}

const runOf = (data: unknown) => parsed(data) as RunObject;
const messageOf = (data: unknown) => parsed(data) as { id: string };
const messageDeltaOf = (data: unknown) => parsed(data) as MessageDelta;
const reasoningDeltaOf = (data: unknown) => parsed(data) as ReasoningDelta;
const stepDeltaOf = (data: unknown) => parsed(data) as StepDelta;
const stepOf = (data: unknown) => parsed(data) as RunStep;
const errorOf = (data: unknown) => parsed(data) as ErrorBody;
