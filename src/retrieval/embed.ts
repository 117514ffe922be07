import type { Config } from '../config';
import type { Db } from '../db/client';
import { recordUsage } from '../db/usage-counts';
import type { SecretBox } from '../lib/secrets';
import { ADAPTERS, type Provider } from '../providers/adapters';
import { createEmbeddings, MAX_DIMENSIONS, retryable } from '../providers/embeddings';
import { UpstreamError, type UpstreamFetch } from '../providers/types';
import { admitRequest, settleTokens } from '../ratelimit';
import type { RateLimitDeps } from '../ratelimit/enforce';
import { CHARS_PER_TOKEN } from '../ratelimit/reservation';

/**
 * Texts into vectors for a vector store: the one way ingestion (chunks) and search (queries) embed.
 * The store decides the model, the dimensions and the virtual key, so that every vector of a store
 * and every query against it agree. Texts go in batches of BATCH_TEXTS; a batch the provider
 * refuses for a passing reason (429, 5xx, the network, a timeout) is tried again after a backoff,
 * up to ATTEMPTS times, all within DEADLINE_MS: a provider that never answers fails a batch in that
 * time, not in four times it. Each call is admitted by the workspace's rate-limit policies like a run's
 * turn (model = the embeddings model), charged the tokens the provider reports, and counted in
 * the usage table (GET /v1/usage).
 */

export interface EmbeddingTarget {
  workspaceId: string;
  /** The API key the work is attributed to in rate-limit policies. */
  apiKeyId: string;
  /** The store's virtual key; null, or revoked since: resolved again for `model` (models, default). */
  virtualKeyId: string | null;
  model: string;
  /** The store's dimensions once known; null before its first vector (then the first answer decides). */
  dimensions: number | null;
}

export interface EmbeddedTexts {
  vectors: Float32Array[];
  dimensions: number;
  /** The virtual key that answered (a store records it on its first embedding). */
  virtualKeyId: string;
  promptTokens: number;
}

/** The provider key a target's texts are embedded with, and its secret, decrypted. */
export interface EmbeddingKey {
  id: string;
  slug: string;
  provider: Provider;
  baseUrl: string;
  options: Record<string, string | undefined>;
  secret: string;
}

/**
 * Finds the key `target` embeds with. Which key that is, is the virtual keys' to say
 * (resources/virtual-keys/embedding-key.ts): the callers, which may know resources, hand it in.
 */
export type EmbeddingKeyOf = (
  deps: Pick<EmbedDeps, 'db' | 'secrets'>,
  target: EmbeddingTarget,
) => Promise<EmbeddingKey>;

/** What embedding takes of the gateway's Deps: its calls are admitted, charged and counted like a run's. */
export interface EmbedDeps extends RateLimitDeps {
  db: Db;
  secrets: SecretBox;
  fetch: UpstreamFetch;
  config: Config;
}

/** Texts per embeddings call: OpenAI takes 2048 inputs and 300k tokens; chunks are up to 4096 tokens. */
export const BATCH_TEXTS = 64;
const ATTEMPTS = 4;
const BACKOFF_MS = [500, 2_000, 8_000];
/** A batch's attempts and their backoffs together, each attempt given what is left of it. */
const DEADLINE_MS = 60_000;

/** The dimensions to ask of `model`, when it is one that takes the parameter. */
export function requestedDimensions(model: string, config: EmbedDeps['config']): number | undefined {
  return /^text-embedding-3-/.test(model) ? config.GATEWAY_EMBEDDINGS_DIMENSIONS : undefined;
}

export async function embedTexts(
  deps: EmbedDeps,
  keyOf: EmbeddingKeyOf,
  target: EmbeddingTarget,
  texts: string[],
  signal?: AbortSignal,
): Promise<EmbeddedTexts> {
  const key = await keyOf(deps, target);
  const vectors: Float32Array[] = [];
  let dimensions = target.dimensions;
  let promptTokens = 0;
  for (let start = 0; start < texts.length; start += BATCH_TEXTS) {
    const batch = texts.slice(start, start + BATCH_TEXTS);
    const answer = await withRetries(signal, async (timeoutMs) => {
      const chars = batch.reduce((sum, text) => sum + text.length, 0);
      const admission = await admitRequest(
        deps,
        {
          api_key: target.apiKeyId,
          workspace_id: target.workspaceId,
          virtual_key: key.slug,
          provider: key.provider,
          model: target.model,
          metadata: {},
        },
        { reservation: Math.ceil(chars / CHARS_PER_TOKEN), baseTokens: 0 },
      );
      let charged = 0;
      try {
        const result = await createEmbeddings(
          { model: target.model, input: batch, dimensions: requestedDimensions(target.model, deps.config) },
          {
            fetch: deps.fetch,
            adapter: ADAPTERS[key.provider],
            baseUrl: key.baseUrl,
            options: key.options,
            secret: key.secret,
            timeoutMs,
            signal,
          },
        );
        // A provider that reports no usage is charged, and counted, the estimate.
        charged = result.promptTokens || Math.ceil(chars / CHARS_PER_TOKEN);
        await recordUsage(deps.db, {
          kind: 'embeddings',
          workspaceId: target.workspaceId,
          at: deps.now(),
          model: target.model,
          apiKeyId: target.apiKeyId,
          virtualKeyId: key.id,
          promptTokens: charged,
          completionTokens: 0,
        });
        deps.metrics.tokens('embeddings', target.model, charged, 0);
        return result;
      } finally {
        await settleTokens(deps, admission.ticket, charged);
      }
    });
    const [first] = answer.vectors;
    if (!first) throw new UpstreamError('protocol', 'The embeddings upstream answered no vectors.');
    const size = first.length;
    dimensions ??= size;
    if (size !== dimensions || size > MAX_DIMENSIONS) {
      throw new UpstreamError(
        'protocol',
        `The embeddings upstream answered vectors of ${size} dimensions for a store of ${dimensions}.`,
      );
    }
    vectors.push(...answer.vectors);
    promptTokens += answer.promptTokens;
  }
  return { vectors, dimensions: dimensions ?? 0, virtualKeyId: key.id, promptTokens };
}

/** `attempt` given the ms left before DEADLINE_MS, again while it fails for a passing reason and time is left. */
async function withRetries<T>(signal: AbortSignal | undefined, attempt: (timeoutMs: number) => Promise<T>): Promise<T> {
  const deadline = Date.now() + DEADLINE_MS;
  for (let tried = 1; ; tried++) {
    try {
      return await attempt(deadline - Date.now());
    } catch (error) {
      // The workspace's own policies refusing (429 rate_limit_exceeded) is not retried here: a
      // search answers it at once, ingestion takes the file up again later.
      const base = BACKOFF_MS[tried - 1];
      if (!retryable(error) || tried >= ATTEMPTS || base === undefined || signal?.aborted) throw error;
      const backoff = base * (0.75 + Math.random() / 2);
      if (Date.now() + backoff >= deadline) throw error;
      await sleep(backoff, signal);
    }
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/** A vector as libSQL stores it (F32_BLOB: little-endian float32s), for a statement's arguments. */
export function vectorBlob(vector: Float32Array): Uint8Array {
  return new Uint8Array(vector.buffer, vector.byteOffset, vector.byteLength);
}
