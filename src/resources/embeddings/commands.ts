import type { PassThroughEndpoint } from '../pass-through/pipeline';
import type { CreateEmbeddingBody } from './schemas';

/**
 * POST /v1/embeddings, passed through as chat completions are (pass-through/pipeline.ts). Its
 * calls count as `embeddings`, the kind retrieval's own embeddings count as: the usage table names
 * what the provider was asked to do, which an embeddings call is whoever makes it, and its API key
 * and virtual key tell an application's calls from a vector store's ingestion.
 */
export const EMBEDDINGS: PassThroughEndpoint<CreateEmbeddingBody> = {
  operation: 'embeddings',
  usageKind: 'embeddings',
  name: 'embeddings',
  completes: false,
  read: (body) => ({
    model: body.model,
    stream: false,
    clientWantsUsage: false,
    promptChars: typeof body.input === 'string' ? body.input.length : JSON.stringify(body.input).length,
    maxCompletionTokens: 0,
  }),
};
