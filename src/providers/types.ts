/**
 * OpenAI's Chat Completions wire format: what the gateway sends upstream and the streamed chunks
 * it reads back. Every provider here speaks it; adapters differ only in URL and authentication.
 */

export type ChatContentPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; image_url: { url: string; detail?: string } };

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | ChatContentPart[] }
  | { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string };

export interface ChatCompletionRequest {
  model: string;
  messages: ChatMessage[];
  tools?: { type: 'function'; function: Record<string, unknown> }[];
  tool_choice?: unknown;
  parallel_tool_calls?: boolean;
  response_format?: unknown;
  temperature?: number;
  top_p?: number;
  max_completion_tokens?: number;
  stream: true;
  stream_options: { include_usage: true };
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** What the engine consumes: the chunk stream, normalised. */
export type UpstreamEvent =
  | { type: 'text'; text: string }
  | { type: 'tool_call'; index: number; id?: string; name?: string; arguments?: string }
  | { type: 'finish'; reason: string }
  | { type: 'usage'; usage: Usage };

/** How an upstream call failed; the engine turns it into the run's `last_error`. */
export class UpstreamError extends Error {
  constructor(
    readonly kind: 'http' | 'timeout' | 'network' | 'protocol' | 'address',
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = 'UpstreamError';
  }
}
