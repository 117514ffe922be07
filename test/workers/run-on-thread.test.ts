import { defined } from '../support/defined';
import { createClient } from '@libsql/client/web';
import { exports } from 'cloudflare:workers';
import { and, eq, getTableColumns, isNotNull } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/libsql/web';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { isUniqueViolation } from '../../src/db/client';
import * as schema from '../../src/db/schema';
import { insertRunOnThread } from '../../src/resources/runs/queries';
import { errorOf, json } from '../support/envelope';
import { freshGate, remoteGate, whileRemoteDatabaseHeld } from '../support/gates';
import { deltaText, parseEventStream } from '../support/sse';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * Runs on an existing thread inside workerd, as on Cloudflare: the Worker entry, each run in its
 * RunExecutor object, sqld through @libsql/client/web, the fake provider in Node
 * (test/support/workers-global-setup.ts). The provider's records stay in Node: what it was sent comes back as its
 * answer (the `echo_messages` scenario of test/support/fake-upstream.ts).
 */

const API_KEY = inject('workersTenant').runsWorkspaceKey;
const INSTRUCTIONS = 'Be brief.';
const POLL = { pollIntervalMs: 50 };

let openai: OpenAI;
let headers: Record<string, string>;
let assistantId: string;

const call = (path: string, body: unknown) =>
  exports.default.fetch(`http://gateway${path}`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** A user message that makes the fake answer as `scenario` says (one per model turn when a list). */
const ask = (text: string, scenario: Record<string, unknown> | Record<string, unknown>[]) =>
  `${text}\n#fake ${JSON.stringify(scenario)}`;

/** The text of a run's answer. */
async function answerOf(threadId: string, runId: string): Promise<string> {
  const [answer] = (await openai.beta.threads.messages.list(threadId, { run_id: runId })).data;
  const [part] = defined(answer).content;
  return part?.type === 'text' ? part.text.value : '';
}

beforeAll(async () => {
  const slug = `threads-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, slug);
  headers = { 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': slug };
  openai = gatewayClient(headers);
  assistantId = (await openai.beta.assistants.create({ model: 'fake-model', instructions: INSTRUCTIONS })).id;
});

/** A thread whose first turn answered `reply` to `text`. */
async function threadWith(text: string, reply: string) {
  const first = await openai.beta.threads.createAndRunPoll(
    { assistant_id: assistantId, thread: { messages: [{ role: 'user', content: ask(text, { reply }) }] } },
    POLL,
  );
  expect(first.status).toBe('completed');
  return {
    threadId: first.thread_id,
    history: [
      { role: 'user', content: ask(text, { reply }) },
      { role: 'assistant', content: reply },
    ],
  };
}

const SYSTEM = { role: 'system', content: INSTRUCTIONS };

/** The prompt of the turn after `question`'s call of lookup({"q":"x"}) was given the output 42. */
const exchangePrompt = (history: object[], question: string, callId: string) => [
  SYSTEM,
  ...history,
  { role: 'user', content: question },
  {
    role: 'assistant',
    content: null,
    tool_calls: [{ id: callId, type: 'function', function: { name: 'lookup', arguments: '{"q":"x"}' } }],
  },
  { role: 'tool', tool_call_id: callId, content: '42' },
];

describe('runs on an existing thread, on workerd', () => {
  it('runs.createAndPoll: a second turn, sent the whole thread', async () => {
    const { threadId, history } = await threadWith('My name is Ada.', 'Hello Ada.');
    const question = ask('What is my name?', { echo_messages: true });
    const run = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: question }] },
      POLL,
    );
    expect(run).toMatchObject({ status: 'completed', thread_id: threadId });
    expect(JSON.parse(await answerOf(threadId, run.id))).toEqual([
      SYSTEM,
      ...history,
      { role: 'user', content: question },
    ]);
    const messages = (await openai.beta.threads.messages.list(threadId, { order: 'asc' })).data;
    expect(messages.map((message) => message.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
  });

  it('runs.stream into a tool call, then submitToolOutputsStream: streamed both times, with the history', async () => {
    const { threadId, history } = await threadWith('Hi', 'Hello.');
    const tool = {
      type: 'function' as const,
      function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } },
    };
    const question = ask('Look it up', [
      { tool_calls: [{ name: 'lookup', arguments: { q: 'x' } }] },
      { echo_messages: true },
    ]);
    const first = openai.beta.threads.runs.stream(threadId, {
      assistant_id: assistantId,
      tools: [tool],
      additional_messages: [{ role: 'user', content: question }],
    });
    const events: string[] = [];
    first.on('event', (event) => events.push(event.event));
    const waiting = await first.finalRun();
    expect(waiting.status).toBe('requires_action');
    expect(events.slice(0, 3)).toEqual(['thread.run.created', 'thread.run.queued', 'thread.run.in_progress']);
    expect(events.at(-1)).toBe('thread.run.requires_action');

    const [toolCall] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const second = openai.beta.threads.runs.submitToolOutputsStream(waiting.id, {
      thread_id: threadId,
      tool_outputs: [{ tool_call_id: defined(toolCall).id, output: '42' }],
    });
    const text: string[] = [];
    second.on('textDelta', (delta) => text.push(defined(delta.value)));
    const done = await second.finalRun();
    expect(done.status).toBe('completed');
    expect(JSON.parse(text.join(''))).toEqual(exchangePrompt(history, question, defined(toolCall).id));
  });

  it("submitToolOutputs: the provider called while the write that takes the outputs is held at the database, then the next run's beside its own", async () => {
    const { threadId, history } = await threadWith('Hi', 'Hello.');
    const tool = { type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object' } } };
    const gate = remoteGate(inject('upstreamUrl'), freshGate('tool-outputs'));
    // Its second model turn (the outputs given) echoes its prompt, held at the gate.
    const question = ask('Look it up', [
      { tool_calls: [{ name: 'lookup', arguments: { q: 'x' } }] },
      { echo_messages: true, hold: gate.name },
    ]);
    const waiting = await openai.beta.threads.runs.createAndPoll(
      threadId,
      { assistant_id: assistantId, tools: [tool], additional_messages: [{ role: 'user', content: question }] },
      POLL,
    );
    expect(waiting.status).toBe('requires_action');
    const [toolCall] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const steps = (await openai.beta.threads.runs.steps.list(waiting.id, { thread_id: threadId })).data;
    const step = defined(steps.find((row) => row.type === 'tool_calls'));
    // The write names the step (its outputs); the reads before it name the run.
    const { answer } = await whileRemoteDatabaseHeld(
      inject('databaseProxyUrl'),
      step.id,
      gate,
      () =>
        call(`/v1/threads/${threadId}/runs/${waiting.id}/submit_tool_outputs`, {
          stream: true,
          tool_outputs: [{ tool_call_id: defined(toolCall).id, output: '42' }],
        }),
      async () => false,
    );
    await gate.open();
    const { text, names } = await streamedAnswer(await answer);
    expect(names.slice(0, 3)).toEqual(['thread.run.step.completed', 'thread.run.queued', 'thread.run.in_progress']);
    expect(names.at(-2)).toBe('thread.run.completed');
    expect((await gate.state()).passed).toBe(1);
    const prompt = exchangePrompt(history, question, defined(toolCall).id);
    expect(JSON.parse(text)).toEqual(prompt);
    const stored = await openai.beta.threads.runs.steps.retrieve(step.id, { thread_id: threadId, run_id: waiting.id });
    expect(stored).toMatchObject({
      status: 'completed',
      step_details: { tool_calls: [{ function: { output: '42' } }] },
    });

    // The turn's answer handed back (over RPC, from its executor), the thread is known: the next
    // run's provider is called while its write is held, the prompt the whole exchange.
    const generation = await settingsGeneration();
    const next = remoteGate(inject('upstreamUrl'), freshGate('after-outputs'));
    const after = { role: 'user' as const, content: ask('And?', { echo_messages: true, hold: next.name }) };
    await openai.beta.threads.messages.create(threadId, after);
    const later = await whileRemoteDatabaseHeld(
      inject('databaseProxyUrl'),
      threadId,
      next,
      () => call(`/v1/threads/${threadId}/runs`, { assistant_id: assistantId, stream: true }),
      async () => (await settingsGeneration()) !== generation,
    );
    await next.open();
    const answered = await streamedAnswer(await later.answer);
    // Once, unless another file changed the settings meanwhile (the run is then made from what is read).
    const calls = (await settingsGeneration()) === generation ? [1] : [1, 2];
    expect(calls).toContain((await next.state()).passed);
    expect(JSON.parse(answered.text)).toEqual([...prompt, { role: 'assistant', content: text }, after]);
  });

  it('admits exactly one of 20 runs created at the same instant on one thread', async () => {
    const { threadId } = await threadWith('Hi', 'Hello.');
    // The winner's answer waits at a gate until every racer has been answered, however slowly.
    const gate = remoteGate(inject('upstreamUrl'), freshGate('racers'));
    const responses = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call(`/v1/threads/${threadId}/runs`, {
          assistant_id: assistantId,
          additional_messages: [{ role: 'user', content: ask(`Racer ${i}`, { reply: 'Done.', hold: gate.name }) }],
        }),
      ),
    );
    const admitted = responses.filter((response) => response.status === 200);
    expect(admitted).toHaveLength(1);
    const winner = await json(defined(admitted[0]));
    for (const response of responses.filter((r) => r.status !== 200)) {
      expect(await errorOf(response)).toMatchObject({
        status: 400,
        code: 'thread_has_active_run',
        message:
          `Thread ${threadId} already has an active run ${winner.id}.` +
          ` To free the thread, cancel it (POST /v1/threads/${threadId}/runs/${winner.id}/cancel) or wait for it to end.`,
      });
    }
    await gate.open();
    expect((await openai.beta.threads.runs.poll(winner.id, { thread_id: threadId }, POLL)).status).toBe('completed');
    // The winner alone called the provider.
    expect(await gate.state()).toMatchObject({ waiting: 0, passed: 1 });
    const messages = (await openai.beta.threads.messages.list(threadId)).data;
    expect(messages).toHaveLength(4);
    expect((await openai.beta.threads.runs.list(threadId)).data).toHaveLength(2);
  });

  it('admits one of 8 streamed runs on one thread: the others, whose executors began before their commit failed, call through nothing', async () => {
    const { threadId } = await threadWith('Hi', 'Hello.');
    const gate = remoteGate(inject('upstreamUrl'), freshGate('streamed-racers'));
    const responses = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        call(`/v1/threads/${threadId}/runs`, {
          assistant_id: assistantId,
          stream: true,
          additional_messages: [{ role: 'user', content: ask(`Racer ${i}`, { reply: 'Done.', hold: gate.name }) }],
        }),
      ),
    );
    const admitted = responses.filter((response) => response.status === 200);
    expect(admitted).toHaveLength(1);
    for (const response of responses.filter((r) => r.status !== 200)) {
      expect(await errorOf(response)).toMatchObject({ status: 400, code: 'thread_has_active_run' });
    }
    // Only the winner's call is held: a refused run's executor, told its rows were not written, left.
    await vi.waitFor(async () => expect((await gate.state()).waiting).toBe(1), { timeout: 20_000, interval: 50 });
    await gate.open();
    const events = await defined(admitted[0]).text();
    expect(events).toContain('event: thread.run.completed');
    expect(await gate.state()).toMatchObject({ waiting: 0, passed: 1 });
    expect((await openai.beta.threads.messages.list(threadId)).data).toHaveLength(4);
    expect((await openai.beta.threads.runs.list(threadId)).data).toHaveLength(2);
  });

  it('takes the unique index’s refusal over @libsql/client/web for an open run, and nothing else', async () => {
    const { threadId } = await threadWith('Hi', 'Hello.');
    const gate = remoteGate(inject('upstreamUrl'), freshGate('open'));
    const run = await openai.beta.threads.runs.create(threadId, {
      assistant_id: assistantId,
      additional_messages: [{ role: 'user', content: ask('Wait', { reply: 'Done.', hold: gate.name }) }],
    });
    // The run is open (its provider holds the answer): a second open run of the thread, written
    // directly through the driver, is refused by the index and reported as such.
    const db = drizzle(createClient({ url: inject('sqldUrl') }), { schema });
    const { seq: _seq, ...columns } = getTableColumns(schema.runs);
    const [open] = await db.select(columns).from(schema.runs).where(eq(schema.runs.id, run.id));
    expect(open?.status).toBe('in_progress');
    expect(
      await insertRunOnThread(db, [], { ...defined(open), id: `run_${crypto.randomUUID().replaceAll('-', '')}` }),
    ).toBe(false);

    // Once it has ended, the thread is free: a duplicate id is another conflict, and an error.
    await gate.open();
    expect((await openai.beta.threads.runs.poll(run.id, { thread_id: threadId }, POLL)).status).toBe('completed');
    const error = await insertRunOnThread(db, [], defined(open)).catch((caught: unknown) => caught);
    expect(isUniqueViolation(error, 'runs.id')).toBe(true);
    expect(isUniqueViolation(error, 'runs.thread_id')).toBe(false);
  });

  it('completes a streamed run whose provider sends [DONE] and keeps its body open', async () => {
    // The Worker's reads wait for MIN_READ_BYTES: `data: [DONE]` is shorter, and no end follows it.
    const thread = await openai.beta.threads.create({
      messages: [{ role: 'user', content: ask('Hello?', { reply: 'Hello there.', stall_after_done: true }) }],
    });
    const stream = openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId });
    const deltas: string[] = [];
    stream.on('textDelta', (delta) => deltas.push(defined(delta.value)));
    const run = await stream.finalRun();
    expect(run.status).toBe('completed');
    expect(deltas.join('')).toBe('Hello there.');
  });

  it("streams a later run with the whole thread, the run before's answer as the database has it, also once it changed elsewhere", async () => {
    const thread = await openai.beta.threads.create({
      messages: [{ role: 'user', content: ask('My name is Ada.', { reply: 'Hello Ada.' }) }],
    });
    const streamedRun = async (text: string) => {
      await openai.beta.threads.messages.create(thread.id, { role: 'user', content: text });
      const stream = openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId });
      const deltas: string[] = [];
      stream.on('textDelta', (delta) => deltas.push(defined(delta.value)));
      const run = await stream.finalRun();
      expect(run.status).toBe('completed');
      return { run, text: deltas.join('') };
    };
    expect((await openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId }).finalRun()).status).toBe(
      'completed',
    );
    const second = ask('What is my name?', { echo_messages: true });
    const answered = await streamedRun(second);
    const history = [
      SYSTEM,
      { role: 'user', content: ask('My name is Ada.', { reply: 'Hello Ada.' }) },
      { role: 'assistant', content: 'Hello Ada.' },
      { role: 'user', content: second },
    ];
    expect(JSON.parse(answered.text)).toEqual(history);
    // The second answer changed behind the gateway: the next run's prompt has it as it is now.
    const db = drizzle(createClient({ url: inject('sqldUrl') }), { schema });
    await db
      .update(schema.messages)
      .set({ content: [{ type: 'text', text: { value: 'Changed elsewhere.', annotations: [] } }] })
      .where(eq(schema.messages.runId, answered.run.id));
    const third = ask('And now?', { echo_messages: true });
    expect(JSON.parse((await streamedRun(third)).text)).toEqual([
      ...history,
      { role: 'assistant', content: 'Changed elsewhere.' },
      { role: 'user', content: third },
    ]);
  });
});

/** The text of a streamed run's answer (its deltas), and its events' names. */
async function streamedAnswer(response: Response) {
  const events = parseEventStream(await response.text());
  return { text: deltaText(events), names: events.map((event) => event.event) };
}

/** The settings' generation as the database has it (db/settings-cache.ts). */
async function settingsGeneration(): Promise<unknown> {
  const result = await createClient({ url: inject('sqldUrl') }).execute(
    'SELECT value FROM settings_generation WHERE id = 0',
  );
  return result.rows[0]?.value;
}

describe('a later run on a thread, its history the answer its executor handed back (StreamOptions.answered)', () => {
  const FIRST = { role: 'user' as const, content: ask('My name is Ada.', { reply: 'Hello Ada.' }) };
  const ANSWER = { role: 'assistant', content: 'Hello Ada.' };

  /** A thread made here, whose first run was streamed here to its end: the thread is known in this isolate. */
  async function answeredThread() {
    // The assistant and the key held (the settings' generation seen): a run guesses only then.
    const warm = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistantId, thread: { messages: [{ role: 'user', content: 'warm' }] } },
      POLL,
    );
    expect(warm.status).toBe('completed');
    const thread = await openai.beta.threads.create({ messages: [FIRST] });
    const first = await openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId }).finalRun();
    expect(first.status).toBe('completed');
    return thread;
  }

  it("calls the provider while the run's write is held at the database, once, the prompt the whole thread, turn after turn", async () => {
    const thread = await answeredThread();
    const history: { role: string; content: string }[] = [SYSTEM, FIRST, ANSWER];
    for (const turn of [1, 2]) {
      const gate = remoteGate(inject('upstreamUrl'), freshGate('later-run'));
      const question = {
        role: 'user' as const,
        content: ask(`Turn ${turn}?`, { echo_messages: true, hold: gate.name }),
      };
      // Read before the request that last reads it in the isolate (the guess starts on that one,
      // SettingsCache.provisional): a change made by another file in between is then seen here too.
      const generation = await settingsGeneration();
      await openai.beta.threads.messages.create(thread.id, question);
      // The provider was called before the run's write (its statements name the thread) went through.
      const { answer } = await whileRemoteDatabaseHeld(
        inject('databaseProxyUrl'),
        thread.id,
        gate,
        () => call(`/v1/threads/${thread.id}/runs`, { assistant_id: assistantId, stream: true }),
        async () => (await settingsGeneration()) !== generation,
      );
      await gate.open();
      const { text, names } = await streamedAnswer(await answer);
      expect(names.slice(0, 3)).toEqual(['thread.run.created', 'thread.run.queued', 'thread.run.in_progress']);
      expect(names.at(-2)).toBe('thread.run.completed');
      // Called once: the guess held, and the provider was not called again from what is read;
      // unless another file changed the settings meanwhile (they share the database), which fails
      // the settings' guard, and the run is made again from what is read.
      // A change made after the write committed refuses nothing: then once or twice.
      const calls = (await settingsGeneration()) === generation ? [1] : [1, 2];
      const state = await gate.state();
      expect(state.waiting).toBe(0);
      expect(calls).toContain(state.passed);
      history.push(question);
      expect(JSON.parse(text)).toEqual(history);
      history.push({ role: 'assistant', content: text });
    }
    expect((await openai.beta.threads.runs.list(thread.id)).data).toHaveLength(3);
  });

  const db = () => drizzle(createClient({ url: inject('sqldUrl') }), { schema });
  const ADDED = { role: 'user', content: 'Added elsewhere.' };
  /** Changes made behind the gateway after the first answer, and the thread's prompt after them (the new question last). */
  const changes: [string, (threadId: string) => Promise<unknown>, (question: object) => unknown][] = [
    [
      'a message added',
      (threadId) =>
        createClient({ url: inject('sqldUrl') }).execute({
          sql: `INSERT INTO messages (id, thread_id, workspace_id, created_at, role, content, status, attachments, metadata)
                SELECT ?, id, workspace_id, ?, 'user', ?, 'completed', '[]', '{}' FROM threads WHERE id = ?`,
          args: [
            `msg_elsewhere${crypto.randomUUID().replaceAll('-', '')}`,
            Date.now(),
            JSON.stringify([{ type: 'text', text: { value: ADDED.content, annotations: [] } }]),
            threadId,
          ],
        }),
      (question) => [SYSTEM, FIRST, ANSWER, ADDED, question],
    ],
    [
      'the answer deleted',
      (threadId) =>
        db()
          .delete(schema.messages)
          .where(and(eq(schema.messages.threadId, threadId), isNotNull(schema.messages.runId))),
      (question) => [SYSTEM, FIRST, question],
    ],
    [
      'the answer changed',
      (threadId) =>
        db()
          .update(schema.messages)
          .set({ content: [{ type: 'text', text: { value: 'Changed elsewhere.', annotations: [] } }] })
          .where(and(eq(schema.messages.threadId, threadId), isNotNull(schema.messages.runId))),
      (question) => [SYSTEM, FIRST, { role: 'assistant', content: 'Changed elsewhere.' }, question],
    ],
    [
      "a tool call placed in the first run's step",
      (threadId) =>
        db()
          .update(schema.runSteps)
          .set({
            type: 'tool_calls',
            status: 'completed',
            stepDetails: {
              type: 'tool_calls',
              tool_calls: [
                {
                  id: 'call_elsewhere',
                  type: 'function',
                  function: { name: 'lookup', arguments: '{}', output: 'sunny' },
                },
              ],
            },
          })
          .where(eq(schema.runSteps.threadId, threadId)),
      // Placed among the messages by the step's time: where is the prompt's business (threads/timeline.ts).
      (question) =>
        expect.arrayContaining([{ role: 'tool', tool_call_id: 'call_elsewhere', content: 'sunny' }, question]),
    ],
  ];
  it.each(changes)(
    'answers from what is read when the thread changed behind the gateway (%s): one run, the prompt as the database has it',
    async (_, change, expected) => {
      const thread = await answeredThread();
      await change(thread.id);
      const question = { role: 'user' as const, content: ask('And now?', { echo_messages: true }) };
      await openai.beta.threads.messages.create(thread.id, question);
      const response = await call(`/v1/threads/${thread.id}/runs`, { assistant_id: assistantId, stream: true });
      const { text, names } = await streamedAnswer(response);
      expect(names.filter((name) => name === 'thread.run.created')).toHaveLength(1);
      expect(names.at(-2)).toBe('thread.run.completed');
      expect(JSON.parse(text)).toEqual(expected(question));
      const runs = (await openai.beta.threads.runs.list(thread.id)).data;
      expect(runs.map((run) => run.status)).toEqual(['completed', 'completed']);
    },
  );
});
