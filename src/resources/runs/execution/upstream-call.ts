import { shareTimeoutMessage } from '../../../config';
import { ShareTimeout, type Share } from '../../../lib/fair-shares';
import type { UpstreamUrlOptions } from '../../../lib/upstream-url';
import { ADAPTERS } from '../../../providers/adapters';
import { openWithAttempts } from '../../../providers/attempts';
import { openChatCall, readChatStream } from '../../../providers/chat';
import { encodeRequest, type RequestBody } from '../../../providers/request-body';
import { UpstreamError, type UpstreamEvent, type Usage } from '../../../providers/types';
import { countRequest } from '../../../ratelimit';
import { estimatedUsage, promptChars } from '../../../ratelimit/reservation';
import type { VirtualKey } from '../../../db/schema';
import {
  chatCallOptions,
  decryptVirtualKeySecret,
  findActiveVirtualKey,
  servedModel,
} from '../../virtual-keys/commands';
import { callKeys } from '../../virtual-keys/fallbacks';
import { inlineImages } from './prompt-images';
import type { RunRow } from '../../../db/schema';
import { buildChatRequest } from './chat-request';
import { RunFailed } from './failures';
import { REQUEST_FIELDS_BYTES } from './prompt';
import type { Prompt } from '../../../providers/types';
import type { RunDeps } from './run-deps';
import type { TurnAnswer } from './turn-answer';
import type { TraceRecorder } from './trace';

const REQUEST_TOO_LARGE = (bytes: number, limit: number) =>
  `The request to the provider would be ${bytes} bytes, over the gateway's limit of ${limit} (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES): ` +
  "the run's instructions, tools and the turn being answered (its last user message, and the tool calls and outputs since) do not fit, even with the older history left out.";

/** One upstream call of a turn: what it sends, with what, and into which answer. */
export interface UpstreamCall {
  run: RunRow;
  prompt: Prompt;
  /** The completion tokens left to the run (max_completion_tokens), or null for no cap. */
  budget: number | null;
  /** The call's number within the turn: file search rounds call again. */
  round: number;
  virtualKey: VirtualKey;
  secret: string;
  rules: UpstreamUrlOptions;
  answer: TurnAnswer;
  signal: AbortSignal;
  /** Where each attempt is recorded, for the run's trace. */
  trace: TraceRecorder;
}

/**
 * One upstream call of the turn, streamed into the turn's answer: how it finished (`length` when
 * the gateway cut it at the answer cap), its usage, and the key that answered. The call waits for
 * its share of the process's provider calls (takeShare) before its request is built, and holds it
 * until it ends. Until the provider's answer begins, a failure is tried again or moved to the run
 * key's fallbacks (providers/attempts.ts), each further attempt counted in the requests policies
 * that match it; once it began, nothing is tried again.
 */
export async function callUpstream(
  deps: RunDeps,
  call: UpstreamCall,
): Promise<{ finishReason: string; usage: Usage; servedBy: VirtualKey; attempts: number }> {
  const { config } = deps;
  const { run, prompt, virtualKey } = call;
  const share = await takeShare(deps, run.workspaceId, prompt.bytes, call.signal);
  try {
    const roomBytes = config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES - REQUEST_FIELDS_BYTES - prompt.bytes;
    const messages = await inlineImages(deps, run.workspaceId, prompt.messages, {
      now: deps.now(),
      roomBytes,
      rules: call.rules,
    });
    // A request body is a stream read once as it is sent: each attempt encodes its own, for its key's provider.
    const open = async (key: VirtualKey) => {
      const adapter = ADAPTERS[key.provider];
      const request = adapter.body(buildChatRequest(run, messages, call.budget, call.round));
      const body = encodeRequest(request, deps.slices);
      if (body.bytes > config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES) {
        await cancelBody(body);
        throw new RunFailed(
          { code: 'invalid_prompt', message: REQUEST_TOO_LARGE(body.bytes, config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES) },
          'request_too_large',
        );
      }
      const secret = key.id === virtualKey.id ? call.secret : await decryptVirtualKeySecret(deps.secrets, key);
      const options = chatCallOptions(deps, key, secret, share, call.signal);
      const attempt = call.trace.begin(key.slug, servedModel(key, run.model));
      options.timer = attempt.timer(options.timer);
      try {
        const opened = await openChatCall(
          { model: request.model, operation: 'chat/completions', body: body.body, accept: 'text/event-stream' },
          options,
        );
        attempt.status(opened.response.status);
        return { opened, options };
      } catch (error) {
        if (error instanceof UpstreamError && error.status !== undefined) attempt.status(error.status);
        throw error;
      }
    };
    const { value, key, attempts } = await openWithAttempts(open, {
      keys: callKeys(deps, virtualKey, (slug) => findActiveVirtualKey(deps.db, run.workspaceId, slug), call.rules),
      signal: call.signal,
      budgetMs: config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
      retrying: async ({ failed, error, next, attempt }) => {
        deps.log.warn('run upstream attempt failed; trying again', {
          run_id: run.id,
          virtual_key: failed.slug,
          next_virtual_key: next.slug,
          attempt,
          error,
        });
        await countRequest(deps, {
          api_key: run.apiKeyId,
          workspace_id: run.workspaceId,
          virtual_key: next.slug,
          provider: next.provider,
          model: servedModel(next, run.model),
          metadata: run.metadata,
        });
      },
    });
    const events = readChatStream(value.opened, value.options);
    return { ...(await readAnswer(deps, run, events, prompt, call.answer)), servedBy: key, attempts };
  } finally {
    share.end();
  }
}

/**
 * This call's share of the provider calls the process makes (Deps.upstreamShares), for the
 * workspace, weighing `bytes` (its request, images aside): waited for in turn within the
 * first-byte timeout, past which the run fails saying which limit kept it.
 */
async function takeShare(deps: RunDeps, workspaceId: string, bytes: number, signal: AbortSignal): Promise<Share> {
  const { config, upstreamShares } = deps;
  const timeoutMs = config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS;
  try {
    return await upstreamShares.take(workspaceId, bytes, timeoutMs, signal);
  } catch (error) {
    if (!(error instanceof ShareTimeout)) throw error;
    throw new RunFailed(
      { code: 'rate_limit_exceeded', message: shareTimeoutMessage(error, timeoutMs) },
      'upstream_busy',
    );
  }
}

/** The call's answer, read into the turn's answer (callUpstream). */
async function readAnswer(
  deps: RunDeps,
  run: RunRow,
  events: AsyncGenerator<UpstreamEvent[]>,
  prompt: Prompt,
  answer: TurnAnswer,
): Promise<{ finishReason: string; usage: Usage }> {
  let finishReason: string | null = null;
  let usage: Usage | null = null;
  let invalidUsage = false;
  let completionChars = 0;
  read: for await (const batch of events) {
    for (const event of batch) {
      switch (event.type) {
        case 'text':
          completionChars += await answer.text(event.text);
          break;
        case 'reasoning':
          completionChars += await answer.reasoning(event.text);
          break;
        case 'tool_call':
          completionChars += await answer.toolCall(event);
          break;
        case 'finish':
          finishReason = event.reason;
          break;
        case 'usage':
          usage = event.usage;
          break;
        case 'invalid_usage':
          // Counted from what was streamed instead (unless a valid report follows); said once a turn.
          usage = null;
          if (!invalidUsage) {
            deps.log.warn('the upstream reported invalid usage; counting it from the streamed answer', {
              run_id: run.id,
              field: event.field,
            });
          }
          invalidUsage = true;
          break;
      }
      // Leaving the loop ends the upstream call: the connection is dropped, nothing more is read.
      if (answer.cut) break read;
    }
  }
  // Recording the outcome copies the answer (up to the cap) a few times: in a slice of its own.
  while (deps.slices.spent()) await deps.slices.next();
  if (answer.cut) {
    deps.log.warn('the upstream answer reached the answer cap and was cut', {
      run_id: run.id,
      cap_bytes: deps.config.GATEWAY_MAX_ANSWER_BYTES,
    });
    // Estimated from the prompt as written: inlined images' bytes are not its tokens.
    return { finishReason: 'length', usage: usage ?? estimatedUsage(promptChars(prompt.messages), completionChars) };
  }
  if (finishReason === null) {
    throw new UpstreamError('protocol', 'The upstream stream ended before the answer finished.');
  }
  return { finishReason, usage: usage ?? estimatedUsage(promptChars(prompt.messages), completionChars) };
}

/** A body never sent: a stream of it is cancelled, so that nothing it would have read stays open. */
async function cancelBody(body: RequestBody): Promise<void> {
  if (body.body instanceof ReadableStream) await body.body.cancel();
}
