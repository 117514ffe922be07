import type { PassThroughEndpoint } from '../pass-through/pipeline';
import type { CreateCompletionBody } from './schemas';

/** What a legacy completion completes when its request sets no `max_tokens` (OpenAI's default). */
const DEFAULT_MAX_TOKENS = 16;

/** POST /v1/completions (legacy), streamed or not, passed through as chat completions are (pass-through/pipeline.ts). */
export const COMPLETIONS: PassThroughEndpoint<CreateCompletionBody> = {
  operation: 'completions',
  usageKind: 'completions',
  name: 'completion',
  completes: true,
  read: (body) => ({
    model: body.model,
    stream: body.stream === true,
    clientWantsUsage: body.stream_options?.include_usage === true,
    promptChars: JSON.stringify(body.prompt).length,
    maxCompletionTokens: body.max_tokens ?? DEFAULT_MAX_TOKENS,
  }),
};
