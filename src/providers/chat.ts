import type { ProviderAdapter } from './adapters';
import { readServerSentData } from './sse-reader';
import { UpstreamError, type ChatCompletionRequest, type UpstreamEvent } from './types';

/**
 * One streamed Chat Completions call: sends the request, then yields the answer as normalised
 * events while it arrives. Fails with UpstreamError on a non-2xx answer, a malformed chunk, a
 * dropped connection, or silence: no first byte within `firstByteTimeoutMs` (connecting and the
 * response headers included), or a gap longer than `idleTimeoutMs` between chunks.
 */

export interface ChatCallOptions {
  fetch: typeof fetch;
  adapter: ProviderAdapter;
  baseUrl: string;
  options: Record<string, string | undefined>;
  secret: string;
  firstByteTimeoutMs: number;
  idleTimeoutMs: number;
  /** Aborts the call (run cancelled or expired, shutdown); its reason is rethrown as is. */
  signal?: AbortSignal;
}

const MAX_ERROR_BODY = 4096;

export async function* streamChatCompletion(
  request: ChatCompletionRequest,
  call: ChatCallOptions,
): AsyncGenerator<UpstreamEvent> {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = (ms: number, what: string) => {
    clearTimeout(timer);
    timer = setTimeout(() => controller.abort(new UpstreamError('timeout', `The upstream ${what} within ${ms} ms.`)), ms);
  };
  const onAbort = () => controller.abort(call.signal!.reason);
  if (call.signal?.aborted) throw call.signal.reason;
  call.signal?.addEventListener('abort', onAbort, { once: true });

  arm(call.firstByteTimeoutMs, 'sent no first byte');
  let finished = false;
  const onChunk = () => arm(call.idleTimeoutMs, 'went silent for longer than allowed');

  try {
    let response: Response;
    try {
      response = await call.fetch(call.adapter.url(call.baseUrl, call.options), {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...call.adapter.headers(call.secret) },
        body: JSON.stringify(call.adapter.body(request)),
        signal: controller.signal,
        // base_url was checked, a Location header was not: following it could take the gateway's
        // request (and the provider key) to a metadata or internal address. A 3xx fails the call.
        redirect: 'manual',
      });
    } catch (error) {
      throw asUpstreamError(error, controller.signal);
    }

    if (!response.ok) {
      const detail = await errorDetail(response, call.secret);
      throw new UpstreamError('http', `The upstream answered HTTP ${response.status}${detail}`, response.status);
    }
    if (!response.body) throw new UpstreamError('protocol', 'The upstream answered without a body.');

    try {
      for await (const data of readServerSentData(response.body, onChunk)) {
        if (data === '[DONE]') {
          finished = true;
          return;
        }
        let chunk: RawChunk;
        try {
          chunk = JSON.parse(data) as RawChunk;
        } catch {
          throw new UpstreamError('protocol', 'The upstream sent a malformed chunk (not JSON).');
        }
        if (chunk.error) {
          throw new UpstreamError('protocol', `The upstream reported an error mid-stream: ${redact(String(chunk.error.message ?? 'unknown'), call.secret)}`);
        }
        // The idle timeout measures the upstream's silence, not the time the consumer takes before
        // asking for more (the engine waits for a slow streaming client): no clock while it holds.
        clearTimeout(timer);
        yield* normalise(chunk);
        onChunk();
      }
    } catch (error) {
      throw asUpstreamError(error, controller.signal);
    }
    // A stream that ends without [DONE] still ended cleanly at the transport level; a missing
    // finish is caught by the engine, which needs a finish_reason to decide the outcome.
    finished = true;
  } finally {
    clearTimeout(timer);
    call.signal?.removeEventListener('abort', onAbort);
    // A finished body needs nothing more; anything else (an error, a consumer that stopped early)
    // must not leave the connection open.
    if (!finished) controller.abort();
  }
}

interface RawChunk {
  choices?: {
    index?: number;
    delta?: {
      content?: string | null;
      refusal?: string | null;
      tool_calls?: { index?: number; id?: string; function?: { name?: string; arguments?: string } }[];
    };
    finish_reason?: string | null;
  }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number } | null;
  error?: { message?: unknown };
}

function* normalise(chunk: RawChunk): Generator<UpstreamEvent> {
  // One choice is requested (n = 1); Azure sends leading chunks with no choices (filter results).
  const choice = chunk.choices?.[0];
  if (choice) {
    const delta = choice.delta;
    if (delta?.content) yield { type: 'text', text: delta.content };
    if (delta?.refusal) yield { type: 'text', text: delta.refusal };
    if (delta?.tool_calls) {
      for (const call of delta.tool_calls) {
        yield {
          type: 'tool_call',
          index: call.index ?? 0,
          id: call.id,
          name: call.function?.name,
          arguments: call.function?.arguments,
        };
      }
    }
    if (choice.finish_reason) yield { type: 'finish', reason: choice.finish_reason };
  }
  if (chunk.usage) {
    const prompt = chunk.usage.prompt_tokens ?? 0;
    const completion = chunk.usage.completion_tokens ?? 0;
    yield {
      type: 'usage',
      usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: chunk.usage.total_tokens ?? prompt + completion },
    };
  }
}

/** The cause of a failed fetch or read: our own timeout or abort reason if there is one. */
function asUpstreamError(error: unknown, signal: AbortSignal): unknown {
  if (signal.aborted) return signal.reason;
  if (error instanceof UpstreamError) return error;
  return new UpstreamError('network', 'The connection to the upstream failed or was cut.');
}

/** The upstream's own error message, shortened and scrubbed of anything resembling a key. */
async function errorDetail(response: Response, secret: string): Promise<string> {
  let text = '';
  try {
    text = (await response.text()).slice(0, MAX_ERROR_BODY);
  } catch {
    return '.';
  }
  let message = text;
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    const candidate = typeof parsed.error === 'string' ? parsed.error : (parsed.error?.message ?? parsed.message);
    if (typeof candidate === 'string') message = candidate;
  } catch {
    // not JSON: keep the text
  }
  message = redact(message.trim().slice(0, 500), secret);
  return message ? `: ${message}` : '.';
}

/** Removes the provider key and anything shaped like an API key from upstream text. */
export function redact(text: string, secret: string): string {
  let out = text;
  if (secret.length >= 4) out = out.split(secret).join('[redacted]');
  return out.replace(/\b(sk|gk|pk|rk|key)[-_][A-Za-z0-9*._-]{6,}/gi, '[redacted]');
}
