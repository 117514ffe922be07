import { describe, expect, it } from 'vitest';
import { MAX_EVENT_CHARS, watchAnswer } from '../../../src/resources/runs/answer-watch';
import type { MessageRow } from '../../../src/resources/threads/queries';
import { clientMessage } from '../../../src/resources/threads/rows';
import { toMessageJson } from '../../../src/resources/threads/wire';

/**
 * What a streamed run answered, read from its events as they pass (resources/runs/answer-watch.ts):
 * the messages it completed, told once its run completed, and nothing when it ended otherwise. That
 * a later run's prompt is built from them, guarded, is test/resources/runs/run-in-one-trip.test.ts's.
 */

const thread = { id: 'thread_1', workspaceId: 'ws_a' };
const RUN = 'run_1';
const encoder = new TextEncoder();

/** The run's answer, as its executor writes it: created at whole seconds, as the event shows it. */
function answered(text: string, runId = RUN): MessageRow {
  const row = clientMessage(thread, { role: 'user', content: text }, 'messages[0]', 1_700_000_000_000);
  return { ...row, role: 'assistant', runId, assistantId: 'asst_1', completedAt: 1_700_000_001_000 };
}

const event = (name: string, data: unknown) =>
  `event: ${name}\ndata: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

/** `text` cut into chunks of `size` bytes (a character's bytes split between chunks too). */
function chunks(text: string, size: number): Uint8Array[] {
  const bytes = encoder.encode(text);
  const out: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(bytes.subarray(at, at + size));
  return out;
}

/** The stream watched, read to its end: what it told, and what passed. */
async function watched(parts: Uint8Array[]) {
  const told: { messages: MessageRow[] | null }[] = [];
  const source = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const part of parts) controller.enqueue(part);
      controller.close();
    },
  });
  const out = watchAnswer(source, { id: RUN, thread }, (messages) => told.push({ messages }));
  const received: Uint8Array[] = [];
  for await (const chunk of out) {
    received.push(chunk);
  }
  return { told, received };
}

const decoded = (parts: Uint8Array[]) => new TextDecoder().decode(Buffer.concat(parts));

describe('watchAnswer', () => {
  it('tells the messages a completed run wrote, however its bytes are cut, and passes them unchanged', async () => {
    const message = answered(`${'é'.repeat(50)}, an answer "quoted"\nand on`);
    const text =
      event('thread.run.created', { id: RUN }) +
      event('thread.message.delta', { delta: 'x' }) +
      event('thread.message.completed', toMessageJson(message)) +
      event('thread.run.step.completed', { type: 'message_creation' }) +
      event('thread.run.completed', { id: RUN, instructions: 'i'.repeat(MAX_EVENT_CHARS + 10) }) +
      event('done', '[DONE]');
    const events = text.split(/(?<=\n\n)/);
    const cuts = [
      // As the run's events are written, one a chunk (its deltas let pass unread), or a delta with the next.
      events.map((one) => encoder.encode(one)),
      [events.slice(0, 1), events.slice(1, 3), ...events.slice(3).map((one) => [one])].map((some) =>
        encoder.encode(some.join('')),
      ),
      // Cut at an odd size, some of the two-byte characters are split between chunks.
      ...[7, 4096, Infinity].map((size) => chunks(text, size)),
    ];
    for (const parts of cuts) {
      const { told, received } = await watched(parts);
      expect(decoded(received)).toBe(text);
      expect(told).toHaveLength(1);
      expect(told[0]?.messages).toEqual([message]);
    }
  });

  const otherwise: [string, string][] = [
    ['waits for tool outputs', event('thread.run.requires_action', { id: RUN })],
    ['failed', event('thread.run.failed', { id: RUN })],
    ['called tools', event('thread.run.step.created', { type: 'tool_calls' }) + event('thread.run.completed', {})],
    ['a message of another run', event('thread.message.completed', toMessageJson(answered('x', 'run_2')))],
    [
      'a message too long to hold',
      event('thread.message.completed', toMessageJson(answered('x'.repeat(MAX_EVENT_CHARS)))),
    ],
    ['a message ended incomplete', event('thread.message.incomplete', toMessageJson(answered('x')))],
    ['an error', event('error', { message: 'no' })],
    ['its stream ended before the run', event('thread.message.delta', { delta: 'x' })],
  ];
  it.each(otherwise)('tells null for a run that %s', async (_, ending) => {
    const text =
      event('thread.message.completed', toMessageJson(answered('first'))) +
      ending +
      event('thread.run.completed', { id: RUN });
    const stream = ending.includes('thread.message.delta') ? ending : text;
    const { told, received } = await watched(chunks(stream, 5));
    expect(decoded(received)).toBe(stream);
    expect(told.map((entry) => entry.messages)).toEqual([null]);
  });
});
