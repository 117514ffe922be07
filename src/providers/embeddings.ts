import type { ProviderTarget } from './adapters';
import { isSuccess, UpstreamError, type UpstreamAnswer } from './types';
import { errorDetail, networkFailure, readCapped } from './upstream-text';

/**
 * One OpenAI-compatible `/embeddings` call (OpenAI, Azure, Ollama, vLLM, TEI, …): texts in, one
 * vector per text out, in order. The answer is hostile input like any upstream's: its size is
 * bounded before it is parsed (a function of the texts sent and the dimensions allowed), and the
 * gateway checks that it has exactly one finite vector per text, every index once, all of one
 * dimension within MAX_DIMENSIONS, and a sane token count. Retrying (429, 5xx) is the caller's
 * decision: `UpstreamError.status` and `retryable()` say when it makes sense.
 */

export interface EmbeddingsRequest {
  model: string;
  input: string[];
  /** Asked of models that can shorten their vectors (OpenAI's text-embedding-3-*); others ignore it. */
  dimensions?: number;
}

export interface EmbeddingsCall extends ProviderTarget {
  /** The whole call, connection to last byte. */
  timeoutMs: number;
  signal?: AbortSignal;
}

export interface Embeddings {
  vectors: Float32Array[];
  /** As the upstream reported it; 0 when it did not. */
  promptTokens: number;
}

/** The most dimensions a vector may have (OpenAI's largest model has 3072). */
export const MAX_DIMENSIONS = 4096;
/** The most texts in one call (OpenAI accepts 2048). */
export const MAX_INPUTS = 2048;
/** A JSON number as an upstream may print it, with its separator, at most. */
const MAX_BYTES_PER_NUMBER = 32;
/** Room for the envelope, ids, model names and usage around the numbers. */
const ENVELOPE_BYTES = 64 * 1024 + 512 * MAX_INPUTS;

export async function createEmbeddings(request: EmbeddingsRequest, call: EmbeddingsCall): Promise<Embeddings> {
  if (request.input.length === 0) return { vectors: [], promptTokens: 0 };
  if (request.input.length > MAX_INPUTS) throw new RangeError(`at most ${MAX_INPUTS} texts per embeddings call`);
  const timeout = AbortSignal.timeout(call.timeoutMs);
  const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
  let response: UpstreamAnswer;
  try {
    response = await call.fetch(call.adapter.url(call.baseUrl, call.options, 'embeddings'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', ...call.adapter.headers(call.secret) },
      body: JSON.stringify({
        model: request.model,
        input: request.input,
        encoding_format: 'float',
        ...(request.dimensions && { dimensions: request.dimensions }),
      }),
      signal,
      // As for chat: a Location header was never checked against the upstream rules.
      redirect: 'manual',
    });
  } catch (error) {
    throw failure(error, signal, call.signal);
  }
  if (!isSuccess(response)) {
    const detail = await errorDetail(response, call.secret);
    throw new UpstreamError(
      'http',
      `The embeddings upstream answered HTTP ${response.status}${detail}`,
      response.status,
    );
  }
  const maxBytes = ENVELOPE_BYTES + request.input.length * MAX_DIMENSIONS * MAX_BYTES_PER_NUMBER;
  let text: string;
  try {
    text = await readCapped(response.body, maxBytes + 1, call.secret);
  } catch (error) {
    throw failure(error, signal, call.signal);
  }
  if (text.length > maxBytes) throw malformed(`an answer over ${maxBytes} bytes for ${request.input.length} texts`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw malformed('not JSON');
  }
  return checked(body, request.input.length);
}

/** Whether a failed call is worth repeating: rate limited, the upstream's own failure, the network. */
export function retryable(error: unknown): boolean {
  if (!(error instanceof UpstreamError)) return false;
  if (error.kind === 'http') return error.status === 429 || (error.status ?? 0) >= 500;
  return error.kind === 'network' || error.kind === 'timeout';
}

function checked(body: unknown, count: number): Embeddings {
  if (!isRecord(body) || !Array.isArray(body.data)) throw malformed('no data array');
  if (body.data.length !== count) throw malformed(`${body.data.length} vectors for ${count} texts`);
  const vectors: (Float32Array | undefined)[] = new Array(count);
  let dimensions = -1;
  for (const [position, item] of body.data.entries()) {
    if (!isRecord(item) || !Array.isArray(item.embedding)) throw malformed(`data[${position}] has no embedding array`);
    // Without an index, the position is the index (some servers omit it).
    const index = item.index ?? position;
    if (!Number.isSafeInteger(index) || typeof index !== 'number' || index < 0 || index >= count || vectors[index]) {
      throw malformed(`data[${position}].index is not a new index below ${count}`);
    }
    const values = item.embedding;
    if (values.length === 0 || values.length > MAX_DIMENSIONS)
      throw malformed(`a vector of ${values.length} dimensions (1 to ${MAX_DIMENSIONS})`);
    if (dimensions === -1) dimensions = values.length;
    if (values.length !== dimensions) throw malformed(`vectors of ${dimensions} and ${values.length} dimensions`);
    const vector = new Float32Array(values.length);
    for (let i = 0; i < values.length; i++) {
      const value = values[i];
      if (typeof value !== 'number' || !Number.isFinite(value))
        throw malformed(`data[${position}].embedding[${i}] is not a finite number`);
      vector[i] = value;
    }
    vectors[index] = vector;
  }
  const usage = isRecord(body.usage) ? body.usage.prompt_tokens : undefined;
  const promptTokens =
    typeof usage === 'number' && Number.isSafeInteger(usage) && usage >= 0 && usage <= 1e9 ? usage : 0;
  // As many items as texts, each at an index of its own below their count: every index is filled.
  const filled = vectors.filter((vector) => vector !== undefined);
  if (filled.length !== count) throw malformed(`${filled.length} vectors for ${count} texts`);
  return { vectors: filled, promptTokens };
}

function failure(error: unknown, signal: AbortSignal, callerSignal: AbortSignal | undefined): unknown {
  if (callerSignal?.aborted) return callerSignal.reason;
  if (signal.aborted) return new UpstreamError('timeout', 'The embeddings upstream did not answer in time.');
  if (error instanceof UpstreamError) return error;
  return networkFailure(error);
}

const malformed = (what: string) =>
  new UpstreamError('protocol', `The embeddings upstream sent a malformed answer: ${what}.`);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
