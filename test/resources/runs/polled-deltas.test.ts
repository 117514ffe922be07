import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type OpenAI from 'openai';
import { fakeThread, type FakeUpstreamServer } from '../../support/fake-upstream';
import type { TestGateway } from '../../support/gateway';
import { startRunsSetup } from '../../support/runs';

/**
 * A run nobody streams builds no delta: its deltas' texts are never serialised (the engine's
 * outbox builds an event only for a sink, resources/runs/execution/outbox.ts), while a streamed
 * run's are, one a fragment. Counted where every delta's text is written into its event,
 * JSON.stringify of the fragment, on the real app executing against the fake provider.
 */

const ANSWER = 'alpha beta gamma delta epsilon zeta';

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let openai: OpenAI;
let assistantId: string;

beforeAll(async () => {
  ({ fake, gateway, openai, assistantId } = await startRunsSetup({ instructions: 'You answer briefly.' }));
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});
afterEach(() => vi.restoreAllMocks());

/** The strict fragments of ANSWER serialised on their own while `work` runs: each a delta's text written into its event. */
async function fragmentsSerialised(work: () => Promise<unknown>): Promise<string[]> {
  const stringify = vi.spyOn(JSON, 'stringify');
  await work();
  const fragments = stringify.mock.calls.flatMap(([value]: unknown[]) =>
    typeof value === 'string' && value !== '' && value !== ANSWER && ANSWER.includes(value) ? [value] : [],
  );
  stringify.mockRestore();
  return fragments;
}

// A word at a time, apart: each word is a fragment of its own, and a delta of its own when streamed.
const thread = () => fakeThread('Say the words', { reply: ANSWER, chunk_delay_ms: 5 });

describe('deltas of a run', () => {
  it('are built for a streamed run, one a fragment', async () => {
    let streamed = '';
    const fragments = await fragmentsSerialised(async () => {
      const stream = await openai.beta.threads.createAndRun({
        assistant_id: assistantId,
        thread: thread(),
        stream: true,
      });
      for await (const event of stream) {
        if (event.event !== 'thread.message.delta') continue;
        for (const part of event.data.delta.content ?? []) if (part.type === 'text') streamed += part.text?.value ?? '';
      }
    });
    expect(streamed).toBe(ANSWER);
    expect(fragments.join('')).toBe(ANSWER);
    expect(fragments.length).toBeGreaterThan(1);
  });

  it('are not built for a run nobody streams, whose answer is stored whole all the same', async () => {
    let threadId = '';
    const fragments = await fragmentsSerialised(async () => {
      const run = await openai.beta.threads.createAndRunPoll(
        { assistant_id: assistantId, thread: thread() },
        { pollIntervalMs: 10 },
      );
      expect(run.status).toBe('completed');
      threadId = run.thread_id;
    });
    expect(fragments).toEqual([]);
    const messages = await openai.beta.threads.messages.list(threadId, { order: 'desc', limit: 1 });
    const [answer] = messages.data;
    expect(answer?.content).toEqual([{ type: 'text', text: { value: ANSWER, annotations: [] } }]);
  });
});
