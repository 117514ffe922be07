import type { Actor } from '../../actor';
import type { Deps } from '../../deps';
import { newId } from '../../lib/ids';
import { isRecord } from '../../providers/chat';
import { insertStoredCompletion } from './queries';
import type { CreateChatCompletionBody } from './schemas';

/**
 * `store: true`: the provider behind a virtual key keeps nothing, so the gateway keeps the
 * completion in its own database for GET /v1/chat/completions and the rest (routes.ts). Only a
 * call that succeeded is kept: a non-streamed one's answer as the provider sent it, a streamed
 * one's assembled from its chunks (StreamedCompletion), both within GATEWAY_MAX_ANSWER_BYTES. A
 * write that fails is logged and never reaches the answer, which it follows.
 */

type StoreDeps = Pick<Deps, 'db' | 'log' | 'now' | 'config'>;

/**
 * A provider's completion id the gateway will store under: OpenAI's are `chatcmpl-` and about 30
 * letters and digits. Anything else (a path's characters, a long or empty id) gets the gateway's own.
 */
const SAFE_ID = /^[A-Za-z0-9][\w.-]{0,127}$/;

/** What a call with `store: true` keeps; null for one without. */
export function completionStore(
  deps: StoreDeps,
  actor: Actor,
  body: CreateChatCompletionBody,
  requestId: string,
): CompletionStore | null {
  return body.store === true ? new CompletionStore(deps, actor, body, requestId) : null;
}

export class CompletionStore {
  /** Given each chunk of a streamed answer (pass-through/answer.ts, relayStream). */
  readonly streamed: StreamedCompletion;

  constructor(
    private readonly deps: StoreDeps,
    private readonly actor: Actor,
    private readonly body: CreateChatCompletionBody,
    private readonly requestId: string,
  ) {
    this.streamed = new StreamedCompletion(deps.config.GATEWAY_MAX_ANSWER_BYTES);
  }

  /** Keeps a non-streamed answer, its object as the provider sent it. */
  keep(answer: Record<string, unknown>): Promise<void> {
    return this.#write(answer);
  }

  /** Keeps the streamed answer assembled from its chunks, once its stream has ended well. */
  keepStreamed(): Promise<void> {
    const assembled = this.streamed.completion();
    if (assembled.type === 'not_kept') {
      this.deps.log.warn('chat completion not stored', { ...this.#fields(), reason: assembled.reason });
      return Promise.resolve();
    }
    return this.#write(assembled.completion);
  }

  /**
   * Under the provider's id when it is safe and not already one of the workspace's (which is left
   * as it is), else under one of the gateway's.
   */
  async #write(completion: Record<string, unknown>): Promise<void> {
    const { deps, actor, body } = this;
    const providerId = typeof completion.id === 'string' && SAFE_ID.test(completion.id) ? completion.id : null;
    const row = (id: string) => ({
      id,
      workspaceId: actor.workspaceId,
      createdAt: deps.now(),
      model: body.model,
      metadata: body.metadata ?? {},
      completion: { ...completion, id },
      messages: body.messages,
    });
    try {
      if (providerId !== null && (await insertStoredCompletion(deps.db, row(providerId)))) return;
      const id = newId('chatcmpl');
      if (!(await insertStoredCompletion(deps.db, row(id)))) throw new Error(`The id ${id} is taken.`);
      deps.log.warn('chat completion stored under the gateway id', {
        ...this.#fields(),
        id,
        reason: providerId === null ? 'the provider gave no usable id' : `the workspace already stored ${providerId}`,
      });
    } catch (error) {
      deps.log.error('chat completion not stored', { ...this.#fields(), error });
    }
  }

  #fields() {
    return { request_id: this.requestId, workspace_id: this.actor.workspaceId, model: this.body.model };
  }
}

/** How many choices (`n`) and tool calls per choice a streamed completion may assemble. */
export const ASSEMBLY_LIMITS = { choices: 128, toolCalls: 128 };

interface AssembledChoice {
  index: number;
  role: unknown;
  content: string | null;
  refusal: string | null;
  toolCalls: Map<number, { id: unknown; type: unknown; function: { name: unknown; arguments: string } }>;
  finishReason: unknown;
}

/**
 * A streamed completion assembled from its chunks as the SDKs assemble one: each choice's content,
 * refusal and tool calls' arguments joined, its role and finish reason, the answer's id, created,
 * model, fingerprint and service tier, and the usage chunk's usage. Bounded: the text it joins by
 * `maxChars`, the choices and tool calls by ASSEMBLY_LIMITS; a stream past them is not kept, nor
 * one that holds an error.
 * Log probabilities are not assembled.
 */
export class StreamedCompletion {
  #head: Record<string, unknown> = {};
  #choices = new Map<number, AssembledChoice>();
  #usage: unknown = null;
  #chars = 0;
  #notKept: string | null = null;

  constructor(private readonly maxChars: number) {}

  /** Adds a chunk (a bound method: relayStream is handed it as is). */
  readonly add = (chunk: Record<string, unknown>): void => {
    if (this.#notKept !== null) return;
    // OpenAI ends a stream that fails with an error object; the provider may then end it cleanly.
    if (chunk.error != null) {
      this.#notKept = 'the provider ended the stream with an error';
      return;
    }
    for (const field of HEAD_FIELDS) {
      if (chunk[field] != null && this.#head[field] === undefined) this.#head[field] = this.#counted(chunk[field]);
    }
    if (isRecord(chunk.usage)) this.#usage = this.#counted(chunk.usage);
    if (!Array.isArray(chunk.choices)) return;
    for (const choice of chunk.choices) {
      if (isRecord(choice)) this.#addChoice(choice);
    }
  };

  #addChoice(choice: Record<string, unknown>): void {
    const index = choice.index;
    if (!isIndex(index, ASSEMBLY_LIMITS.choices)) {
      this.#notKept = `a choice's index is not an integer below ${ASSEMBLY_LIMITS.choices}`;
      return;
    }
    let assembled = this.#choices.get(index);
    if (assembled === undefined) {
      assembled = { index, role: undefined, content: null, refusal: null, toolCalls: new Map(), finishReason: null };
      this.#choices.set(index, assembled);
    }
    if (choice.finish_reason != null) assembled.finishReason = choice.finish_reason;
    const delta = choice.delta;
    if (!isRecord(delta)) return;
    if (delta.role != null) assembled.role = delta.role;
    if (typeof delta.content === 'string') assembled.content = (assembled.content ?? '') + this.#text(delta.content);
    if (typeof delta.refusal === 'string') assembled.refusal = (assembled.refusal ?? '') + this.#text(delta.refusal);
    if (!Array.isArray(delta.tool_calls)) return;
    for (const call of delta.tool_calls) {
      if (!isRecord(call)) continue;
      if (!isIndex(call.index, ASSEMBLY_LIMITS.toolCalls)) {
        this.#notKept = `a tool call's index is not an integer below ${ASSEMBLY_LIMITS.toolCalls}`;
        return;
      }
      let assembledCall = assembled.toolCalls.get(call.index);
      if (assembledCall === undefined) {
        assembledCall = { id: undefined, type: 'function', function: { name: undefined, arguments: '' } };
        assembled.toolCalls.set(call.index, assembledCall);
      }
      if (call.id != null) assembledCall.id = this.#counted(call.id);
      if (call.type != null) assembledCall.type = this.#counted(call.type);
      const fn = call.function;
      if (!isRecord(fn)) continue;
      if (fn.name != null) assembledCall.function.name = this.#counted(fn.name);
      if (typeof fn.arguments === 'string') assembledCall.function.arguments += this.#text(fn.arguments);
    }
  }

  /** Text joined into the completion, counted against the bound. */
  #text(text: string): string {
    this.#chars += text.length;
    if (this.#chars > this.maxChars) {
      this.#notKept = `the completion is larger than ${this.maxChars} characters (GATEWAY_MAX_ANSWER_BYTES)`;
    }
    return text;
  }

  /** Any other value kept (ids, names, usage: small, but the provider's), counted as its JSON. */
  #counted(value: unknown): unknown {
    this.#text(JSON.stringify(value));
    return value;
  }

  /** The chat.completion object the chunks make, or why it is not to be kept. */
  completion(): { type: 'completion'; completion: Record<string, unknown> } | { type: 'not_kept'; reason: string } {
    if (this.#notKept !== null) return { type: 'not_kept', reason: this.#notKept };
    const choices = [...this.#choices.values()]
      .sort((a, b) => a.index - b.index)
      .map((choice) => {
        const toolCalls = [...choice.toolCalls.entries()].sort(([a], [b]) => a - b).map(([, call]) => call);
        return {
          index: choice.index,
          message: {
            role: choice.role ?? 'assistant',
            content: choice.content,
            refusal: choice.refusal,
            ...(toolCalls.length > 0 && { tool_calls: toolCalls }),
          },
          finish_reason: choice.finishReason,
          logprobs: null,
        };
      });
    return {
      type: 'completion',
      // A provider that sent no usage chunk (one that ignores stream_options): the completion has none.
      completion: {
        ...this.#head,
        object: 'chat.completion',
        choices,
        ...(this.#usage !== null && { usage: this.#usage }),
      },
    };
  }
}

const HEAD_FIELDS = ['id', 'created', 'model', 'system_fingerprint', 'service_tier'] as const;

const isIndex = (value: unknown, below: number): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0 && value < below;
