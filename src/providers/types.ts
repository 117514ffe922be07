import type { NetworkCause } from '../lib/network-errors';

/**
 * OpenAI's Chat Completions wire format: what the gateway sends upstream and the streamed chunks
 * it reads back. Every provider here speaks it; adapters differ only in URL and authentication.
 */

export type ChatContentPart =
  { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string; detail?: string } };

/**
 * An image whose bytes are read from where they are kept while its request is sent, into the body
 * as a data: URL (request-body.ts): the request never holds them.
 */
export interface StreamedImage {
  /** The image's size: what its bytes come to at most. */
  readonly bytes: number;
  /** Its bytes and their media type; or, when they cannot be sent after all, the text that says so in its place. */
  open(): Promise<{ mediaType: string; chunks: AsyncIterable<Uint8Array> } | { text: string }>;
}

/** A user message's image, sent as a data: URL of bytes streamed as the request is sent. */
export type StreamedImagePart = { type: 'image_url'; image_url: { url: StreamedImage; detail?: string } };

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | (ChatContentPart | StreamedImagePart)[] }
  | { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string };

/** An uploaded image in a prompt (a message's image_file part), sent as its bytes (resources/files/images.ts). */
export type ImageFilePart = { type: 'image_file'; image_file: { file_id: string; detail?: string } };
/** A prompt's message: a chat message, except that user content may name uploaded images. */
export type PromptMessage =
  Exclude<ChatMessage, { role: 'user' }> | { role: 'user'; content: string | (ChatContentPart | ImageFilePart)[] };

/**
 * A turn's prompt as a run builds it (resources/runs/execution/prompt.ts), before its uploaded
 * images are read: here, beside the messages it becomes, so that the run host, which a run's first
 * turn is handed with its prompt built (deps.ts), can name it.
 */
export interface Prompt {
  /** The system message (the run's instructions) and the history, in order. */
  messages: PromptMessage[];
  /** Characters of the messages and the run's tools as they travel, JSON. */
  chars: number;
  /** The same in UTF-8 bytes, images named rather than inlined. */
  bytes: number;
  /** The estimate in tokens: four characters a token. */
  tokens: number;
  /** Whether `tokens` fits the turn's prompt tokens. A prompt that does not is not sent. */
  fits: boolean;
}

export interface ChatCompletionRequest {
  model: string;
  messages: ChatMessage[];
  tools?: { type: 'function'; function: Record<string, unknown> }[];
  tool_choice?: unknown;
  parallel_tool_calls?: boolean;
  response_format?: unknown;
  temperature?: number;
  top_p?: number;
  reasoning_effort?: string;
  max_completion_tokens?: number;
  stream: true;
  stream_options: { include_usage: true };
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/**
 * How the gateway calls a provider: a POST (a GET for its models list), its answer read once as it arrives. The runtime's
 * `fetch` is one (Workers, tests); Node's is runtime/node/upstream-fetch.ts, a pooled HTTP client that
 * costs a fraction of `fetch` per call.
 */
export type UpstreamFetch = (url: string, init: UpstreamRequest) => Promise<UpstreamAnswer>;

export interface UpstreamRequest {
  method: 'POST' | 'GET';
  headers: Record<string, string>;
  /** JSON; a stream when what it sends is read as it goes (request-body.ts). None for a GET. */
  body?: string | Uint8Array | ReadableStream<Uint8Array>;
  /** Set with a stream: fetch needs it to send one. */
  duplex?: 'half';
  signal?: AbortSignal;
  /** Never followed: base_url was checked, a Location header was not (chat.ts). */
  redirect?: 'manual';
}

/** What a provider call reads of an answer; a `Response` has it. */
export interface UpstreamAnswer {
  readonly status: number;
  readonly headers: { get(name: string): string | null };
  /**
   * Decompressed. Read once, with for-await: leaving the loop early (a break, an error) cancels
   * the body and drops the connection.
   */
  readonly body: AsyncIterable<Uint8Array> | null;
  /**
   * Told by the reader that what it read announces the answer's end (a `finish_reason`): each read
   * from then on hands over whatever has arrived. A transport whose reads wait for a minimum (the
   * Worker's, MIN_READ_BYTES in runtime/workers/upstream-fetch.ts) would otherwise hold a last event
   * shorter than it (`data: [DONE]`) until the body ended: until the idle limit, were the provider
   * to keep its body open.
   */
  ending?(): void;
}

/** A 2xx answer, as `Response.ok` has it. */
export function isSuccess(answer: UpstreamAnswer): boolean {
  return answer.status >= 200 && answer.status < 300;
}

/** Tool calls of one answer are numbered 0 to MAX_TOOL_CALLS - 1 (the upstream's `index`). */
export const MAX_TOOL_CALLS = 128;

/**
 * What the engine consumes: the chunk stream, normalised and checked. A tool call's `index` is
 * always an integer from 0 to MAX_TOOL_CALLS - 1. Usage that is not plausible is reported as
 * `invalid_usage`, naming the first field at fault, instead of as numbers.
 */
export type UpstreamEvent =
  | { type: 'text'; text: string }
  /** Reasoning text (DeepSeek's, vLLM's, Ollama's… `reasoning_content` or `reasoning`), before the answer. */
  | { type: 'reasoning'; text: string }
  | { type: 'tool_call'; index: number; id?: string; name?: string; arguments?: string }
  | { type: 'finish'; reason: string }
  | { type: 'usage'; usage: Usage }
  | { type: 'invalid_usage'; field: string };

/**
 * How an upstream call failed; the engine turns it into the run's `last_error`. A `network`
 * failure says which (`network`: what a runtime without error codes, Workers, reports).
 */
export class UpstreamError extends Error {
  constructor(
    readonly kind: 'http' | 'timeout' | 'network' | 'protocol' | 'address',
    message: string,
    readonly status?: number,
    readonly network?: NetworkCause,
    /** An `http` refusal's Retry-After header, as sent (bounded): when the provider asks to be tried again. */
    readonly retryAfter?: string,
  ) {
    super(message);
    this.name = 'UpstreamError';
  }
}
