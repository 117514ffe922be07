import { describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../../../src/providers/types';
import { buildPrompt, type PromptLimits } from '../../../../src/resources/runs/execution/prompt';
import type { FunctionToolCall, TruncationStrategy } from '../../../../src/db/json-columns';
import type { MessageContent } from '../../../../src/db/schema';
import type { HistoryStep } from '../../../../src/db/schema';
import type { StepRow } from '../../../../src/resources/runs/queries';
import type { MessageRow } from '../../../../src/resources/threads/queries';

/**
 * A turn's prompt from its thread's history (src/resources/runs/execution/prompt.ts): the order in which messages and
 * earlier runs' tool calls are sent, and what truncation leaves out, case by case. The same rules
 * are exercised end to end, against the fake provider, in test/resources/runs/run-on-thread.test.ts.
 */

let clock = 1_000;

/** A thread message; `content` a string (one text part) or parts. */
function message(
  id: string,
  role: 'user' | 'assistant',
  content: string | MessageContent[],
  runId: string | null = null,
): MessageRow {
  const parts: MessageContent[] =
    typeof content === 'string' ? [{ type: 'text', text: { value: content, annotations: [] } }] : content;
  const at = (clock += 10);
  return {
    id,
    threadId: 'thread_1',
    workspaceId: 'ws',
    createdAt: at,
    role,
    content: parts,
    status: 'completed',
    assistantId: runId === null ? null : 'asst_1',
    runId,
    attachments: [],
    metadata: {},
    incompleteDetails: null,
    completedAt: at,
    incompleteAt: null,
  };
}

const wrote = (runId: string, messageId: string, runCreatedAt: number): HistoryStep => ({
  id: `step_${messageId}`,
  runId,
  type: 'message_creation',
  status: 'completed',
  stepDetails: { type: 'message_creation', message_creation: { message_id: messageId } },
  runCreatedAt,
});

const call = (id: string, output: string | null): FunctionToolCall => ({
  id,
  type: 'function',
  function: { name: 'lookup', arguments: `{"q":"${id}"}`, output },
});

const called = (
  runId: string,
  calls: FunctionToolCall[],
  runCreatedAt: number,
  status: StepRow['status'] = 'completed',
): HistoryStep => ({
  id: `step_${calls[0]?.id ?? runId}`,
  runId,
  type: 'tool_calls',
  status,
  stepDetails: { type: 'tool_calls', tool_calls: calls },
  runCreatedAt,
});

/** A step of the run being executed, as listSteps reads it. */
const own = (id: string, step: HistoryStep): StepRow => ({
  id,
  runId: step.runId,
  threadId: 'thread_1',
  assistantId: 'asst_1',
  workspaceId: 'ws',
  type: step.type,
  status: step.status,
  stepDetails: step.stepDetails,
  createdAt: step.runCreatedAt,
  completedAt: null,
  cancelledAt: null,
  failedAt: null,
  expiredAt: null,
  lastError: null,
  usage: null,
  reasoning: null,
});

/** The chat messages of a tool-calls step: the calls, then each output. */
const toolTurn = (...calls: FunctionToolCall[]): ChatMessage[] => [
  {
    role: 'assistant',
    content: null,
    tool_calls: calls.map((c) => ({
      id: c.id,
      type: 'function',
      function: { name: 'lookup', arguments: c.function.arguments },
    })),
  },
  ...calls.map((c): ChatMessage => ({ role: 'tool', tool_call_id: c.id, content: c.function.output ?? '' })),
];

const user = (content: string): ChatMessage => ({ role: 'user', content });
const assistant = (content: string): ChatMessage => ({ role: 'assistant', content });
const SYSTEM: ChatMessage = { role: 'system', content: 'Be brief.' };
const RUN = { createdAt: 0, instructions: 'Be brief.', tools: [] };

const limits = (truncation: Partial<TruncationStrategy> = {}, overrides: Partial<PromptLimits> = {}): PromptLimits => ({
  truncation: { type: 'auto', last_messages: null, ...truncation },
  promptTokens: null,
  historyBytes: 1 << 30,
  requestBytes: 1 << 30,
  ...overrides,
});

describe('the order of the history', () => {
  it('sends the instructions, then the messages in the thread’s order; images as vision parts', () => {
    const image: MessageContent[] = [
      { type: 'text', text: { value: 'What is this?', annotations: [] } },
      { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'low' } },
    ];
    const twoParts: MessageContent[] = [
      { type: 'text', text: { value: 'line one', annotations: [] } },
      { type: 'text', text: { value: 'line two', annotations: [] } },
    ];
    const history = {
      messages: [message('m1', 'user', image), message('m2', 'assistant', 'A cat.'), message('m3', 'user', twoParts)],
      steps: [],
    };
    expect(buildPrompt(RUN, history, [], limits()).messages).toEqual([
      SYSTEM,
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'low' } },
        ],
      },
      assistant('A cat.'),
      user('line one\nline two'),
    ]);
  });

  it('puts an earlier run’s tool calls and outputs before the answer it gave with them, its text before them first', () => {
    const u1 = message('u1', 'user', 'Weather?');
    const first = message('a0', 'assistant', 'Let me look.', 'run_1');
    const answer = message('a1', 'assistant', 'Sunny.', 'run_1');
    const u2 = message('u2', 'user', 'Thanks');
    const history = {
      messages: [u1, first, answer, u2],
      steps: [
        wrote('run_1', 'a0', u1.createdAt),
        called('run_1', [call('c1', 'sun'), call('c2', 'warm')], u1.createdAt),
        called('run_1', [call('c3', 'dry')], u1.createdAt),
        wrote('run_1', 'a1', u1.createdAt),
      ],
    };
    expect(buildPrompt(RUN, history, [], limits()).messages).toEqual([
      SYSTEM,
      user('Weather?'),
      assistant('Let me look.'),
      ...toolTurn(call('c1', 'sun'), call('c2', 'warm')),
      ...toolTurn(call('c3', 'dry')),
      assistant('Sunny.'),
      user('Thanks'),
    ]);
  });

  it('places the tool calls of a run that wrote nothing after them: after its last message, else where the run began', () => {
    const u1 = message('u1', 'user', 'one');
    const runA = message('a1', 'assistant', 'Checking.', 'run_a');
    const u2 = message('u2', 'user', 'two');
    const runBCreated = u2.createdAt;
    const u3 = message('u3', 'user', 'three');
    const history = {
      messages: [u1, runA, u2, u3],
      steps: [
        // run_a wrote text, called tools, got the outputs, then failed before answering.
        wrote('run_a', 'a1', u1.createdAt),
        called('run_a', [call('ca', 'A')], u1.createdAt),
        // run_b called tools and failed before writing anything.
        called('run_b', [call('cb', 'B')], runBCreated),
      ],
    };
    expect(buildPrompt(RUN, history, [], limits()).messages).toEqual([
      SYSTEM,
      user('one'),
      assistant('Checking.'),
      ...toolTurn(call('ca', 'A')),
      user('two'),
      ...toolTurn(call('cb', 'B')),
      user('three'),
    ]);
  });

  it('leaves out tool calls never answered, assistant messages without text, and calls whose message was left out', () => {
    const u1 = message('u1', 'user', 'hi');
    const empty = message('a1', 'assistant', '', 'run_1');
    const history = {
      messages: [u1, empty],
      steps: [
        called('run_1', [call('c1', null)], u1.createdAt, 'cancelled'),
        wrote('run_1', 'a1', u1.createdAt),
        called('run_2', [call('c2', 'x')], u1.createdAt),
        wrote('run_2', 'msg_not_in_history', u1.createdAt),
      ],
    };
    expect(buildPrompt(RUN, history, [], limits()).messages).toEqual([SYSTEM, user('hi')]);
  });

  it('ends with the run’s own tool calls and outputs so far', () => {
    const u1 = message('u1', 'user', 'Weather?');
    const run = { ...RUN, createdAt: u1.createdAt };
    const steps = [own('step_1', called('run_now', [call('c1', 'sun')], run.createdAt))];
    expect(buildPrompt(run, { messages: [u1], steps: [] }, steps, limits()).messages).toEqual([
      SYSTEM,
      user('Weather?'),
      ...toolTurn(call('c1', 'sun')),
    ]);
  });

  it('sends no system message without instructions', () => {
    const prompt = buildPrompt(
      { ...RUN, instructions: '' },
      { messages: [message('u1', 'user', 'hi')], steps: [] },
      [],
      limits(),
    );
    expect(prompt.messages).toEqual([user('hi')]);
  });
});

describe('truncation', () => {
  /** u1 a1 (tools) a2 u2 a3 u3: six messages, tool calls before a2. */
  const thread = () => {
    const u1 = message('u1', 'user', 'first question');
    const a1 = message('a1', 'assistant', 'first answer', 'run_1');
    const a2 = message('a2', 'assistant', 'second answer', 'run_2');
    const u2 = message('u2', 'user', 'second question');
    const a3 = message('a3', 'assistant', 'third answer', 'run_3');
    const u3 = message('u3', 'user', 'third question');
    return {
      messages: [u1, a1, a2, u2, a3, u3],
      steps: [
        wrote('run_1', 'a1', 0),
        called('run_2', [call('c1', 'out')], 0),
        wrote('run_2', 'a2', 0),
        wrote('run_3', 'a3', 0),
      ],
    };
  };
  const everything = [
    SYSTEM,
    user('first question'),
    assistant('first answer'),
    ...toolTurn(call('c1', 'out')),
    assistant('second answer'),
    user('second question'),
    assistant('third answer'),
    user('third question'),
  ];
  const sent = (l: PromptLimits) => buildPrompt(RUN, thread(), [], l);
  /**
   * The estimate of the system message and `history` (each message a unit of its own, no tool
   * calls among them) with no tools: their JSON, four characters a token.
   */
  const tokensOf = (history: ChatMessage[]) =>
    Math.ceil(
      (JSON.stringify([SYSTEM]).length +
        JSON.stringify([]).length +
        history.reduce((sum, m) => sum + JSON.stringify([m]).length, 0)) /
        4,
    );

  it('keeps everything under auto without max_prompt_tokens', () => {
    const prompt = sent(limits());
    expect(prompt.messages).toEqual(everything);
    expect(prompt.fits).toBe(true);
  });

  it.each([
    [1, [user('third question')]],
    [2, [assistant('third answer'), user('third question')]],
    [4, [assistant('second answer'), user('second question'), assistant('third answer'), user('third question')]],
    // The tool calls came after the fifth-last message: they stay.
    [5, everything.slice(2)],
    [6, everything.slice(1)],
    [100, everything.slice(1)],
  ])('last_messages %i keeps the last messages and what came after the first of them', (n, kept) => {
    expect(sent(limits({ type: 'last_messages', last_messages: n })).messages).toEqual([SYSTEM, ...kept]);
  });

  it('auto leaves out the oldest until the estimate fits max_prompt_tokens, never the last user message', () => {
    const budget = tokensOf(everything.slice(5));
    const prompt = sent(limits({}, { promptTokens: budget }));
    expect(prompt.messages).toEqual([SYSTEM, ...everything.slice(5)]);
    expect(prompt.fits).toBe(true);
    expect(prompt.tokens).toBeLessThanOrEqual(budget);
    // One token less: the next oldest goes too.
    expect(sent(limits({}, { promptTokens: budget - 1 })).messages).toEqual([SYSTEM, ...everything.slice(6)]);
  });

  it('auto reports a prompt that cannot fit even with only the last user message', () => {
    const prompt = sent(limits({}, { promptTokens: 5 }));
    expect(prompt.messages).toEqual([SYSTEM, user('third question')]);
    expect(prompt.fits).toBe(false);
    expect(prompt.tokens).toBeGreaterThan(5);
  });

  it('keeps what follows the last user message: the run’s own answer and tool calls so far', () => {
    const u1 = message('u1', 'user', 'x'.repeat(400));
    const u2 = message('u2', 'user', 'Weather?');
    const text = message('a1', 'assistant', 'Looking it up.', 'run_now');
    const run = { ...RUN, createdAt: u2.createdAt };
    const steps = [
      own('step_1', wrote('run_now', 'a1', run.createdAt)),
      own('step_2', called('run_now', [call('c1', 'sun')], run.createdAt)),
    ];
    const prompt = buildPrompt(run, { messages: [u1, u2, text], steps: [] }, steps, limits({}, { promptTokens: 100 }));
    expect(prompt.messages).toEqual([
      SYSTEM,
      user('Weather?'),
      assistant('Looking it up.'),
      ...toolTurn(call('c1', 'sun')),
    ]);
    expect(prompt.fits).toBe(true);
  });

  it('last_messages does not leave out more to fit max_prompt_tokens: the prompt is reported as not fitting', () => {
    const prompt = sent(limits({ type: 'last_messages', last_messages: 4 }, { promptTokens: 10 }));
    expect(prompt.messages).toEqual([SYSTEM, ...everything.slice(5)]);
    expect(prompt.fits).toBe(false);
  });

  it.each([['auto' as const], ['last_messages' as const]])(
    'with %s, leaves out the oldest past GATEWAY_MAX_HISTORY_BYTES, never the last user message',
    (type) => {
      const lastThree = everything.slice(-3);
      const bytes = lastThree.reduce((sum, m) => sum + JSON.stringify([m]).length, 0);
      const truncation = { type, last_messages: type === 'last_messages' ? 100 : null };
      expect(sent(limits(truncation, { historyBytes: bytes })).messages).toEqual([SYSTEM, ...lastThree]);
      expect(sent(limits(truncation, { historyBytes: bytes - 1 })).messages).toEqual([SYSTEM, ...everything.slice(-2)]);
      expect(sent(limits(truncation, { historyBytes: 1 })).messages).toEqual([SYSTEM, user('third question')]);
      expect(sent(limits(truncation, { historyBytes: 1 })).fits).toBe(true);
    },
  );

  it('counts the tools in the estimate', () => {
    const tools = [
      {
        type: 'function' as const,
        function: { name: 'lookup', parameters: { type: 'object', description: 'y'.repeat(400) } },
      },
    ];
    const without = buildPrompt(RUN, thread(), [], limits());
    const withTools = buildPrompt({ ...RUN, tools }, thread(), [], limits());
    expect(withTools.chars - without.chars).toBe(JSON.stringify(tools).length - JSON.stringify([]).length);
    expect(withTools.tokens).toBe(Math.ceil(withTools.chars / 4));
  });
});
