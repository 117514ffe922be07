import { describe, expect, it } from 'vitest';
import {
  completionBudget,
  sumUsage,
  turnOutcome,
  type TurnEnd,
  type TurnOutcome,
} from '../../../../src/resources/runs/execution/outcome';

/**
 * How a turn of a run ends (src/resources/runs/execution/outcome.ts): the decision alone, case by case. The same rules
 * are exercised end to end against the fake provider in test/resources/runs/create-and-run.test.ts and hostile-upstream.test.ts.
 */

const usage = (prompt: number, completion: number) => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
});

const end = (overrides: Partial<TurnEnd>): TurnEnd => ({
  finishReason: 'stop',
  toolCalls: false,
  cutAtAnswerCap: false,
  usage: usage(100, 20),
  maxPromptTokens: null,
  maxCompletionTokens: null,
  ...overrides,
});

const ended = (
  status: 'completed' | 'incomplete',
  incompleteReason: 'max_completion_tokens' | 'max_prompt_tokens' | null,
  messageIncompleteReason: 'max_tokens' | 'content_filter' | null = null,
  toolCallsCutBy: 'answer_cap' | 'max_completion_tokens' | null = null,
): TurnOutcome => ({ status, incompleteReason, messageIncompleteReason, toolCallsCutBy });

const cases: [string, Partial<TurnEnd>, TurnOutcome][] = [
  ['an answer that stopped completes', {}, ended('completed', null)],
  [
    'tool calls that finished ask for outputs',
    { finishReason: 'tool_calls', toolCalls: true },
    { status: 'requires_action' },
  ],
  [
    'tool calls ask for outputs whatever the finish reason says, unless cut',
    { finishReason: 'stop', toolCalls: true },
    { status: 'requires_action' },
  ],
  [
    'an answer cut by the completion token limit is incomplete',
    { finishReason: 'length' },
    ended('incomplete', 'max_completion_tokens', 'max_tokens'),
  ],
  [
    'tool calls cut by the completion token limit fail',
    { finishReason: 'length', toolCalls: true },
    ended('incomplete', 'max_completion_tokens', 'max_tokens', 'max_completion_tokens'),
  ],
  [
    'tool calls cut at the answer cap fail, saying so',
    { finishReason: 'length', toolCalls: true, cutAtAnswerCap: true },
    ended('incomplete', 'max_completion_tokens', 'max_tokens', 'answer_cap'),
  ],
  [
    'an answer cut at the answer cap is incomplete like one cut by the token limit',
    { finishReason: 'length', cutAtAnswerCap: true },
    ended('incomplete', 'max_completion_tokens', 'max_tokens'),
  ],
  [
    'a filtered answer completes the run, its message incomplete',
    { finishReason: 'content_filter' },
    ended('completed', null, 'content_filter'),
  ],
  [
    'a filtered answer past a cap: the run is incomplete for the cap',
    { finishReason: 'content_filter', maxPromptTokens: 50 },
    ended('incomplete', 'max_prompt_tokens', 'content_filter'),
  ],
  ['prompt tokens past max_prompt_tokens', { maxPromptTokens: 99 }, ended('incomplete', 'max_prompt_tokens')],
  ['prompt tokens exactly at max_prompt_tokens', { maxPromptTokens: 100 }, ended('completed', null)],
  [
    'completion tokens past max_completion_tokens',
    { maxCompletionTokens: 19 },
    ended('incomplete', 'max_completion_tokens'),
  ],
  ['completion tokens exactly at max_completion_tokens', { maxCompletionTokens: 20 }, ended('completed', null)],
  [
    'past both caps: the prompt is named',
    { maxPromptTokens: 10, maxCompletionTokens: 10 },
    ended('incomplete', 'max_prompt_tokens'),
  ],
  ['a finish reason the gateway does not know completes', { finishReason: 'eos' }, ended('completed', null)],
];

describe('turnOutcome', () => {
  it.each(cases)('%s', (_name, overrides, expected) => {
    expect(turnOutcome(end(overrides))).toEqual(expected);
  });
});

describe('completionBudget', () => {
  it.each([
    ['no cap: no budget', null, 500, null],
    ['what the cap leaves after earlier turns', 1000, 400, 600],
    ['nothing left', 1000, 1000, 0],
    ['earlier turns went past the cap', 1000, 1200, -200],
  ] as const)('%s', (_name, cap, earlier, expected) => {
    expect(completionBudget(cap, earlier)).toBe(expected);
  });
});

describe('sumUsage', () => {
  it('adds usages and skips the turns that have none', () => {
    expect(sumUsage([usage(10, 5), null, undefined, usage(7, 3)])).toEqual(usage(17, 8));
    expect(sumUsage([])).toEqual(usage(0, 0));
  });
});
