import type { Actor, RequestContext } from '../../actor';
import { shareTimeoutMessage } from '../../config';
import type { Settings } from '../../db/settings-cache';
import { recordUsage, type CountedCall } from '../../db/usage-counts';
import type { Deps } from '../../deps';
import { ApiError } from '../../errors';
import { ShareTimeout, type Share } from '../../lib/fair-shares';
import type { UpstreamOperation } from '../../providers/adapters';
import { openWithAttempts } from '../../providers/attempts';
import { openChatCall, type OpenedChatCall } from '../../providers/chat';
import {
  admitRequest,
  countRequest,
  giveBack,
  requestMetadata,
  settleTokens,
  turnReservation,
  type Admission,
  type RequestAttributes,
} from '../../ratelimit';
import { estimatedUsage } from '../../ratelimit/reservation';
import type { VirtualKey } from '../../db/schema';
import { chatCallOptions, decryptVirtualKeySecret, servedModel } from '../virtual-keys/commands';
import { callKeys } from '../virtual-keys/fallbacks';
import { upstreamRules } from '../virtual-keys/upstream-rules';
import { servedOnConfirmedSettings, type Guessing } from '../identities/guessed';
import { newTally, readJsonAnswer, relayStream, upstreamFailure, type AnswerTally } from './answer';

/**
 * The calls passed through to the provider of the caller's virtual key (POST /v1/chat/completions,
 * /v1/completions, /v1/embeddings, /v1/moderations: each a PassThroughEndpoint of its resource), in
 * the order it must happen:
 *
 *   resolve the virtual key (as a run's) ─> check its address ─> admit (rate limits: a refusal
 *     sends nothing) ─> take a share of the provider calls ─> send (tried again, or with the key's
 *     fallbacks, until an answer begins: providers/attempts.ts) ─> answer (JSON, or the stream
 *     relayed) ─> settle the tokens, count the usage, log the call ─> with `store: true`, keep it
 *
 * A call that fails before its answer began releases its reservation and counts nothing (but the
 * attempts that failed before its last, each a request of its key); one the provider answered is
 * charged and counted its usage (an estimate when it reported none) on the key that answered.
 */

export type PassThroughDeps = Pick<
  Deps,
  | 'db'
  | 'config'
  | 'log'
  | 'now'
  | 'counters'
  | 'policyCache'
  | 'secrets'
  | 'fetch'
  | 'upstreamShares'
  | 'upstreamUrls'
  | 'slices'
  | 'metrics'
>;

/** The provider's answer: its JSON's bytes, or its event stream relayed, with the rate-limit headers. */
export interface PassThroughAnswer {
  body: Uint8Array | ReadableStream<Uint8Array>;
  headers: Record<string, string>;
}

/** The request a call is made for, beyond its body: its waitUntil keeps a relayed stream's settlement alive on Workers. */
export interface PassThroughContext extends RequestContext {
  /** The client's request's signal: a client that leaves ends the provider call. */
  signal: AbortSignal;
}

/**
 * What an endpoint passed through says of itself; everything else about its calls is passThrough's.
 * `read` takes what the pipeline needs from the client's (validated) body.
 */
export interface PassThroughEndpoint<Body> {
  operation: Exclude<UpstreamOperation, 'models'>;
  /** What its calls count as in the usage table (GET /v1/usage). */
  usageKind: CountedCall['kind'];
  /** Its log lines' subject: `chat completion`, `embeddings`, … */
  name: string;
  /** Whether its answers complete text: if not, usage without `completion_tokens` reports none. */
  completes: boolean;
  read(body: Body): PassThroughRequest;
  /** What keeps a completion the request asks to be stored (`store: true`); chat completions only. */
  store?: (deps: PassThroughDeps, actor: Actor, body: Body, requestId: string) => CompletionKeeper | null;
}

/** What keeps a completion (chat-completions/stored.ts): given its chunks as they are relayed, or its whole answer. */
export interface CompletionKeeper {
  streamed: { add(chunk: Record<string, unknown>): void };
  /** Keeps what the chunks assembled, once the stream has ended. */
  keepStreamed(): Promise<void>;
  /** Keeps a non-streamed answer. */
  keep(answer: Record<string, unknown>): Promise<void>;
}

/** What the pipeline reads of a request's body: routing, admission, the estimate. */
export interface PassThroughRequest {
  /** The model its virtual key is resolved for (and rate-limit policies match). */
  model: string;
  stream: boolean;
  /** Whether a streaming client asked for the usage chunk (`stream_options.include_usage`). */
  clientWantsUsage: boolean;
  /** Characters of its input: its token reservation's base, and its estimate's without usage. */
  promptChars: number;
  /** The completion's cap (0 for an endpoint that completes nothing); null: GATEWAY_TOKEN_RESERVATION. */
  maxCompletionTokens: number | null;
  metadata?: Record<string, string> | null;
}

const CONFIRMED = Promise.resolve(true);
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' };
const JSON_HEADERS = { 'content-type': 'application/json' };

/**
 * One call of `endpoint`, its body sent as the client sent it (but for the usage a stream is asked
 * for). On settings assumed unchanged, the provider is called on what they hold (the virtual key
 * and the policies kept at their generation) while they are checked, and its answer is given only
 * once they are confirmed (identities/guessed.ts); a key or policies not held are read first.
 */
export async function passThrough<Body extends object>(
  deps: PassThroughDeps,
  actor: Actor,
  snapshot: Settings,
  endpoint: PassThroughEndpoint<Body>,
  body: Body,
  request: PassThroughContext,
): Promise<PassThroughAnswer> {
  const read = endpoint.read(body);
  const wanted = { slug: actor.virtualKeySlug, model: read.model };
  const made = { actor, endpoint, body, read, request };
  return servedOnConfirmedSettings(snapshot, {
    guess: async (settings, guessing) => {
      const key = settings.keptVirtualKey(actor.workspaceId, wanted);
      // Admission needs the policies: a guess does not wait for them to be read.
      if (!key || !deps.policyCache.peek(actor.workspaceId, settings.generation)) return null;
      return call(deps, settings, made, key, guessing);
    },
    serve: async (settings) => call(deps, settings, made, await settings.virtualKey(actor.workspaceId, wanted), null),
    drop: async (answer) => {
      if (answer.body instanceof ReadableStream)
        await answer.body.cancel(new Error('The settings the call was made on changed.'));
    },
  });
}

/**
 * The call, in its order, with `key`, the virtual key its model resolved to. `guessing`: on
 * settings not yet confirmed, the provider's call aborted by `guessing.signal`, and every write
 * waiting for `guessing.confirmed`.
 */
async function call<Body extends object>(
  deps: PassThroughDeps,
  snapshot: Settings,
  made: {
    actor: Actor;
    endpoint: PassThroughEndpoint<Body>;
    body: Body;
    read: PassThroughRequest;
    request: PassThroughContext;
  },
  key: VirtualKey,
  guessing: Guessing | null,
): Promise<PassThroughAnswer> {
  const { actor, endpoint, body, read, request } = made;
  const { config } = deps;
  const startedAt = Date.now();
  const signal = guessing ? AbortSignal.any([request.signal, guessing.signal]) : request.signal;
  const rules = await upstreamRules(deps.db, config, { now: deps.now() });
  const addressProblem = deps.upstreamUrls.check(key.baseUrl, rules);
  if (addressProblem) {
    throw new ApiError('upstream_error', `The virtual key's base_url is not allowed: ${addressProblem}`);
  }
  const { stream, clientWantsUsage, promptChars } = read;
  // Usage is what the call is charged and counted by: asked of the provider whether or not the client asks.
  const sent = stream ? { ...body, stream_options: { ...streamOptions(body), include_usage: true } } : body;
  const bytes = new TextEncoder().encode(JSON.stringify(sent));
  if (bytes.byteLength > config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES) {
    throw new ApiError(
      'payload_too_large',
      `The request to the provider would be ${bytes.byteLength} bytes, over the gateway's limit of ${config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES} (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES).`,
    );
  }

  const model = servedModel(key, read.model);
  const attributes = {
    api_key: actor.apiKeyId,
    workspace_id: actor.workspaceId,
    virtual_key: key.slug,
    provider: key.provider,
    model,
    metadata: requestMetadata(read.metadata, actor.metadataHeader),
  };
  const admission = await admitRequest(
    deps,
    attributes,
    {
      reservation: turnReservation(
        {
          promptChars,
          knownPromptTokens: 0,
          maxCompletionTokens: read.maxCompletionTokens,
          completionTokensSoFar: 0,
        },
        config.GATEWAY_TOKEN_RESERVATION,
      ),
      baseTokens: 0,
    },
    snapshot.generation,
  );
  const record = new CallRecord(deps, actor, key, admission, endpoint, guessing?.confirmed ?? CONFIRMED, {
    requested: read.model,
    attributes,
    generation: snapshot.generation,
    stream,
    promptChars,
    startedAt,
    request,
  });

  let opened: OpenedChatCall;
  try {
    const share = await takeShare(deps, actor.workspaceId, bytes.byteLength, signal);
    record.share = share;
    // The key, its retries, then its fallbacks (providers/attempts.ts), found in this request's snapshot.
    const attempted = await openWithAttempts(
      async (candidate) =>
        openChatCall(
          {
            model: read.model,
            operation: endpoint.operation,
            body: bytes,
            accept: stream ? 'text/event-stream' : 'application/json',
          },
          chatCallOptions(deps, candidate, await decryptVirtualKeySecret(deps.secrets, candidate), share, signal),
        ),
      {
        keys: callKeys(deps, key, (slug) => fallbackKey(snapshot, actor.workspaceId, slug, read.model), rules),
        signal,
        budgetMs: config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
        retrying: (step) => record.retrying(step.failed, step.next, step.error),
      },
    );
    opened = attempted.value;
    record.served(attempted.key, attempted.attempts);
  } catch (error) {
    // A client that left, or a guess dropped, is answered nothing: its reason is rethrown as is.
    if (signal.aborted) {
      await record.end(null, error);
      throw error;
    }
    const failure = upstreamFailure(error, record.servedSlug());
    // The refusal says which key made the last attempt, and after how many.
    Object.assign(failure.headers, record.servedHeaders());
    await record.end(null, failure);
    throw failure;
  }

  const store = endpoint.store?.(deps, actor, body, request.requestId) ?? null;
  if (stream) {
    const events = relayStream(opened, {
      clientWantsUsage,
      virtualKey: record.servedSlug(),
      slices: deps.slices,
      ...(store && { chunk: store.streamed.add }),
      done: (tally, error) => {
        const ended = record.end(tally, error);
        request.waitUntil(ended);
        if (store && error === null)
          request.waitUntil(
            ended.then(async (counted) => {
              if (counted) await store.keepStreamed();
            }),
          );
      },
    });
    return { body: events, headers: { ...SSE_HEADERS, ...admission.headers, ...record.servedHeaders() } };
  }
  try {
    const {
      bytes: answer,
      object,
      tally,
    } = await readJsonAnswer(opened, config.GATEWAY_MAX_ANSWER_BYTES, endpoint.completes);
    const counted = await record.end(tally, null);
    // Waited for, so that a read right after the answer finds it; it never fails the answer.
    if (store && counted) await store.keep(object);
    return { body: answer, headers: { ...JSON_HEADERS, ...admission.headers, ...record.servedHeaders() } };
  } catch (error) {
    const failure = upstreamFailure(error, record.servedSlug());
    await record.end(newTally(), failure);
    throw failure;
  }
}

/**
 * This call's share of the provider calls the process makes (Deps.upstreamShares), as a run's
 * turn takes one: waited for within the first-byte timeout, past which it is a 429 naming the limit.
 */
async function takeShare(
  deps: PassThroughDeps,
  workspaceId: string,
  bytes: number,
  signal: AbortSignal,
): Promise<Share> {
  const timeoutMs = deps.config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS;
  try {
    return await deps.upstreamShares.take(workspaceId, bytes, timeoutMs, signal);
  } catch (error) {
    if (!(error instanceof ShareTimeout)) throw error;
    throw new ApiError('rate_limit_exceeded', shareTimeoutMessage(error, timeoutMs), {
      type: 'requests',
      headers: { 'retry-after': '1' },
    });
  }
}

/** A fallback key of the request's snapshot by its slug; null when no live key has it any more. */
async function fallbackKey(snapshot: Settings, workspaceId: string, slug: string, model: string) {
  try {
    return await snapshot.virtualKey(workspaceId, { slug, model });
  } catch (error) {
    if (error instanceof ApiError && error.code === 'invalid_virtual_key') return null;
    throw error;
  }
}

/**
 * What a call holds until it ends, and what its end writes, once: its share given back, its tokens
 * settled (released when the provider answered nothing), its usage counted when the provider
 * answered, and its one log line.
 */
class CallRecord {
  share: Share | null = null;
  #ended = false;
  /** The key that answered (or the call's own, until one did), and the attempts made. */
  #key: VirtualKey;
  #attempts = 1;

  constructor(
    private readonly deps: PassThroughDeps,
    private readonly actor: Actor,
    key: VirtualKey,
    private readonly admission: Admission,
    private readonly endpoint: Pick<PassThroughEndpoint<object>, 'name' | 'usageKind'>,
    /** Whether the settings the call was made on are confirmed (identities/guessed.ts): nothing is written before. */
    private readonly confirmed: Promise<boolean>,
    private readonly call: {
      /** The model the request names: each key may serve another (servedModel). */
      requested: string;
      /** What the call was admitted as, with its first key. */
      attributes: RequestAttributes;
      generation: number | null;
      stream: boolean;
      promptChars: number;
      startedAt: number;
      request: PassThroughContext;
    },
  ) {
    this.#key = key;
  }

  served(key: VirtualKey, attempts: number): void {
    this.#key = key;
    this.#attempts = attempts;
  }

  /** The slug of the key that answered (or made the last attempt), which failures name. */
  servedSlug(): string {
    return this.#key.slug;
  }

  /** Which key answered, and after how many attempts. */
  servedHeaders(): Record<string, string> {
    return { 'x-gateway-virtual-key-used': this.#key.slug, 'x-gateway-attempts': String(this.#attempts) };
  }

  /**
   * An attempt with `failed` failed and another is made with `next`: the failed one is counted in
   * the usage of its key (a request, no tokens), and the next one in the requests policies that
   * match it (the call was admitted once; ratelimit's countRequest).
   */
  async retrying(failed: VirtualKey, next: VirtualKey, error: unknown): Promise<void> {
    const { deps, actor, call } = this;
    // A guess dropped counts nothing: its call is being aborted.
    if (!(await this.confirmed)) return;
    deps.log.warn(`${this.endpoint.name} attempt failed; trying again`, {
      request_id: call.request.requestId,
      workspace_id: actor.workspaceId,
      virtual_key: failed.slug,
      next_virtual_key: next.slug,
      attempt: this.#attempts,
      error,
    });
    this.#key = next;
    this.#attempts++;
    await recordUsage(deps.db, {
      kind: this.endpoint.usageKind,
      workspaceId: actor.workspaceId,
      at: deps.now(),
      model: servedModel(failed, call.requested),
      apiKeyId: actor.apiKeyId,
      virtualKeyId: failed.id,
      promptTokens: 0,
      completionTokens: 0,
    });
    const model = servedModel(next, call.requested);
    await countRequest(
      deps,
      { ...call.attributes, virtual_key: next.slug, provider: next.provider, model },
      call.generation,
    );
  }

  /**
   * `tally` is null when the provider answered nothing (no 2xx): nothing is charged or counted.
   * Whether the call was counted: not when the settings it was made on were not confirmed, and
   * its admission is given back whole then.
   */
  async end(tally: AnswerTally | null, error: unknown): Promise<boolean> {
    if (this.#ended) return false;
    this.#ended = true;
    const { deps, actor, endpoint, call } = this;
    const key = this.#key;
    const model = servedModel(key, call.requested);
    this.share?.end();
    if (!(await this.confirmed)) {
      await giveBack(deps, this.admission, actor.workspaceId);
      deps.log.info(`${endpoint.name} dropped: the settings it was made on changed`, {
        request_id: call.request.requestId,
        workspace_id: actor.workspaceId,
        virtual_key: key.slug,
      });
      return false;
    }
    const usage = tally && (tally.usage ?? estimatedUsage(call.promptChars, tally.completionChars));
    const fields = {
      request_id: call.request.requestId,
      workspace_id: actor.workspaceId,
      api_key_id: actor.apiKeyId,
      virtual_key: key.slug,
      attempts: this.#attempts,
      model,
      stream: call.stream,
      prompt_tokens: usage?.prompt_tokens ?? 0,
      completion_tokens: usage?.completion_tokens ?? 0,
      usage: tally === null ? 'none' : tally.usage ? 'reported' : 'estimated',
      ...(tally?.invalidUsage ? { invalid_usage_field: tally.invalidUsage } : {}),
      duration_ms: Date.now() - call.startedAt,
      outcome: outcome(error),
    };
    try {
      await settleTokens(deps, this.admission.ticket, usage?.total_tokens ?? 0);
      if (usage) {
        await recordUsage(deps.db, {
          kind: endpoint.usageKind,
          workspaceId: actor.workspaceId,
          at: deps.now(),
          model,
          apiKeyId: actor.apiKeyId,
          virtualKeyId: key.id,
          promptTokens: usage.prompt_tokens,
          completionTokens: usage.completion_tokens,
        });
        deps.metrics.tokens(endpoint.usageKind, model, usage.prompt_tokens, usage.completion_tokens);
      }
    } catch (failure) {
      // The answer has gone out (or is going): a settlement or count that fails is logged, never
      // thrown at it (a relayed stream ends the call without awaiting this).
      deps.log.error(`${endpoint.name} usage not settled or recorded`, { ...fields, error: failure });
      return true;
    }
    if (error === null) deps.log.info(endpoint.name, fields);
    else deps.log.warn(`${endpoint.name} failed`, fields);
    return true;
  }
}

/** The client's `stream_options`, which the usage the gateway asks for is added to. */
function streamOptions(body: object): object {
  const options = 'stream_options' in body ? body.stream_options : undefined;
  return typeof options === 'object' && options !== null ? options : {};
}

/** How a call ended, for its log line: `ok`, the error's code, or `client_left`. */
function outcome(error: unknown): string {
  if (error === null) return 'ok';
  if (error instanceof ApiError) return error.code;
  return 'client_left';
}
