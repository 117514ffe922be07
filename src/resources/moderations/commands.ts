import type { PassThroughEndpoint } from '../pass-through/pipeline';
import type { CreateModerationBody } from './schemas';

/** The model OpenAI moderates with when a request names none: the one its virtual key is resolved for. */
export const MODERATION_MODEL = 'omni-moderation-latest';

/**
 * POST /v1/moderations, passed through as chat completions are (pass-through/pipeline.ts). A
 * moderation reports no usage: it is counted the estimate of its input.
 */
export const MODERATIONS: PassThroughEndpoint<CreateModerationBody> = {
  operation: 'moderations',
  usageKind: 'moderations',
  name: 'moderation',
  completes: false,
  read: (body) => ({
    model: body.model ?? MODERATION_MODEL,
    stream: false,
    clientWantsUsage: false,
    promptChars: typeof body.input === 'string' ? body.input.length : JSON.stringify(body.input).length,
    maxCompletionTokens: 0,
  }),
};
