import type { PassThroughEndpoint } from '../pass-through/pipeline';
import type { CreateChatCompletionBody } from './schemas';
import { completionStore } from './stored';

/**
 * POST /v1/chat/completions, passed through to the provider of the caller's virtual key
 * (pass-through/pipeline.ts), and kept by the gateway when the request says `store: true`
 * (stored.ts), since the provider behind a virtual key does not keep it.
 */
export const CHAT_COMPLETIONS: PassThroughEndpoint<CreateChatCompletionBody> = {
  operation: 'chat/completions',
  usageKind: 'chat_completions',
  name: 'chat completion',
  completes: true,
  read: (body) => ({
    model: body.model,
    stream: body.stream === true,
    clientWantsUsage: body.stream_options?.include_usage === true,
    promptChars: JSON.stringify(body.messages).length,
    maxCompletionTokens: completionCap(body),
    metadata: body.metadata,
  }),
  store: completionStore,
};

/** The most a call may complete: its cap once per choice (`n`); null (no cap): GATEWAY_TOKEN_RESERVATION. */
function completionCap(body: CreateChatCompletionBody): number | null {
  const cap = body.max_completion_tokens ?? body.max_tokens ?? null;
  return cap === null ? null : cap * (body.n ?? 1);
}
