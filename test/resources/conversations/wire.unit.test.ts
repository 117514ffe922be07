import { describe, expect, it } from 'vitest';
import type { FileSearchToolCall, FunctionToolCall } from '../../../src/db/json-columns';
import type { MessageRow } from '../../../src/resources/threads/queries';
import {
  parseToolItemId,
  runOutputItems,
  toolItemId,
  toMessageItem,
  type ItemStep,
} from '../../../src/resources/conversations/wire';
import { componentErrors } from '../../support/openapi';

/**
 * The mapping of a thread's rows to items (src/resources/conversations/wire.ts), case by case: a
 * run's output items (a response's `output`), tool item ids both ways, citations, file search
 * results only when included. Every item is checked against the reference's ConversationItem.
 */

function message(id: string, role: MessageRow['role'], text: string, annotations: unknown[] = []): MessageRow {
  return {
    id,
    threadId: 'thread_1',
    workspaceId: 'ws',
    createdAt: 1_000,
    role,
    content: [{ type: 'text', text: { value: text, annotations } }],
    status: 'completed',
    assistantId: null,
    runId: 'run_1',
    attachments: [],
    metadata: {},
    incompleteDetails: null,
    completedAt: 1_000,
    incompleteAt: null,
  };
}

const fn = (id: string, output: string | null): FunctionToolCall => ({
  id,
  type: 'function',
  function: { name: 'lookup', arguments: '{"q":"x"}', output },
});

const search: FileSearchToolCall = {
  id: 'call_s',
  type: 'file_search',
  file_search: {
    ranking_options: { ranker: 'auto', score_threshold: 0 },
    results: [
      { file_id: 'file-1', file_name: 'policy.txt', score: 0.5, content: [{ type: 'text', text: 'Refunds.' }] },
    ],
  },
  function: { name: 'file_search', arguments: '{"queries":["refunds"]}', output: 'Refunds.' },
};

const step = (id: string, status: string, details: ItemStep['stepDetails']): ItemStep => ({
  id,
  status,
  stepDetails: details,
  reasoning: null,
});

const expectItems = (items: unknown[]) => {
  for (const item of items) expect(componentErrors('ConversationItem', item)).toEqual([]);
};

describe('runOutputItems', () => {
  const answer = message('msg_a', 'assistant', 'Refunds are accepted.【0†policy.txt】', [
    {
      type: 'file_citation',
      text: '【0†policy.txt】',
      start_index: 21,
      end_index: 35,
      file_citation: { file_id: 'file-1' },
    },
  ]);
  const steps = [
    step('step_S', 'completed', { type: 'tool_calls', tool_calls: [search] }),
    step('step_F', 'completed', { type: 'tool_calls', tool_calls: [fn('call_1', null), fn('call_2', 'given')] }),
    step('step_M', 'completed', { type: 'message_creation', message_creation: { message_id: 'msg_a' } }),
    step('step_gone', 'completed', { type: 'message_creation', message_creation: { message_id: 'msg_deleted' } }),
  ];

  it('gives the steps in order: calls without their outputs, the message with its citations named', () => {
    const items = runOutputItems(steps, new Map([['msg_a', answer]]), []);
    expect(items).toEqual([
      { type: 'file_search_call', id: 'fs_S_0', status: 'completed', queries: ['refunds'], results: null },
      {
        type: 'function_call',
        id: 'fc_F_0',
        call_id: 'call_1',
        name: 'lookup',
        arguments: '{"q":"x"}',
        status: 'completed',
      },
      {
        type: 'function_call',
        id: 'fc_F_1',
        call_id: 'call_2',
        name: 'lookup',
        arguments: '{"q":"x"}',
        status: 'completed',
      },
      {
        type: 'message',
        id: 'msg_a',
        status: 'completed',
        role: 'assistant',
        content: [
          {
            type: 'output_text',
            text: 'Refunds are accepted.【0†policy.txt】',
            annotations: [{ type: 'file_citation', file_id: 'file-1', filename: 'policy.txt', index: 21 }],
            logprobs: [],
          },
        ],
      },
    ]);
    expectItems(items);
  });

  it('gives a file search its results when include asks for them', () => {
    const [item] = runOutputItems(steps.slice(0, 1), new Map(), ['file_search_call.results']);
    expect(item).toMatchObject({
      results: [{ file_id: 'file-1', filename: 'policy.txt', score: 0.5, text: 'Refunds.' }],
    });
    expectItems([item]);
  });

  it('says a call of a step still waiting is in progress, and of a failed one incomplete', () => {
    const waiting = runOutputItems(
      [step('step_W', 'in_progress', { type: 'tool_calls', tool_calls: [fn('c', null)] })],
      new Map(),
      [],
    );
    const failed = runOutputItems(
      [step('step_X', 'failed', { type: 'tool_calls', tool_calls: [fn('c', null), search] })],
      new Map(),
      [],
    );
    expect(waiting.map((item) => item.status)).toEqual(['in_progress']);
    expect(failed.map((item) => item.status)).toEqual(['incomplete', 'failed']);
    expectItems([...waiting, ...failed]);
  });
});

describe('messages as items', () => {
  it('show a user’s text as input_text and images as input_image, a developer’s with its role', () => {
    const row: MessageRow = {
      ...message('msg_u', 'user', 'Look'),
      content: [
        { type: 'text', text: { value: 'Look', annotations: [] } },
        { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'high' } },
        { type: 'image_file', image_file: { file_id: 'file-img' } },
      ],
    };
    const items = [toMessageItem(row, new Map()), toMessageItem(message('msg_d', 'developer', 'Be brief.'), new Map())];
    expect(items[0]?.content).toEqual([
      { type: 'input_text', text: 'Look' },
      { type: 'input_image', image_url: 'https://example.com/a.png', file_id: null, detail: 'high' },
      { type: 'input_image', image_url: null, file_id: 'file-img', detail: 'auto' },
    ]);
    expect(items[1]).toMatchObject({ role: 'developer', content: [{ type: 'input_text', text: 'Be brief.' }] });
    expectItems(items);
  });
});

describe('tool item ids', () => {
  it.each([
    ['fc', 'step_Abc123', 0, 'fc_Abc123_0'],
    ['fco', 'step_Abc123', 12, 'fco_Abc123_12'],
    ['fs', 'step_Abc123', 3, 'fs_Abc123_3'],
  ] as const)('%s of %s call %i is %s, and back', (kind, stepId, index, id) => {
    expect(toolItemId(kind, stepId, index)).toBe(id);
    expect(parseToolItemId(id)).toEqual({ kind, stepId, index });
  });

  it.each(['msg_abc', 'fc_abc', 'fc__0', 'fx_abc_0', 'fc_a-b_0', 'fc_abc_99999', 'fco_abc_0_1'])(
    '%s names no call',
    (id) => {
      expect(parseToolItemId(id)).toBeNull();
    },
  );
});
