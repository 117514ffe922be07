import type { Slices } from '../lib/slices';
import type { ProviderCallOutcome, ProviderCallTimer } from '../metrics/gateway';
import { silenceTimeout } from '../lib/time';
import type { ProviderAdapter, UpstreamOperation } from './adapters';
import { readServerSentData } from './sse-reader';
import { errorDetail, MAX_ERROR_MESSAGE_CHARS, networkFailure, redact } from './upstream-text';
import type { RequestBody } from './request-body';
import {
  isSuccess,
  MAX_TOOL_CALLS,
  UpstreamError,
  type UpstreamAnswer,
  type UpstreamEvent,
  type UpstreamFetch,
} from './types';

/**
 * One streamed Chat Completions call: sends the request, then yields the answer as normalised
 * events while it arrives: the events of each read together (one hand-over per read, not per
 * event), the texts of consecutive chunks as one (the client gets them at the same moment anyway).
 * Fails with UpstreamError on a non-2xx answer, a malformed chunk, a dropped connection, or
 * silence: no response within `firstByteTimeoutMs` (connecting and the response headers
 * included), or a gap longer than `idleTimeoutMs` without progress (comments and keep-alive lines
 * are not progress).
 *
 * Every byte of the answer is hostile input, bounded here: an error body is read up to
 * MAX_ERROR_BODY_BYTES (decompressed) and the connection dropped, an event-stream line or event up
 * to SSE_LIMITS, and every field the engine uses is checked (types, tool-call indices,
 * usage). How much answer text the engine keeps is the engine's bound (GATEWAY_MAX_ANSWER_BYTES).
 */

export interface ChatCallOptions {
  fetch: UpstreamFetch;
  adapter: ProviderAdapter;
  baseUrl: string;
  options: Record<string, string | undefined>;
  secret: string;
  firstByteTimeoutMs: number;
  /** How long of `firstByteTimeoutMs` the call already waited for its turn (a fair share, resources/runs/execution/upstream-call.ts) before it was sent. */
  queuedMs?: number;
  /** Told once the upstream's answer begins: the request was sent. */
  sent?: () => void;
  idleTimeoutMs: number;
  /** Aborts the call (run cancelled or expired, shutdown); its reason is rethrown as is. */
  signal?: AbortSignal;
  /** The event loop's slices (Deps.slices): the answer is read a slice at a time. */
  slices: Slices;
  /** Starts the call's timer in the metrics (Deps.metrics.providerCall, for the call's virtual key). */
  timer?: () => ProviderCallTimer;
}

/** The largest event-stream line (bytes on the wire) and event (characters of data) read. */
export const SSE_LIMITS = { maxLineBytes: 1024 * 1024, maxEventChars: 1024 * 1024 };
/** A Retry-After header is a number of seconds or a date: what is longer is not read. */
const MAX_RETRY_AFTER_CHARS = 64;
/** Longer tool-call ids are refused: OpenAI's are about 30 characters. */
const MAX_TOOL_CALL_ID_CHARS = 256;

export async function* streamChatCompletion(
  request: { model: string; body: RequestBody['body'] },
  call: ChatCallOptions,
): AsyncGenerator<UpstreamEvent[]> {
  yield* readChatStream(
    await openChatCall({ ...request, operation: 'chat/completions', accept: 'text/event-stream' }, call),
    call,
  );
}

/**
 * The events of a streamed call that opened (openChatCall), as streamChatCompletion yields them: for
 * a caller that opens the call itself (a run's, tried again or with a fallback key: providers/attempts.ts).
 */
export async function* readChatStream(
  opened: OpenedChatCall,
  call: Pick<ChatCallOptions, 'secret' | 'slices'>,
): AsyncGenerator<UpstreamEvent[]> {
  const { response, body, silence, controller, end } = opened;
  let finished = false;
  try {
    const toolCalls = new ToolCallIndexer();
    try {
      const stop = { stopped: () => finished, cut: () => controller.abort() };
      for await (const batch of readServerSentData(body, SSE_LIMITS, () => silence.touch(), stop, call.slices)) {
        let at = 0;
        while (at < batch.length) {
          // A slice of the event loop at a time; what it read goes to the consumer before the loop is let go.
          const events: UpstreamEvent[] = [];
          // A chunk at fault fails the call after what came before it (the answer so far is kept).
          let fault: unknown = null;
          for (; at < batch.length && !call.slices.spent(); at++) {
            const data = batch[at];
            if (data === undefined) throw new Error(`No event at ${at} of a batch of ${batch.length}`);
            if (data === '[DONE]') {
              finished = true;
              break;
            }
            try {
              normalise(parseChunk(data, call.secret), toolCalls, events);
            } catch (error) {
              fault = error;
              break;
            }
          }
          // What follows a finish is short (usage, `[DONE]`): no read waits for more of it.
          if (events.some((event) => event.type === 'finish')) response.ending?.();
          // The idle timeout measures the upstream's silence, not the time the consumer takes before
          // asking for more (the engine waits for a slow streaming client), nor the wait for the
          // event loop: no clock meanwhile.
          silence.pause();
          if (events.length > 0) yield events;
          if (fault) throw fault;
          if (finished) return;
          if (at < batch.length) await call.slices.next();
          silence.touch();
        }
      }
    } catch (error) {
      throw asUpstreamError(error, controller.signal);
    }
    // A stream that ends without [DONE] still ended cleanly at the transport level; a missing
    // finish is caught by the engine, which needs a finish_reason to decide the outcome.
    finished = true;
  } finally {
    end(finished);
  }
}

/** A Chat Completions call whose provider answered 2xx: its body to read, under the call's idle limit. */
export interface OpenedChatCall {
  response: UpstreamAnswer;
  body: AsyncIterable<Uint8Array>;
  /** The idle limit on the body: `touch()` on progress, `pause()` while the reader waits for its consumer. */
  silence: SilenceTimer;
  /** Aborts the call; a reason it was aborted with is what a failed read should report (asUpstreamError). */
  controller: AbortController;
  /** Ends the call: its timer stopped, the caller's signal let go, and the connection dropped unless the body was read to its end. */
  end(finished: boolean): void;
}

/**
 * Sends a request to one of the provider's operations (Chat Completions, or another a pass-through
 * serves: completions, embeddings, moderations) and waits for its answer's headers, within the
 * first-byte limit; a non-2xx answer fails it with UpstreamError (`http`, the provider's status,
 * its message read bounded and redacted), as do a network failure, silence and the caller's abort.
 * Shared by the run engine (streamChatCompletion) and the pass-through of POST /v1/chat/completions
 * and its kin, which read the body themselves; either must call `end` once done with it.
 */
export async function openChatCall(
  request: { model: string; operation: UpstreamOperation; body: RequestBody['body']; accept: string },
  call: ChatCallOptions,
): Promise<OpenedChatCall> {
  const controller = new AbortController();
  // The fetch is aborted without a reason: workerd logs a reason that reaches its fetch as an
  // uncaught exception. The reason stays on `controller`, for asUpstreamError.
  const transport = new AbortController();
  controller.signal.addEventListener('abort', () => transport.abort(), { once: true });
  const onAbort = () => controller.abort(call.signal?.reason);
  if (call.signal?.aborted) throw call.signal.reason;
  call.signal?.addEventListener('abort', onAbort, { once: true });

  const timer = call.timer?.();
  /** Why the call failed before its answer began; null once it began. */
  let failed: ProviderCallOutcome | null = null;
  const silence = new SilenceTimer((error) => controller.abort(error));
  const queued = call.queuedMs ?? 0;
  silence.start(
    call.firstByteTimeoutMs,
    'sent no first byte',
    queued,
    queued > 0 ? `, ${queued} ms of them waiting for its turn among the provider calls at once` : '',
  );
  const end = (finished: boolean) => {
    timer?.end(finished ? 'ok' : (failed ?? 'incomplete'));
    silence.stop();
    call.signal?.removeEventListener('abort', onAbort);
    // A finished body needs nothing more; anything else (an error, a consumer that stopped early)
    // must not leave the connection open.
    if (!finished) controller.abort();
  };

  try {
    let response: UpstreamAnswer;
    try {
      response = await call.fetch(call.adapter.url(call.baseUrl, call.options, request.operation), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: request.accept,
          ...call.adapter.headers(call.secret),
        },
        body: request.body,
        ...(request.body instanceof ReadableStream ? { duplex: 'half' as const } : {}),
        signal: transport.signal,
        // base_url was checked, a Location header was not: following it could take the gateway's
        // request (and the provider key) to a metadata or internal address. A 3xx fails the call.
        redirect: 'manual',
      });
    } catch (error) {
      throw asUpstreamError(error, controller.signal);
    }
    call.sent?.();
    timer?.firstByte();
    // From the headers on, the body must make progress.
    silence.start(call.idleTimeoutMs, 'went silent for longer than allowed');

    if (!isSuccess(response)) {
      const detail = await errorDetail(response, call.secret);
      throw new UpstreamError(
        'http',
        `${refusal(response.status, request.model, request.operation)}HTTP ${response.status}${detail}`,
        response.status,
        undefined,
        response.headers.get('retry-after')?.slice(0, MAX_RETRY_AFTER_CHARS),
      );
    }
    if (!response.body) throw new UpstreamError('protocol', 'The upstream answered without a body.');
    return { response, body: response.body, silence, controller, end };
  } catch (error) {
    failed = callOutcome(error);
    end(false);
    throw error;
  }
}

/** How a call that did not begin failed, for its metrics: by the provider's status, or by the kind of failure. */
function callOutcome(error: unknown): ProviderCallOutcome {
  if (!(error instanceof UpstreamError)) return 'aborted';
  if (error.kind !== 'http') return error.kind;
  const status = error.status ?? 0;
  if (status === 429) return 'http_429';
  if (status >= 400 && status < 500) return 'http_4xx';
  if (status >= 500 && status < 600) return 'http_5xx';
  return 'http_other';
}

/**
 * The upstream's time limit: fails the call once `ms` pass without progress. Progress only moves a
 * deadline; the one timer, when it fires before the deadline, waits again for what is left, so a
 * stream of many small events sets no timer per event. Paused, it does not fire.
 */
export class SilenceTimer {
  readonly #fail: (error: UpstreamError) => void;
  #cancel: (() => void) | undefined;
  #ms = 0;
  #what = '';
  #note = '';
  #deadline = 0;
  #paused = false;

  constructor(fail: (error: UpstreamError) => void) {
    this.#fail = fail;
  }

  /**
   * A new limit, from now: `what` the upstream did when it fails (`sent no first byte`), `spent`
   * of its `ms` already gone (said in `note`).
   */
  start(ms: number, what: string, spent = 0, note = ''): void {
    this.#ms = ms;
    this.#what = what;
    this.#note = note;
    this.#paused = false;
    this.#deadline = Date.now() + ms - spent;
    this.#schedule(ms - spent);
  }

  /** Progress: the limit counts again from now. */
  touch(): void {
    this.#paused = false;
    this.#deadline = Date.now() + this.#ms;
  }

  /** No clock until the next touch(). */
  pause(): void {
    this.#paused = true;
  }

  stop(): void {
    this.#cancel?.();
  }

  #schedule(ms: number): void {
    this.stop();
    // Judged after the I/O that came meanwhile (silenceTimeout): a stall of this process is not the upstream's silence.
    this.#cancel = silenceTimeout(() => this.#fire(), ms);
  }

  #fire(): void {
    const left = this.#deadline - Date.now();
    if (this.#paused) this.#schedule(this.#ms);
    else if (left > 0) this.#schedule(left);
    else this.#fail(new UpstreamError('timeout', `The upstream ${this.#what} within ${this.#ms} ms${this.#note}.`));
  }
}

/** An event's data as JSON, unless it is malformed or reports an error. */
function parseChunk(data: string, secret: string): unknown {
  let chunk: unknown;
  try {
    chunk = JSON.parse(data);
  } catch {
    throw new UpstreamError('protocol', 'The upstream sent a malformed chunk (not JSON).');
  }
  if (isRecord(chunk) && chunk.error) {
    const message = isRecord(chunk.error) ? chunk.error.message : chunk.error;
    const text = typeof message === 'string' ? message : 'unknown';
    throw new UpstreamError(
      'protocol',
      `The upstream reported an error mid-stream: ${redact(text, secret, MAX_ERROR_MESSAGE_CHARS)}`,
    );
  }
  return chunk;
}

/** Adds a chunk's events to `events`, every field the engine uses checked for its type. */
function normalise(chunk: unknown, toolCalls: ToolCallIndexer, events: UpstreamEvent[]): void {
  if (!isRecord(chunk)) throw malformed('a chunk is not a JSON object');
  const { choices, usage } = chunk;
  if (choices != null && !Array.isArray(choices)) throw malformed('`choices` is not a list');
  // One choice is requested (n = 1); Azure sends leading chunks with no choices (filter results).
  const choice: unknown = Array.isArray(choices) ? choices[0] : undefined;
  if (choice !== undefined) {
    if (!isRecord(choice)) throw malformed('`choices[0]` is not an object');
    const delta = optional(choice.delta, 'object', 'choices[0].delta');
    if (delta) {
      // Servers name it either way (some send both, alike): one is read. Not the answer, and no
      // standard's field: what is not a string is left out rather than failing the answer.
      const reasoning = [delta.reasoning_content, delta.reasoning].find((value) => typeof value === 'string');
      if (typeof reasoning === 'string' && reasoning) addFragment(events, 'reasoning', reasoning);
      const content = optional(delta.content, 'string', 'delta.content');
      if (content) addFragment(events, 'text', content);
      const refusal = optional(delta.refusal, 'string', 'delta.refusal');
      if (refusal) addFragment(events, 'text', refusal);
      const calls = delta.tool_calls;
      if (calls != null) {
        if (!Array.isArray(calls)) throw malformed('`delta.tool_calls` is not a list');
        for (const raw of calls) {
          if (!isRecord(raw)) throw malformed('a tool call is not an object');
          const id = optional(raw.id, 'string', 'tool_calls[].id');
          if (id !== undefined && id.length > MAX_TOOL_CALL_ID_CHARS) {
            throw new UpstreamError(
              'protocol',
              `The upstream sent a tool call id longer than ${MAX_TOOL_CALL_ID_CHARS} characters.`,
            );
          }
          const fn = optional(raw.function, 'object', 'tool_calls[].function');
          events.push({
            type: 'tool_call',
            index: toolCalls.resolve(raw.index, id),
            id,
            name: optional(fn?.name, 'string', 'tool_calls[].function.name'),
            arguments: optional(fn?.arguments, 'string', 'tool_calls[].function.arguments'),
          });
        }
      }
    }
    const finish = optional(choice.finish_reason, 'string', 'choices[0].finish_reason');
    if (finish) events.push({ type: 'finish', reason: finish });
  }
  if (usage != null) events.push(checkUsage(usage));
}

/** Adds a fragment of text or reasoning, joined to the one before it when it is of the same kind. */
function addFragment(events: UpstreamEvent[], type: 'text' | 'reasoning', text: string): void {
  const last = events.at(-1);
  if (last?.type === type) events[events.length - 1] = { type, text: last.text + text };
  else events.push({ type, text });
}

/**
 * Which tool call a fragment belongs to. The upstream numbers its calls with `index`, which must
 * be an integer from 0 to MAX_TOOL_CALLS - 1. Servers that leave it out get the unambiguous cases:
 * a fragment with a new id opens the next call, one with a known id continues that call, and one
 * with neither continues the only call there is; with several calls open it is refused.
 */
class ToolCallIndexer {
  readonly #byId = new Map<string, number>();
  readonly #seen = new Set<number>();
  #highest = -1;

  resolve(index: unknown, id: string | undefined): number {
    if (index != null) {
      if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= MAX_TOOL_CALLS) {
        throw new UpstreamError(
          'protocol',
          `The upstream sent a tool call with index ${show(index)}; tool-call indices must be integers from 0 to ${MAX_TOOL_CALLS - 1}.`,
        );
      }
      return this.#note(index, id);
    }
    if (id !== undefined) {
      const known = this.#byId.get(id);
      if (known !== undefined) return known;
      if (this.#highest + 1 >= MAX_TOOL_CALLS) {
        throw new UpstreamError('protocol', `The upstream sent more than ${MAX_TOOL_CALLS} tool calls in one answer.`);
      }
      return this.#note(this.#highest + 1, id);
    }
    if (this.#seen.size > 1) {
      throw new UpstreamError(
        'protocol',
        'The upstream sent a tool-call fragment with neither an index nor an id while several tool calls were open.',
      );
    }
    return this.#note(Math.max(0, this.#highest), id);
  }

  #note(index: number, id: string | undefined): number {
    if (!this.#seen.has(index)) {
      this.#seen.add(index);
      this.#highest = Math.max(this.#highest, index);
      if (id !== undefined && !this.#byId.has(id)) this.#byId.set(id, index);
    }
    return index;
  }
}

/**
 * Usage as reported, if plausible: non-negative safe integers, and a total (the sum when absent)
 * no smaller than the prompt and completion tokens together. Otherwise the first field at fault.
 */
export function checkUsage(raw: unknown): Extract<UpstreamEvent, { type: 'usage' | 'invalid_usage' }> {
  if (!isRecord(raw)) return { type: 'invalid_usage', field: 'usage' };
  const { prompt_tokens: prompt, completion_tokens: completion } = raw;
  if (!isCount(prompt)) return { type: 'invalid_usage', field: 'prompt_tokens' };
  if (!isCount(completion)) return { type: 'invalid_usage', field: 'completion_tokens' };
  const total = raw.total_tokens ?? prompt + completion;
  if (!isCount(total) || total < prompt + completion) return { type: 'invalid_usage', field: 'total_tokens' };
  return { type: 'usage', usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: total } };
}

const isCount = (value: unknown): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A field that may be absent or null, else must have the given type. */
function optional(value: unknown, type: 'string', field: string): string | undefined;
function optional(value: unknown, type: 'object', field: string): Record<string, unknown> | undefined;
function optional(
  value: unknown,
  type: 'string' | 'object',
  field: string,
): string | Record<string, unknown> | undefined {
  if (value == null) return undefined;
  if (type === 'string' ? typeof value === 'string' : isRecord(value)) return value as string | Record<string, unknown>;
  throw malformed(`\`${field}\` is not ${type === 'string' ? 'a string' : 'an object'}`);
}

const malformed = (what: string) => new UpstreamError('protocol', `The upstream sent a malformed chunk: ${what}.`);

/** A value from the upstream, short enough to quote. */
function show(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

/** What an upstream's refusal means for the run, by status: the first words of its last_error. */
function refusal(status: number, model: string, operation: UpstreamOperation): string {
  if (status === 401 || status === 403) return "The upstream refused the virtual key's provider API key: ";
  if (status === 404)
    return `The upstream has no model ${show(model)} (or no ${OPERATION_NAMES[operation]} at the virtual key's base_url): `;
  if (status === 429) return 'The upstream rate-limited the request: ';
  if (status === 400 || status === 422) return 'The upstream refused the request as invalid: ';
  return 'The upstream answered ';
}

/** How a refusal names the operation that was not found. */
const OPERATION_NAMES: Record<UpstreamOperation, string> = {
  'chat/completions': 'Chat Completions',
  completions: 'Completions',
  embeddings: 'Embeddings',
  moderations: 'Moderations',
  models: 'Models',
};

/** The cause of a failed fetch or read: our own timeout or abort reason if there is one. */
export function asUpstreamError(error: unknown, signal: AbortSignal): unknown {
  if (signal.aborted) return signal.reason;
  if (error instanceof UpstreamError) return error;
  return networkFailure(error);
}
