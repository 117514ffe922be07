import { BoundedMap } from '../lib/bounded-map';
import type { ProviderTarget } from './adapters';
import { isSuccess, UpstreamError, type UpstreamAnswer } from './types';
import { errorDetail, networkFailure, readCapped } from './upstream-text';

/**
 * A provider's own list of its models (`GET {base}/models`), read as untrusted input: within a
 * time limit, without following redirects, its body bounded (MAX_LIST_BYTES) before it is parsed,
 * at most MAX_MODELS entries, each id a string of at most MAX_ID_CHARS. Lists are kept per virtual
 * key for MODEL_LIST_TTL_MS (ModelLists), a failure too, so that a provider that fails is asked
 * again only once that time has passed.
 */

/** A model the provider lists: its id, and when it was made (seconds), if it says. */
export interface ProviderModel {
  id: string;
  created: number | null;
}

export interface ModelListCall extends ProviderTarget {
  /** The whole call, connection to last byte. */
  timeoutMs: number;
}

/** The largest list read: OpenAI's, of about a hundred models, is some 10 KB. */
export const MAX_LIST_BYTES = 1024 * 1024;
/** The most models kept of one list; the rest are left out. */
export const MAX_MODELS = 1000;
/** A longer id is not a model's (OpenAI's longest are about 60 characters; a fine-tune's about 80). */
const MAX_ID_CHARS = 256;

export async function listProviderModels(call: ModelListCall): Promise<ProviderModel[]> {
  const signal = AbortSignal.timeout(call.timeoutMs);
  let response: UpstreamAnswer;
  try {
    response = await call.fetch(call.adapter.url(call.baseUrl, call.options, 'models'), {
      method: 'GET',
      headers: { accept: 'application/json', ...call.adapter.headers(call.secret) },
      signal,
      // As for chat: a Location header was never checked against the upstream rules.
      redirect: 'manual',
    });
  } catch (error) {
    throw failure(error, signal);
  }
  if (!isSuccess(response)) {
    const detail = await errorDetail(response, call.secret);
    throw new UpstreamError('http', `The models list answered HTTP ${response.status}${detail}`, response.status);
  }
  let text: string;
  try {
    text = await readCapped(response.body, MAX_LIST_BYTES + 1, call.secret);
  } catch (error) {
    throw failure(error, signal);
  }
  if (text.length > MAX_LIST_BYTES) throw malformed(`an answer over ${MAX_LIST_BYTES} bytes`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw malformed('not JSON');
  }
  if (typeof body !== 'object' || body === null || !('data' in body) || !Array.isArray(body.data))
    throw malformed('no data array');
  const models: ProviderModel[] = [];
  for (const item of body.data.slice(0, MAX_MODELS)) {
    const id: unknown = typeof item === 'object' && item !== null && 'id' in item ? item.id : undefined;
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_CHARS) continue;
    const created: unknown = 'created' in item ? item.created : undefined;
    models.push({
      id,
      created: typeof created === 'number' && Number.isSafeInteger(created) && created >= 0 ? created : null,
    });
  }
  return models;
}

function failure(error: unknown, signal: AbortSignal): unknown {
  if (signal.aborted) return new UpstreamError('timeout', 'The models list did not answer in time.');
  if (error instanceof UpstreamError) return error;
  return networkFailure(error);
}

const malformed = (what: string) => new UpstreamError('protocol', `The models list was malformed: ${what}.`);

/** How long a provider's list (or its failure) is kept. */
export const MODEL_LIST_TTL_MS = 60_000;
/** The most lists kept at once: one per virtual key in use. */
const MAX_LISTS = 1000;

/** A list as kept: the models, or the failure that left them out. */
export type ModelListResult = { models: ProviderModel[] } | { error: unknown };

/**
 * Providers' lists by virtual key (Deps.modelLists): one per process on Node, per isolate on
 * Workers. `key` must change when the list could (the key's id, base URL and secret). Concurrent
 * asks for the same key share one call.
 */
export class ModelLists {
  readonly #lists = new BoundedMap<string, { at: number; result: Promise<ModelListResult> }>(MAX_LISTS);

  /** The kept list of `key` if younger than MODEL_LIST_TTL_MS at `now`, else `load`'s, kept. */
  get(
    key: string,
    now: number,
    load: () => Promise<ModelListResult>,
  ): { result: Promise<ModelListResult>; fresh: boolean } {
    const kept = this.#lists.get(key);
    if (kept && now - kept.at < MODEL_LIST_TTL_MS) return { result: kept.result, fresh: false };
    const result = load();
    this.#lists.set(key, { at: now, result });
    return { result, fresh: true };
  }
}
