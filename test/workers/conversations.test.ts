import { defined } from '../support/defined';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * Conversations inside workerd, on the libSQL server: a conversation created with items (a text
 * file's among them) and read back in both APIs, and a thread whose run called a function and got
 * its output listed as items, with the SDK running in workerd too. The same operations in full:
 * test/resources/conversations/conversations.test.ts.
 */

const API_KEY = inject('workersTenant').runsWorkspaceKey;

let openai: OpenAI;

beforeAll(async () => {
  const virtualKey = `conversations-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, virtualKey);
  openai = gatewayClient({ 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': virtualKey });
});

describe('conversations on workerd', () => {
  it('creates one with items, lists, retrieves and deletes them, and reads it as a thread', async () => {
    const conversation = await openai.conversations.create({
      metadata: { topic: 'demo' },
      items: [
        { role: 'developer', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'Summarise:' },
            { type: 'input_file', filename: 'notes.html', file_data: btoa('<p>Buy <b>milk</b>.</p>') },
          ],
        },
      ],
    });
    expect(conversation).toMatchObject({ id: expect.stringMatching(/^conv_/), object: 'conversation' });
    const items = await openai.conversations.items.list(conversation.id, { order: 'asc' });
    expect(items.data.map((item) => item.type === 'message' && [item.role, item.content])).toEqual([
      ['developer', [{ type: 'input_text', text: 'Be brief.' }]],
      [
        'user',
        [
          { type: 'input_text', text: 'Summarise:' },
          { type: 'input_text', text: 'File: notes.html\n\nBuy milk.' },
        ],
      ],
    ]);
    const messages = await openai.beta.threads.messages.list(conversation.id, { order: 'asc' });
    expect(messages.data.map((message) => message.id)).toEqual(items.data.map((item) => item.id));

    const first = defined(defined(items.data[0]).id);
    expect(await openai.conversations.items.retrieve(first, { conversation_id: conversation.id })).toEqual(
      items.data[0],
    );
    expect((await openai.conversations.items.delete(first, { conversation_id: conversation.id })).id).toBe(
      conversation.id,
    );
    expect((await openai.conversations.items.list(conversation.id)).data).toHaveLength(1);
    expect(await openai.conversations.delete(conversation.id)).toEqual({
      id: conversation.id,
      object: 'conversation.deleted',
      deleted: true,
    });
  });

  it('lists a thread whose run called a function as its messages, the call and its output', async () => {
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
    });
    const waiting = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        thread: {
          messages: [
            { role: 'user', content: `Look\n#fake ${JSON.stringify([{ tool_calls: 1 }, { reply: 'Found.' }])}` },
          ],
        },
      },
      { pollIntervalMs: 50 },
    );
    expect(waiting.status).toBe('requires_action');
    const callId = defined(waiting.required_action).submit_tool_outputs.tool_calls[0]?.id ?? '';
    const done = await openai.beta.threads.runs.submitToolOutputsAndPoll(
      waiting.id,
      { thread_id: waiting.thread_id, tool_outputs: [{ tool_call_id: callId, output: 'it' }] },
      { pollIntervalMs: 50 },
    );
    expect(done.status).toBe('completed');
    const items = await openai.conversations.items.list(waiting.thread_id, { order: 'asc' });
    expect(items.data.map((item) => [item.type, 'call_id' in item ? item.call_id : null])).toEqual([
      ['message', null],
      ['function_call', callId],
      ['function_call_output', callId],
      ['message', null],
    ]);
    expect(items.data[2]).toMatchObject({ id: expect.stringMatching(/^fco_/), output: 'it' });
  });
});
