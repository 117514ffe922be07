import type { Actor, RequestContext } from '../../actor';
import { shareTimeoutMessage } from '../../config';
import type { Settings } from '../../db/settings-cache';
import { recordUsage, type CountedCall } from '../../db/usage-counts';
import type { Deps } from '../../deps';
import { ApiError } from '../../errors';
import { ShareTimeout, type Share } from '../../lib/fair-shares';
import { ADAPTERS, type UpstreamOperation } from '../../providers/adapters';
import { openChatCall, type OpenedChatCall } from '../../providers/chat';
import { admitRequest, requestMetadata, settleTokens, turnReservation, type Admission } from '../../ratelimit';
import { CHARS_PER_TOKEN } from '../../ratelimit/reservation';
import type { VirtualKey } from '../../db/schema';
import { decryptVirtualKeySecret, servedModel } from '../virtual-keys/commands';
import { upstreamRules } from '../virtual-keys/upstream-rules';
import { readJsonAnswer, relayStream, upstreamFailure, type AnswerTally } from './answer';
import type { CreateChatCompletionBody } from './schemas';

/**
 * POST /v1/chat/completions, and the other calls passed through to the provider of the caller's
 * virtual key (POST /v1/completions, /v1/embeddings, /v1/moderations: each a PassThroughEndpoint),
 * in the order it must happen:
 *
 *   resolve the virtual key (as a run's) ─> check its address ─> admit (rate limits: a refusal
 *     sends nothing) ─> take a share of the provider calls ─> send ─> answer (JSON, or the stream
 *     relayed) ─> settle the tokens, count the usage, log the call
 *
 * A call that fails before its answer began releases its reservation and counts nothing; one the
 * provider answered is charged and counted its usage (an estimate when it reported none).
 */

export type ChatCompletionDeps = Pick<
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
>;

/** The provider's answer: its JSON's bytes, or its event stream relayed, with the rate-limit headers. */
export interface ChatCompletionAnswer {
  body: Uint8Array | ReadableStream<Uint8Array>;
  headers: Record<string, string>;
}

/** The request a call is made for, beyond its body: its waitUntil keeps a relayed stream's settlement alive on Workers. */
export interface ChatCompletionRequest extends RequestContext {
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
    maxCompletionTokens: body.max_completion_tokens ?? body.max_tokens ?? null,
    metadata: body.metadata,
  }),
};

const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' };
const JSON_HEADERS = { 'content-type': 'application/json' };

export function createChatCompletion(
  deps: ChatCompletionDeps,
  actor: Actor,
  snapshot: Settings,
  body: CreateChatCompletionBody,
  request: ChatCompletionRequest,
): Promise<ChatCompletionAnswer> {
  return passThrough(deps, actor, snapshot, CHAT_COMPLETIONS, body, request);
}

/** One call of `endpoint`, its body sent as the client sent it (but for the usage a stream is asked for). */
export async function passThrough<Body extends object>(
  deps: ChatCompletionDeps,
  actor: Actor,
  snapshot: Settings,
  endpoint: PassThroughEndpoint<Body>,
  body: Body,
  request: ChatCompletionRequest,
): Promise<ChatCompletionAnswer> {
  const { config } = deps;
  const startedAt = Date.now();
  const read = endpoint.read(body);
  const key = await snapshot.virtualKey(actor.workspaceId, { slug: actor.virtualKeySlug, model: read.model });
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
  const admission = await admitRequest(
    deps,
    {
      api_key: actor.apiKeyId,
      workspace_id: actor.workspaceId,
      virtual_key: key.slug,
      provider: key.provider,
      model,
      metadata: requestMetadata(read.metadata, actor.metadataHeader),
    },
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
  const call = new CallRecord(deps, actor, key, admission, endpoint, {
    model,
    stream,
    promptChars,
    startedAt,
    request,
  });

  let opened: OpenedChatCall;
  try {
    call.share = await takeShare(deps, actor.workspaceId, bytes.byteLength, request.signal);
    opened = await openChatCall(
      {
        model: read.model,
        operation: endpoint.operation,
        body: bytes,
        accept: stream ? 'text/event-stream' : 'application/json',
      },
      {
        fetch: deps.fetch,
        adapter: ADAPTERS[key.provider],
        baseUrl: key.baseUrl,
        options: key.options,
        secret: await decryptVirtualKeySecret(deps.secrets, key),
        firstByteTimeoutMs: config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
        queuedMs: call.share.waitedMs,
        sent: call.share.sent,
        idleTimeoutMs: config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS,
        signal: request.signal,
        slices: deps.slices,
      },
    );
  } catch (error) {
    // A client that left is answered nothing: its reason is rethrown as is.
    const failure = request.signal.aborted ? error : upstreamFailure(error, key.slug);
    await call.end(null, failure);
    throw failure;
  }

  if (stream) {
    const events = relayStream(opened, {
      clientWantsUsage,
      virtualKey: key.slug,
      slices: deps.slices,
      done: (tally, error) => request.waitUntil(call.end(tally, error)),
    });
    return { body: events, headers: { ...SSE_HEADERS, ...admission.headers } };
  }
  try {
    const { bytes: answer, tally } = await readJsonAnswer(opened, config.GATEWAY_MAX_ANSWER_BYTES, endpoint.completes);
    await call.end(tally, null);
    return { body: answer, headers: { ...JSON_HEADERS, ...admission.headers } };
  } catch (error) {
    const failure = upstreamFailure(error, key.slug);
    await call.end({ usage: null, invalidUsage: null, completionChars: 0 }, failure);
    throw failure;
  }
}

/**
 * This call's share of the provider calls the process makes (Deps.upstreamShares), as a run's
 * turn takes one: waited for within the first-byte timeout, past which it is a 429 naming the limit.
 */
async function takeShare(
  deps: ChatCompletionDeps,
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

/**
 * What a call holds until it ends, and what its end writes, once: its share given back, its tokens
 * settled (released when the provider answered nothing), its usage counted when the provider
 * answered, and its one log line.
 */
class CallRecord {
  share: Share | null = null;
  #ended = false;

  constructor(
    private readonly deps: ChatCompletionDeps,
    private readonly actor: Actor,
    private readonly key: VirtualKey,
    private readonly admission: Admission,
    private readonly endpoint: Pick<PassThroughEndpoint<object>, 'name' | 'usageKind'>,
    private readonly call: {
      model: string;
      stream: boolean;
      promptChars: number;
      startedAt: number;
      request: ChatCompletionRequest;
    },
  ) {}

  /** `tally` is null when the provider answered nothing (no 2xx): nothing is charged or counted. */
  async end(tally: AnswerTally | null, error: unknown): Promise<void> {
    if (this.#ended) return;
    this.#ended = true;
    const { deps, actor, key, endpoint, call } = this;
    this.share?.end();
    const usage = tally && (tally.usage ?? estimate(call.promptChars, tally.completionChars));
    const fields = {
      request_id: call.request.requestId,
      workspace_id: actor.workspaceId,
      api_key_id: actor.apiKeyId,
      virtual_key: key.slug,
      model: call.model,
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
          model: call.model,
          apiKeyId: actor.apiKeyId,
          virtualKeyId: key.id,
          promptTokens: usage.prompt_tokens,
          completionTokens: usage.completion_tokens,
        });
      }
    } catch (failure) {
      // The answer has gone out (or is going): a settlement or count that fails is logged, never
      // thrown at it (a relayed stream ends the call without awaiting this).
      deps.log.error(`${endpoint.name} usage not settled or recorded`, { ...fields, error: failure });
      return;
    }
    if (error === null) deps.log.info(endpoint.name, fields);
    else deps.log.warn(`${endpoint.name} failed`, fields);
  }
}

/** The client's `stream_options`, which the usage the gateway asks for is added to. */
function streamOptions(body: object): object {
  const options = 'stream_options' in body ? body.stream_options : undefined;
  return typeof options === 'object' && options !== null ? options : {};
}

/** What an answer without plausible usage is charged: four characters a token, as for runs. */
function estimate(promptChars: number, completionChars: number) {
  const prompt = Math.ceil(promptChars / CHARS_PER_TOKEN);
  const completion = Math.ceil(completionChars / CHARS_PER_TOKEN);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** How a call ended, for its log line: `ok`, the error's code, or `client_left`. */
function outcome(error: unknown): string {
  if (error === null) return 'ok';
  if (error instanceof ApiError) return error.code;
  return 'client_left';
}
