import type { Config } from '../../../config';
import { utf8Length } from '../../../lib/text';
import type { ChatContentPart, ImageFilePart, Prompt, PromptMessage } from '../../../providers/types';
import { CHARS_PER_TOKEN } from '../../../ratelimit/reservation';
import type { ToolCallsDetails, TruncationStrategy } from '../../../db/json-columns';
import type { StepRow } from '../queries';
import type { History, HistoryStep, RunRow } from '../../../db/schema';
import type { MessageRow } from '../../threads/queries';
import { timeline } from '../../threads/timeline';
import { sumUsage } from './outcome';

/**
 * A turn's prompt, from the thread's history: pure decisions, kept apart from the reads
 * (resources/threads/history.ts) and the engine (test/resources/runs/execution/prompt.unit.test.ts lists the cases).
 *
 * The history is the thread as it happened: its messages, user and assistant, and where a run
 * called tools, the calls and their outputs, just before the message the run answered with after
 * them. Truncation then leaves out the oldest of it: `last_messages` keeps the last N messages
 * (and what came after the first of them); every strategy keeps at most GATEWAY_MAX_HISTORY_BYTES,
 * and no more than the request to the provider has room for (GATEWAY_MAX_UPSTREAM_REQUEST_BYTES);
 * `auto` also leaves out the oldest until the prompt's estimate fits what max_prompt_tokens leaves
 * for the turn. The last user message and what follows it (the turn being answered) are never left
 * out: a prompt that does not fit max_prompt_tokens even then is not sent, and the run ends
 * incomplete; one too large for the request fails the run (upstream-call.ts).
 */

export interface PromptLimits {
  truncation: TruncationStrategy;
  /** The prompt tokens this turn may use: max_prompt_tokens less the run's earlier turns', or null. */
  promptTokens: number | null;
  /** GATEWAY_MAX_HISTORY_BYTES: the most of the history a turn sends. */
  historyBytes: number;
  /**
   * The most the prompt's messages and tools may take in the request, as JSON: what
   * GATEWAY_MAX_UPSTREAM_REQUEST_BYTES leaves once REQUEST_FIELDS_BYTES are set aside.
   */
  requestBytes: number;
}

/** What a request's fields besides its messages and tools take at most (model, settings), set aside from its bound. */
export const REQUEST_FIELDS_BYTES = 16 * 1024;

/** The limits of a turn of `run` whose earlier turns used `earlierPromptTokens`. */
export function promptLimits(
  run: Pick<RunRow, 'truncationStrategy' | 'maxPromptTokens'>,
  earlierPromptTokens: number,
  config: Pick<Config, 'GATEWAY_MAX_HISTORY_BYTES' | 'GATEWAY_MAX_UPSTREAM_REQUEST_BYTES'>,
): PromptLimits {
  return {
    truncation: run.truncationStrategy,
    promptTokens: run.maxPromptTokens === null ? null : run.maxPromptTokens - earlierPromptTokens,
    historyBytes: config.GATEWAY_MAX_HISTORY_BYTES,
    requestBytes: config.GATEWAY_MAX_UPSTREAM_REQUEST_BYTES - REQUEST_FIELDS_BYTES,
  };
}

/**
 * The prompt of a later turn of `run` (after tool outputs, or a round of the gateway's tools): its
 * thread's history and the run's own steps so far, what its earlier turns were sent taken from
 * the prompt tokens it may use.
 */
export function laterTurnPrompt(
  run: Pick<RunRow, 'createdAt' | 'instructions' | 'tools' | 'truncationStrategy' | 'maxPromptTokens'>,
  history: History,
  steps: StepRow[],
  config: Pick<Config, 'GATEWAY_MAX_HISTORY_BYTES' | 'GATEWAY_MAX_UPSTREAM_REQUEST_BYTES'>,
): Prompt {
  const earlier = sumUsage(steps.map((step) => step.usage));
  return buildPrompt(run, history, steps, promptLimits(run, earlier.prompt_tokens, config));
}

/**
 * The prompt of a turn of `run`: its instructions as the system message, then its thread's history
 * (`history`, the other runs' steps among it; `ownSteps`, the run's own so far), truncated.
 */
export function buildPrompt(
  run: Pick<RunRow, 'createdAt' | 'instructions' | 'tools'>,
  history: History,
  ownSteps: StepRow[],
  limits: PromptLimits,
): Prompt {
  const steps = [...history.steps, ...ownSteps.map((step) => ({ ...step, runCreatedAt: run.createdAt }))];
  const units = historyUnits(history.messages, steps);
  const system: PromptMessage[] = run.instructions ? [{ role: 'system', content: run.instructions }] : [];
  const systemJson = JSON.stringify(system);
  const toolsJson = JSON.stringify(run.tools);
  const fixedChars = systemJson.length + toolsJson.length;
  const fixedBytes = utf8Length(systemJson) + utf8Length(toolsJson);

  // From the end: the characters and bytes of units[i…], and how many of them are thread messages.
  const charsFrom = new Array<number>(units.length + 1).fill(0);
  const bytesFrom = new Array<number>(units.length + 1).fill(0);
  let start = 0;
  let counted = 0;
  const keep = limits.truncation.type === 'last_messages' ? (limits.truncation.last_messages ?? Infinity) : Infinity;
  let index = units.length;
  for (const unit of [...units].reverse()) {
    index--;
    charsFrom[index] = charsAt(index + 1) + unit.chars;
    bytesFrom[index] = bytesAt(index + 1) + unit.bytes;
    if (unit.message && ++counted === keep) start = index;
  }
  // Every index from 0 to units.length is filled: the fallback is never taken.
  function charsAt(index: number): number {
    return charsFrom[index] ?? 0;
  }
  function bytesAt(index: number): number {
    return bytesFrom[index] ?? 0;
  }
  const tokensFrom = (i: number) => Math.ceil((fixedChars + charsAt(i)) / CHARS_PER_TOKEN);
  const lastUser = units.findLastIndex((unit) => unit.user);
  const protectedFrom = lastUser === -1 ? units.length - 1 : lastUser;
  const auto = limits.truncation.type === 'auto';
  const over = (i: number) =>
    bytesAt(i) > limits.historyBytes ||
    fixedBytes + bytesAt(i) > limits.requestBytes ||
    (auto && limits.promptTokens !== null && tokensFrom(i) > limits.promptTokens);
  while (start < protectedFrom && over(start)) start++;

  const tokens = tokensFrom(start);
  return {
    messages: [...system, ...units.slice(start).flatMap((unit) => unit.messages)],
    chars: fixedChars + charsAt(start),
    bytes: fixedBytes + bytesAt(start),
    tokens,
    fits: limits.promptTokens === null || tokens <= limits.promptTokens,
  };
}

/** What truncation keeps or leaves out whole: a thread message, or one turn's tool calls with their outputs. */
interface Unit {
  messages: PromptMessage[];
  /** A thread message (what last_messages counts), rather than tool calls. */
  message: boolean;
  /** A user message. */
  user: boolean;
  chars: number;
  bytes: number;
}

/**
 * The history in the order it happened (threads/timeline.ts): a run's completed tool calls with
 * their outputs among the thread's messages.
 */
function historyUnits(messages: MessageRow[], steps: HistoryStep[]): Unit[] {
  const placed = steps.filter(
    (step) =>
      step.stepDetails.type === 'message_creation' ||
      (step.status === 'completed' && step.stepDetails.tool_calls.length > 0),
  );
  return timeline(messages, placed, (step) =>
    step.stepDetails.type === 'message_creation' ? step.stepDetails.message_creation.message_id : null,
  ).flatMap((entry): Unit[] => {
    if (entry.step) return entry.step.stepDetails.type === 'tool_calls' ? [toolCallsUnit(entry.step.stepDetails)] : [];
    const chat = toChatMessage(entry.message);
    return chat ? [unit([chat], { message: true, user: chat.role === 'user' })] : [];
  });
}

function unit(messages: PromptMessage[], kind: { message: boolean; user: boolean }): Unit {
  const json = JSON.stringify(messages);
  return { messages, ...kind, chars: json.length, bytes: utf8Length(json) };
}

/** A turn's tool calls as the model made them, each followed by the output the client submitted. */
function toolCallsUnit(details: ToolCallsDetails): Unit {
  const calls: PromptMessage = {
    role: 'assistant',
    content: null,
    tool_calls: details.tool_calls.map((call) => ({
      id: call.id,
      type: 'function',
      function: { name: call.function.name, arguments: call.function.arguments },
    })),
  };
  const outputs = details.tool_calls.map((call): PromptMessage => ({
    role: 'tool',
    tool_call_id: call.id,
    content: call.function.output ?? '',
  }));
  return unit([calls, ...outputs], { message: false, user: false });
}

/**
 * A thread message as a chat message: user text as a string, user images as vision content parts
 * (with their text parts, in order; uploaded ones named, inlined when the request is built), an
 * assistant's text (after a line for each figure it showed). An assistant message without either (a
 * turn that only called tools, or ended before any) says nothing and is left out.
 */
function toChatMessage(message: MessageRow): PromptMessage | null {
  const parts = message.content;
  const text = (separator: string) =>
    parts.map((part) => (part.type === 'text' ? part.text.value : '')).join(separator);
  if (message.role === 'assistant') {
    // A provider takes no image in an assistant's message: a figure it showed is said in words.
    const content = parts
      .map((part) => (part.type === 'image_file' ? `[Image ${part.image_file.file_id} shown to the user]\n` : ''))
      .join('')
      .concat(text(''));
    return content === '' ? null : { role: 'assistant', content };
  }
  // A conversation's system and developer messages (text only, resources/conversations/items.ts):
  // Chat Completions providers take both as system.
  if (message.role === 'system' || message.role === 'developer') return { role: 'system', content: text('\n') };
  if (parts.every((part) => part.type === 'text')) return { role: 'user', content: text('\n') };
  return {
    role: 'user',
    content: parts.map((part): ChatContentPart | ImageFilePart => {
      switch (part.type) {
        case 'text':
          return { type: 'text', text: part.text.value };
        case 'image_url':
          return { type: 'image_url', image_url: part.image_url };
        case 'image_file':
          return { type: 'image_file', image_file: part.image_file };
      }
    }),
  };
}
