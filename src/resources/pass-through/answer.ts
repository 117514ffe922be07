import { ApiError, serverError } from '../../errors';
import { concatBytes } from '../../lib/bytes';
import { pulledStream } from '../../lib/direct-body';
import type { Slices } from '../../lib/slices';
import { asUpstreamError, checkUsage, isRecord, SSE_LIMITS, type OpenedChatCall } from '../../providers/chat';
import { readServerSentData } from '../../providers/sse-reader';
import { UpstreamError, type Usage } from '../../providers/types';
import { release } from '../../lib/bounded-read';

/**
 * The provider's answer to a call passed through (pipeline.ts), read as untrusted input: a JSON answer
 * up to a bound, an event stream line by line within SSE_LIMITS, and the usage it reports checked
 * (checkUsage) before anything is charged or counted from it.
 */

/** What the gateway learnt of an answer: its usage as reported (null: none, or not plausible) and the characters it completed. */
export interface AnswerTally {
  usage: Usage | null;
  /** The first usage field at fault, when the provider reported one that was not plausible. */
  invalidUsage: string | null;
  /** Characters of content, refusals and tool-call arguments: the estimate's base without usage. */
  completionChars: number;
  /** Whether a choice reported its finish_reason (what follows is short: usage, `[DONE]`). */
  finished: boolean;
}

export const newTally = (): AnswerTally => ({ usage: null, invalidUsage: null, completionChars: 0, finished: false });

/**
 * A non-streamed answer: its bytes as sent (at most `maxBytes`), its object and its tally. An
 * answer that completes nothing (embeddings) reports usage without `completion_tokens`: none, then.
 */
export async function readJsonAnswer(
  opened: OpenedChatCall,
  maxBytes: number,
  completes: boolean,
): Promise<{ bytes: Uint8Array; object: Record<string, unknown>; tally: AnswerTally }> {
  const chunks = opened.body[Symbol.asyncIterator]();
  const parts: Uint8Array[] = [];
  let size = 0;
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await chunks.next();
      if (done) break;
      opened.silence.touch();
      size += value.byteLength;
      if (size > maxBytes) {
        throw new UpstreamError(
          'protocol',
          `The upstream's answer is larger than the gateway's limit of ${maxBytes} bytes (GATEWAY_MAX_ANSWER_BYTES).`,
        );
      }
      parts.push(value);
    }
    finished = true;
  } catch (error) {
    throw asUpstreamError(error, opened.controller.signal);
  } finally {
    if (!finished) await release(chunks);
    opened.end(finished);
  }
  const bytes = concatBytes(parts);
  let answer: unknown;
  try {
    answer = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    throw new UpstreamError('protocol', 'The upstream answered with a body that is not JSON.');
  }
  if (!isRecord(answer)) throw new UpstreamError('protocol', 'The upstream answered with JSON that is not an object.');
  const tally = newTally();
  if (!completes && isRecord(answer.usage)) answer.usage.completion_tokens ??= 0;
  tallyChunk(answer, 'message', tally);
  return { bytes, object: answer, tally };
}

export interface RelayOptions {
  /** Whether the client asked for the usage chunk (`stream_options.include_usage`); if not, it is withheld. */
  clientWantsUsage: boolean;
  /** The slug of the virtual key whose provider answers, which its failures name. */
  virtualKey: string;
  slices: Slices;
  /** Given each chunk the provider sent that is a JSON object (a stored completion is assembled from them). */
  chunk?: (chunk: Record<string, unknown>) => void;
  /** Called once when the relay ends: `error` is what ended it early, null when it reached its end. */
  done(tally: AnswerTally, error: unknown): void;
}

const encoder = new TextEncoder();
const DONE = encoder.encode('data: [DONE]\n\n');

/**
 * The provider's event stream, relayed to the client event by event as each arrives (what a read
 * completed goes out in one write), each event's data as the provider sent it. The usage-only
 * chunk the gateway asked for is withheld from a client that did not ask for it. A failure once
 * the answer began (silence, a cut connection, a line past SSE_LIMITS) becomes a last `data:`
 * event holding the error envelope, which the SDKs raise, as OpenAI ends a stream that fails.
 */
export function relayStream(opened: OpenedChatCall, options: RelayOptions): ReadableStream<Uint8Array> {
  const tally = newTally();
  let finished = false;
  let ended = false;
  const end = (error: unknown) => {
    if (ended) return;
    ended = true;
    opened.end(finished);
    options.done(tally, error);
  };
  const stop = { stopped: () => finished, cut: () => opened.controller.abort() };
  const batches = readServerSentData(opened.body, SSE_LIMITS, () => opened.silence.touch(), stop, options.slices);
  return pulledStream({
    // Reads until it has something to send.
    async next() {
      for (;;) {
        opened.silence.touch();
        let next: IteratorResult<string[]>;
        try {
          next = await batches.next();
        } catch (error) {
          const cause = asUpstreamError(error, opened.controller.signal);
          end(cause);
          return {
            bytes: encoder.encode(`data: ${JSON.stringify(upstreamFailure(cause, options.virtualKey).body)}\n\n`),
            last: true,
          };
        }
        // The time the client takes to ask for more is not the provider's silence.
        opened.silence.pause();
        if (next.done) {
          // An end without [DONE] is the provider's; the client sees the same.
          finished = true;
          end(null);
          return { bytes: null, last: true };
        }
        const out: Uint8Array[] = [];
        for (const data of next.value) {
          if (data === '[DONE]') {
            finished = true;
            out.push(DONE);
            break;
          }
          if (relayed(data, options, tally)) out.push(encoder.encode(`data: ${data}\n\n`));
        }
        if (tally.finished) opened.response.ending?.();
        if (finished) {
          await batches.return(undefined);
          end(null);
          return { bytes: concatBytes(out), last: true };
        }
        if (out.length > 0) return { bytes: concatBytes(out), last: false };
      }
    },
    // The call is ended first: it aborts the provider's body, which a read still pending waits on.
    async cancel(reason) {
      end(reason ?? new Error('The client left before the end of the stream.'));
      await batches.return(undefined);
    },
  });
}

/** Tallies a chunk; whether it goes to the client (not the usage-only chunk it did not ask for). */
function relayed(data: string, options: RelayOptions, tally: AnswerTally): boolean {
  let chunk: unknown;
  try {
    chunk = JSON.parse(data);
  } catch {
    // Not the gateway's to judge: the client's SDK says what it makes of it.
    return true;
  }
  if (!isRecord(chunk)) return true;
  tallyChunk(chunk, 'delta', tally);
  options.chunk?.(chunk);
  const usageOnly = chunk.usage != null && Array.isArray(chunk.choices) && chunk.choices.length === 0;
  return options.clientWantsUsage || !usageOnly;
}

/** Adds what a chunk (`delta`) or an answer (`message`) completed and the usage it reports. */
function tallyChunk(chunk: Record<string, unknown>, field: 'delta' | 'message', tally: AnswerTally): void {
  if (chunk.usage != null) {
    const usage = checkUsage(chunk.usage);
    if (usage.type === 'usage') {
      tally.usage = usage.usage;
      tally.invalidUsage = null;
    } else {
      tally.usage = null;
      tally.invalidUsage = usage.field;
    }
  }
  if (!Array.isArray(chunk.choices)) return;
  for (const choice of chunk.choices) {
    if (!isRecord(choice)) continue;
    // As a run's reader takes it (providers/chat.ts): a string, not empty.
    if (typeof choice.finish_reason === 'string' && choice.finish_reason !== '') tally.finished = true;
    // A legacy completion's choices hold their text.
    tally.completionChars += textLength(choice.text);
    const part = choice[field];
    if (!isRecord(part)) continue;
    tally.completionChars += textLength(part.content) + textLength(part.refusal);
    if (!Array.isArray(part.tool_calls)) continue;
    for (const call of part.tool_calls) {
      const fn = isRecord(call) ? call.function : undefined;
      if (isRecord(fn)) tally.completionChars += textLength(fn.name) + textLength(fn.arguments);
    }
  }
}

const textLength = (value: unknown) => (typeof value === 'string' ? value.length : 0);

/**
 * How a failed provider call is answered: a refusal with the provider's status (the message naming
 * the virtual key whose provider it is), silence as 504, anything else the provider did (a network
 * failure, a malformed answer, a refused address) as 502.
 */
export function upstreamFailure(cause: unknown, virtualKey: string): ApiError {
  if (cause instanceof ApiError) return cause;
  if (!(cause instanceof UpstreamError)) return serverError(cause);
  switch (cause.kind) {
    case 'http':
      return new ApiError('upstream_error', `Virtual key '${virtualKey}': ${cause.message}`, {
        status: cause.status,
        cause,
      });
    case 'timeout':
      return new ApiError('upstream_timeout', cause.message, { cause });
    case 'network':
    case 'protocol':
    case 'address':
      return new ApiError('upstream_error', cause.message, { cause });
  }
}
