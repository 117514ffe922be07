import { describe, expect, it } from 'vitest';
import { ASSEMBLY_LIMITS, StreamedCompletion } from '../../../src/resources/chat-completions/stored';

/**
 * A streamed completion assembled from its chunks for `store: true`
 * (src/resources/chat-completions/stored.ts), chunk list by chunk list. The same assembly is
 * exercised end to end against the fake provider in stored-completions.test.ts.
 */

const head = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1700000000, model: 'gpt-4o' };
const delta = (index: number, fields: Record<string, unknown>, finish: string | null = null) => ({
  ...head,
  choices: [{ index, delta: fields, finish_reason: finish }],
});
const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };

const assemble = (chunks: Record<string, unknown>[], maxChars = 1000) => {
  const streamed = new StreamedCompletion(maxChars);
  for (const chunk of chunks) streamed.add(chunk);
  return streamed.completion();
};

const message = (fields: Record<string, unknown>) => ({
  role: 'assistant',
  content: null,
  refusal: null,
  ...fields,
});

const cases: [string, Record<string, unknown>[], unknown][] = [
  [
    'content joined, the finish reason and the usage chunk kept',
    [
      delta(0, { role: 'assistant', content: '' }),
      delta(0, { content: 'Hello' }),
      delta(0, { content: ' there' }, 'stop'),
      { ...head, choices: [], usage },
    ],
    {
      ...head,
      object: 'chat.completion',
      choices: [{ index: 0, message: message({ content: 'Hello there' }), finish_reason: 'stop', logprobs: null }],
      usage,
    },
  ],
  [
    'two choices interleaved, each in its place; no usage chunk, no usage',
    [delta(1, { content: 'b' }), delta(0, { content: 'a' }), delta(1, { content: 'B' }, 'length')],
    {
      ...head,
      object: 'chat.completion',
      choices: [
        { index: 0, message: message({ content: 'a' }), finish_reason: null, logprobs: null },
        { index: 1, message: message({ content: 'bB' }), finish_reason: 'length', logprobs: null },
      ],
    },
  ],
  [
    "tool calls by their index, each one's arguments joined; a refusal",
    [
      delta(0, { tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'g', arguments: '{' } }] }),
      delta(0, { tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'f', arguments: '' } }] }),
      delta(0, {
        tool_calls: [
          { index: 1, function: { arguments: '}' } },
          { index: 0, function: { arguments: '[]' } },
        ],
      }),
      delta(0, { refusal: 'no' }, 'tool_calls'),
    ],
    {
      ...head,
      object: 'chat.completion',
      choices: [
        {
          index: 0,
          message: message({
            refusal: 'no',
            tool_calls: [
              { id: 'call_a', type: 'function', function: { name: 'f', arguments: '[]' } },
              { id: 'call_b', type: 'function', function: { name: 'g', arguments: '{}' } },
            ],
          }),
          finish_reason: 'tool_calls',
          logprobs: null,
        },
      ],
    },
  ],
  [
    'a stream that ends with an error object is not kept',
    [delta(0, { content: 'half' }), { error: { message: 'overloaded', type: 'server_error' } }],
    { type: 'not_kept', reason: 'the provider ended the stream with an error' },
  ],
  [
    'a choice index past the limit is not kept',
    [delta(ASSEMBLY_LIMITS.choices, { content: 'x' })],
    { type: 'not_kept', reason: `a choice's index is not an integer below ${ASSEMBLY_LIMITS.choices}` },
  ],
  [
    'a tool call index that is not an integer is not kept',
    [delta(0, { tool_calls: [{ index: '__proto__', function: { arguments: 'x' } }] })],
    { type: 'not_kept', reason: `a tool call's index is not an integer below ${ASSEMBLY_LIMITS.toolCalls}` },
  ],
  [
    'text past the bound is not kept',
    [delta(0, { content: 'x'.repeat(600) }), delta(0, { content: 'y'.repeat(600) })],
    { type: 'not_kept', reason: 'the completion is larger than 1000 characters (GATEWAY_MAX_ANSWER_BYTES)' },
  ],
];

describe('StreamedCompletion', () => {
  it.each(cases)('%s', (_, chunks, expected) => {
    const assembled = assemble(chunks);
    if (assembled.type === 'completion') expect(assembled.completion).toEqual(expected);
    else expect(assembled).toEqual(expected);
  });
});
