import { describe, expect, it } from 'vitest';
import {
  KnownHistories,
  knownHistoryKey,
  MAX_BYTES,
  MAX_MESSAGES,
  MAX_THREADS,
  MAX_TOTAL_BYTES,
} from '../../../src/resources/threads/known-histories';
import type { HistoryStep } from '../../../src/db/schema';
import type { MessageRow } from '../../../src/resources/threads/queries';
import { clientMessage } from '../../../src/resources/threads/rows';
import { defined } from '../../support/defined';

/**
 * What a process knows of the threads it wrote (resources/threads/known-histories.ts): a guess the
 * run's write then guards, so these check only what is kept and for whom, and its bounds. That a
 * wrong guess writes nothing is test/resources/runs/run-in-one-trip.test.ts's.
 */

const MAX_HISTORY_BYTES = 32_000;
const thread = (id: string, workspaceId = 'ws_a') => ({ id, workspaceId });
const message = (threadId: string, content: string, workspaceId = 'ws_a') =>
  clientMessage(thread(threadId, workspaceId), { role: 'user', content }, 'messages[0]', 1);
const answer = (threadId: string, text: string, workspaceId = 'ws_a') => ({
  ...message(threadId, text, workspaceId),
  role: 'assistant' as const,
});
/** A history of messages alone. */
const only = (messages: MessageRow[]) => ({ messages, steps: [] });

describe('KnownHistories', () => {
  it("keeps a created thread's messages and those added after, in order, and gives them once", () => {
    const known = new KnownHistories();
    const first = message('thread_1', 'one');
    const second = message('thread_1', 'two');
    known.wrote(thread('thread_1'), [first], true);
    known.wrote(thread('thread_1'), [second], false);
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toEqual({
      id: 'thread_1',
      messages: [first, second],
      steps: [],
      unconfirmed: [],
    });
    // A run was made (or tried) on it: its messages are its history no more.
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
  });

  it('knows nothing of a thread it did not create, even once messages are added to it', () => {
    const known = new KnownHistories();
    known.wrote(thread('thread_1'), [message('thread_1', 'one')], false);
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
  });

  it("gives a workspace's thread to no other, and keeps it for its own when another asks for it", () => {
    const known = new KnownHistories();
    const secret = message('thread_1', 'secret', 'ws_a');
    known.wrote(thread('thread_1', 'ws_a'), [secret], true);
    expect(known.take(thread('thread_1', 'ws_b'), MAX_HISTORY_BYTES)).toBeNull();
    // Another workspace naming its id (a run it is refused) does not make its owner's next run read.
    expect(known.take(thread('thread_1', 'ws_a'), MAX_HISTORY_BYTES)).toEqual({
      id: 'thread_1',
      messages: [secret],
      steps: [],
      unconfirmed: [],
    });
    // A message added by another workspace does not join it either.
    known.wrote(thread('thread_2', 'ws_a'), [], true);
    known.wrote(thread('thread_2', 'ws_b'), [message('thread_2', 'theirs', 'ws_b')], false);
    expect(known.take(thread('thread_2', 'ws_a'), MAX_HISTORY_BYTES)).toBeNull();
  });

  it('forgets a thread whose message or self was deleted', () => {
    const known = new KnownHistories();
    known.wrote(thread('thread_1'), [message('thread_1', 'one')], true);
    known.forget('thread_1');
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
  });

  it('keeps no thread past its bounds: messages, bytes, or a history read would cut', () => {
    const known = new KnownHistories();
    const many = Array.from({ length: MAX_MESSAGES + 1 }, (_, index) => message('thread_1', `m${index}`));
    known.wrote(thread('thread_1'), many, true);
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
    known.wrote(thread('thread_2'), many.slice(1), true);
    // One more message than the bound: forgotten, not cut.
    known.wrote(thread('thread_2'), [message('thread_2', 'more')], false);
    expect(known.take(thread('thread_2'), MAX_HISTORY_BYTES)).toBeNull();
    known.wrote(thread('thread_3'), [message('thread_3', 'x'.repeat(MAX_BYTES))], true);
    expect(known.take(thread('thread_3'), MAX_HISTORY_BYTES)).toBeNull();
    known.wrote(thread('thread_4'), [message('thread_4', 'x'.repeat(200))], true);
    expect(known.take(thread('thread_4'), 100)).toBeNull();
  });

  it('keeps at most MAX_TOTAL_BYTES of content across threads, forgetting the least recently written', () => {
    const known = new KnownHistories();
    const size = MAX_BYTES / 2;
    const threads = Math.ceil(MAX_TOTAL_BYTES / size) + 1;
    for (let index = 0; index < threads; index++)
      known.wrote(thread(`thread_${index}`), [message(`thread_${index}`, 'x'.repeat(size))], true);
    expect(known.take(thread('thread_0'), MAX_HISTORY_BYTES)).toBeNull();
    expect(known.take(thread(`thread_${threads - 1}`), MAX_HISTORY_BYTES)).not.toBeNull();
    // Taken threads give their bytes back: as many fit again.
    for (let index = 0; index < threads; index++) known.take(thread(`thread_${index}`), MAX_HISTORY_BYTES);
    known.wrote(thread('thread_again'), [message('thread_again', 'x'.repeat(size))], true);
    expect(known.take(thread('thread_again'), MAX_HISTORY_BYTES)).not.toBeNull();
  });

  it('keeps at most MAX_THREADS threads, forgetting the least recently written', () => {
    const known = new KnownHistories();
    for (let index = 0; index <= MAX_THREADS; index++) known.wrote(thread(`thread_${index}`), [], true);
    expect(known.take(thread('thread_0'), MAX_HISTORY_BYTES)).toBeNull();
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).not.toBeNull();
    expect(known.take(thread(`thread_${MAX_THREADS}`), MAX_HISTORY_BYTES)).not.toBeNull();
  });

  it("extends a thread's history with what its run answered, those messages unconfirmed until a guard names them", () => {
    const known = new KnownHistories();
    const asked = message('thread_1', 'one');
    known.wrote(thread('thread_1'), [asked], true);
    const taken = defined(known.take(thread('thread_1'), MAX_HISTORY_BYTES));
    const answering = known.answering(thread('thread_1'), only(taken.messages));
    // While its run answers, the thread's run is open: no run is guessed on it.
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
    const again = known.answering(thread('thread_1'), only(taken.messages));
    const answered = answer('thread_1', 'two');
    known.ran(answering, only([answer('thread_1', 'stale')]));
    known.ran(again, only([answered]));
    const next = message('thread_1', 'three');
    known.wrote(thread('thread_1'), [next], false);
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toEqual({
      id: 'thread_1',
      messages: [asked, answered, next],
      steps: [],
      unconfirmed: [answered],
    });
  });

  it('forgets a thread whose run ended otherwise, or that was written to while its run answered', () => {
    const known = new KnownHistories();
    const ended = known.answering(thread('thread_1'), only([message('thread_1', 'one')]));
    known.ran(ended, null);
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
    const written = known.answering(thread('thread_2'), only([message('thread_2', 'one')]));
    known.wrote(thread('thread_2'), [message('thread_2', 'meanwhile')], false);
    known.ran(written, only([answer('thread_2', 'two')]));
    expect(known.take(thread('thread_2'), MAX_HISTORY_BYTES)).toBeNull();
    const deleted = known.answering(thread('thread_3'), only([message('thread_3', 'one')]));
    known.forget('thread_3');
    known.ran(deleted, only([answer('thread_3', 'two')]));
    expect(known.take(thread('thread_3'), MAX_HISTORY_BYTES)).toBeNull();
  });

  it("keeps a run's answer within the bounds: a history past one is forgotten, and only the workspace's", () => {
    const known = new KnownHistories();
    const many = Array.from({ length: MAX_MESSAGES }, (_, index) => message('thread_1', `m${index}`));
    known.ran(known.answering(thread('thread_1'), only(many)), only([answer('thread_1', 'one more')]));
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
    known.ran(known.answering(thread('thread_2'), only([])), only([answer('thread_2', 'x'.repeat(MAX_BYTES))]));
    expect(known.take(thread('thread_2'), MAX_HISTORY_BYTES)).toBeNull();
    const mine = answer('thread_3', 'mine');
    known.ran(known.answering(thread('thread_3'), only([])), only([mine]));
    expect(known.take(thread('thread_3', 'ws_b'), MAX_HISTORY_BYTES)).toBeNull();
    expect(known.take(thread('thread_3'), MAX_HISTORY_BYTES)).toEqual({
      id: 'thread_3',
      messages: [mine],
      steps: [],
      unconfirmed: [mine],
    });
  });
});

describe('KnownHistories with the steps a prompt places', () => {
  /** A step of run `runId`: its message's creation, or its calls of `functions`, their outputs as given. */
  const step = (runId: string, what: { message: string } | { outputs: (string | null)[] }): HistoryStep => ({
    id: `step_${runId}_${'message' in what ? what.message : 'calls'}`,
    runId,
    type: 'message' in what ? 'message_creation' : 'tool_calls',
    status: 'completed',
    stepDetails:
      'message' in what
        ? { type: 'message_creation', message_creation: { message_id: what.message } }
        : {
            type: 'tool_calls',
            tool_calls: what.outputs.map((output, index) => ({
              id: `call_${index}`,
              type: 'function' as const,
              function: { name: 'get_weather', arguments: '{}', output },
            })),
          },
    runCreatedAt: 1,
  });

  it("keeps the steps a response handed back with its calls, and adds the next turn's to them", () => {
    const known = new KnownHistories();
    const asked = message('thread_1', 'weather?');
    const calls = step('run_1', { outputs: [null] });
    known.ran(known.answering(thread('thread_1'), only([asked])), { messages: [], steps: [calls] });
    const taken = defined(known.take(thread('thread_1'), MAX_HISTORY_BYTES));
    expect(taken).toEqual({ id: 'thread_1', messages: [asked], steps: [calls], unconfirmed: [] });
    // The next turn gives the output: its prompt's history has it, and so does what is known after it.
    const given = step('run_1', { outputs: ['sunny'] });
    const answered = answer('thread_1', 'It is sunny.');
    const created = step('run_2', { message: answered.id });
    known.ran(known.answering(thread('thread_1'), { messages: taken.messages, steps: [given] }), {
      messages: [answered],
      steps: [],
    });
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toEqual({
      id: 'thread_1',
      messages: [asked, answered],
      steps: [given],
      unconfirmed: [answered],
    });
    // Of a read history, only the runs with calls keep their steps: a run without calls needs none.
    const kept = known.answering(thread('thread_4'), {
      messages: [],
      steps: [step('run_1', { message: 'msg_1' }), given, created],
    });
    expect(kept.history.steps).toEqual([step('run_1', { message: 'msg_1' }), given]);
  });

  it('counts the steps in the bytes a thread may hold', () => {
    const known = new KnownHistories();
    const big = step('run_1', { outputs: ['x'.repeat(MAX_BYTES)] });
    known.ran(known.answering(thread('thread_1'), only([])), { messages: [], steps: [big] });
    expect(known.take(thread('thread_1'), MAX_HISTORY_BYTES)).toBeNull();
    const small = step('run_1', { outputs: ['x'.repeat(300)] });
    known.ran(known.answering(thread('thread_2'), only([])), { messages: [], steps: [small] });
    expect(known.take(thread('thread_2'), 200)).toBeNull();
  });
});

describe("knownHistoryKey: what a run's answer is known by", () => {
  const run = { id: 'resp_1', threadId: 'thread_1', workspaceId: 'ws_a' };
  it.each([
    ['a run: its thread', undefined, { id: 'thread_1', workspaceId: 'ws_a' }],
    [
      "a response in a conversation: the conversation's thread",
      { conversationId: 'thread_1', stored: true },
      { id: 'thread_1', workspaceId: 'ws_a' },
    ],
    [
      'a response in a conversation, not kept: the conversation keeps its items',
      { conversationId: 'thread_1', stored: false },
      { id: 'thread_1', workspaceId: 'ws_a' },
    ],
    [
      'a response on a thread of its own: the response, which the next goes on from',
      { conversationId: null, stored: true },
      { id: 'resp_1', workspaceId: 'ws_a' },
    ],
    ['a response not kept: nothing goes on from it', { conversationId: null, stored: false }, null],
  ] as const)('%s', (_, response, key) => {
    expect(knownHistoryKey(run, response)).toEqual(key);
  });
});
