import { randomBytes } from 'node:crypto';
import type { Client } from '@libsql/client';
import type OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { whileDatabaseHeld, type DatabaseProxy } from '../../support/database-proxy';
import { gatewaysOnSqld, roundTrips as countedRoundTrips } from '../../support/gateways-on-sqld';
import { defined } from '../../support/defined';
import { createFakeUpstream, fakeDirective } from '../../support/fake-upstream';
import { errorOf, type TestGateway } from '../../support/gateway';
import { createPolicy, usedBy } from '../../support/ratelimit';
import { WEATHER_TOOL } from '../../support/runs';
import { deltaText, parseEventStream } from '../../support/sse';
import { seedStore } from '../../support/vector-stores';
import { freshGate } from '../../support/gates';
import { waitFor } from '../../support/wait';
import { knownHistories } from '../../../src/resources/threads/known-histories';

/**
 * A run on a thread on a database server (LIBSQL_URL), when what it needs is held in memory:
 * its reads and its rows in one round trip (resources/runs/commands.ts, runInOneTrip). The round
 * trips are counted by a proxy in front of a real sqld, as bench:round-trips counts them; the
 * changes that must make the run take the path of reads are made as another gateway or the CLI
 * would, straight in the database, between the run that filled the memory and the next one.
 */

let proxy: DatabaseProxy;
let gateway: TestGateway;
/** Another gateway on the same database, whose changes this one learns only from the database. */
let other: TestGateway;
let elsewhere: Client;
let close: () => Promise<void>;
const upstream = createFakeUpstream();

beforeAll(async () => {
  ({ proxy, gateway, other, elsewhere, close } = await gatewaysOnSqld(upstream));
});
afterAll(() => close());
afterEach(async () => {
  expect(await gateway.tasks.drain(30_000)).toBe(true);
});

const POLL = { pollIntervalMs: 10 };

/** A tenant with a virtual key calling the fake, an assistant, and the SDK with its headers. */
async function setup(instructions = 'Be brief.') {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  const key = tenant.workspaceKey;
  const openai = gateway.openai({ 'x-gateway-api-key': key });
  const assistant = await openai.beta.assistants.create({ model: 'fake-model', instructions, tools: [WEATHER_TOOL] });
  return { tenant, key, openai, assistantId: assistant.id };
}

/** A run on a new thread, polled to its end: what leaves the assistant, its key and the policies in memory. */
async function warm(openai: OpenAI, assistantId: string) {
  const thread = await openai.beta.threads.create();
  const run = await openai.beta.threads.runs.createAndPoll(
    thread.id,
    { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'warm' }] },
    POLL,
  );
  expect(run.status).toBe('completed');
  await gateway.tasks.drain(10_000);
}

/** A run on the thread whose model called a function: it waits for the output (requires_action). */
const waitingForOutputs = (openai: OpenAI, assistantId: string, threadId: string) =>
  openai.beta.threads.runs.createAndPoll(
    threadId,
    {
      assistant_id: assistantId,
      additional_messages: [{ role: 'user', content: `Weather?\n${fakeDirective({ tool_calls: 1 })}` }],
    },
    POLL,
  );

const countOf = async (table: 'messages' | 'runs', threadId: string) =>
  Number(
    defined(
      (await elsewhere.execute({ sql: `SELECT count(*) AS n FROM ${table} WHERE thread_id = ?`, args: [threadId] }))
        .rows[0],
    ).n,
  );

/** The round trips to the database `task` makes, its run's last writes included. */
const roundTrips = (task: () => Promise<unknown>) => countedRoundTrips(gateway, proxy, task);

describe('a run on a thread in one round trip to a database server', () => {
  it("makes the SDK's turn (a message, a streamed run, the messages listed) in 4 round trips", async () => {
    const { openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create();
    const turn = async () => {
      await openai.beta.threads.messages.create(thread.id, { role: 'user', content: 'hello' });
      const run = await openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId }).finalRun();
      expect(run.status).toBe('completed');
      return openai.beta.threads.messages.list(thread.id);
    };
    // A message (its insert led by the settings' guard), the run's reads and rows, its end, the list.
    expect(await roundTrips(turn)).toBe(4);
    // The run's prompt had the whole thread: both turns' messages, and the first answer.
    expect(await roundTrips(turn)).toBe(4);
    const sent = defined(upstream.requests.at(-1)).body?.messages as { role: string }[];
    expect(sent.map((message) => message.role)).toEqual(['system', 'user', 'assistant', 'user']);
    const listed = await openai.beta.threads.messages.list(thread.id);
    expect(listed.data).toHaveLength(4);
  });

  it('takes the path of reads when the assistant changed elsewhere since it was kept, writing the run once, with the new settings', async () => {
    const { openai, assistantId } = await setup('Old instructions.');
    await warm(openai, assistantId);
    // The gateway's last look at the settings' generation is this request's: the change comes after it.
    const thread = await openai.beta.threads.create();
    await elsewhere.execute({
      sql: 'UPDATE assistants SET instructions = ? WHERE id = ?',
      args: ['New instructions.', assistantId],
    });
    const run = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'which?' }] },
      POLL,
    );
    expect(run).toMatchObject({ status: 'completed', instructions: 'New instructions.' });
    expect(defined(upstream.requests.at(-1)).body?.messages[0]).toEqual({
      role: 'system',
      content: 'New instructions.',
    });
    expect(await countOf('runs', thread.id)).toBe(1);
    expect(await countOf('messages', thread.id)).toBe(2);
  });

  it('answers 404 for a thread deleted elsewhere, or of another workspace, and writes none of the run or its messages', async () => {
    const { key, openai, assistantId } = await setup();
    const stranger = await setup();
    const gone = await openai.beta.threads.create();
    const theirs = await stranger.openai.beta.threads.create();
    await warm(openai, assistantId);
    await elsewhere.execute({ sql: 'DELETE FROM threads WHERE id = ?', args: [gone.id] });
    for (const threadId of [gone.id, theirs.id]) {
      const response = await gateway.request(`/v1/threads/${threadId}/runs`, {
        key,
        body: { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'anyone?' }] },
      });
      expect(response.status).toBe(404);
      expect(await errorOf(response)).toMatchObject({ code: 'thread_not_found' });
      expect(await countOf('runs', threadId)).toBe(0);
      expect(await countOf('messages', threadId)).toBe(0);
    }
  });

  it('answers 400 for a thread whose run waits for tool outputs, and adds none of the messages', async () => {
    const { key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create();
    const waiting = await waitingForOutputs(openai, assistantId, thread.id);
    expect(waiting.status).toBe('requires_action');
    await gateway.tasks.drain(10_000);
    const response = await gateway.request(`/v1/threads/${thread.id}/runs`, {
      key,
      body: { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'and now?' }] },
    });
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({ code: 'thread_has_active_run' });
    expect(await countOf('runs', thread.id)).toBe(1);
    expect(await countOf('messages', thread.id)).toBe(1);
  });

  it('gives its admission back when the run could not be written so, and counts a run that is once', async () => {
    const { tenant, key, openai, assistantId } = await setup();
    const policy = await createPolicy(gateway, tenant, { value: 100 });
    await warm(openai, assistantId);
    const counted = await usedBy(elsewhere, policy);
    const gone = await openai.beta.threads.create();
    await elsewhere.execute({ sql: 'DELETE FROM threads WHERE id = ?', args: [gone.id] });
    const refused = await gateway.request(`/v1/threads/${gone.id}/runs`, { key, body: { assistant_id: assistantId } });
    expect(refused.status).toBe(404);
    expect(await usedBy(elsewhere, policy)).toBe(counted);
    const thread = await openai.beta.threads.create();
    const run = await openai.beta.threads.runs.createAndPoll(thread.id, { assistant_id: assistantId }, POLL);
    expect(run.status).toBe('completed');
    expect(await usedBy(elsewhere, policy)).toBe(counted + 1);
  });
});

describe('a policy made by another gateway', () => {
  it('governs the runs after it, though the policies held here were current at the generation before it', async () => {
    const { tenant, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    // Made before: the runs are the first requests after the change.
    const threads = [await openai.beta.threads.create(), await openai.beta.threads.create()];
    // By the day: a minute's window could turn between the two runs, and the second be the first of its window.
    await createPolicy(other, tenant, { value: 1, unit: 'rpd' });
    const runOn = (thread: { id: string }) =>
      gateway.request(`/v1/threads/${thread.id}/runs`, {
        key: tenant.workspaceKey,
        body: { assistant_id: assistantId },
      });
    expect((await runOn(defined(threads[0]))).status).toBe(200);
    expect((await runOn(defined(threads[1]))).status).toBe(429);
  });
});

describe('what the path of one round trip does not take', () => {
  it('makes a run with a tokens policy as before: its reads, then its rows', async () => {
    const { tenant, openai, assistantId } = await setup();
    await createPolicy(gateway, tenant, { type: 'tokens', value: 1_000_000 });
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create();
    const trips = await roundTrips(() =>
      openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId }).finalRun(),
    );
    // The reads (with the generation), the admission (the counters are the database's on Node), the
    // rows, the run's end, and the tokens charged.
    expect(trips).toBe(5);
  });
});

/** A streamed run's answer read to its end: its status and its events. */
async function streamed(path: string, key: string, body: Record<string, unknown>) {
  const response = await gateway.request(path, { key, body: { ...body, stream: true } });
  return { status: response.status, events: parseEventStream(await response.text()) };
}

/** The last user message's text of the `index`th request the fake provider received. */
const lastUserText = (index: number) =>
  (defined(upstream.requests[index]).body?.messages as { role: string; content: string }[])
    .filter((message) => message.role === 'user')
    .at(-1)?.content;

/** A thread changed as another gateway would change it, straight in the database. */
const changes: [string, (threadId: string) => Promise<unknown>][] = [
  [
    'a message added elsewhere',
    (threadId) =>
      elsewhere.execute({
        sql: `INSERT INTO messages (id, thread_id, workspace_id, created_at, role, content, status, attachments, metadata)
              SELECT ?, id, workspace_id, ?, 'user', ?, 'completed', '[]', '{}' FROM threads WHERE id = ?`,
        args: [
          `msg_elsewhere${randomBytes(6).toString('hex')}`,
          Date.now(),
          JSON.stringify([{ type: 'text', text: { value: 'added elsewhere', annotations: [] } }]),
          threadId,
        ],
      }),
  ],
  [
    'its newest message deleted elsewhere',
    (threadId) =>
      elsewhere.execute({
        sql: 'DELETE FROM messages WHERE seq = (SELECT max(seq) FROM messages WHERE thread_id = ?)',
        args: [threadId],
      }),
  ],
];

describe("a thread's first run, its messages known: the provider called beside the write", () => {
  it('calls the provider while the write is at the database, and tells nothing before it commits: created first, then the answer', async () => {
    const { key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create({ messages: [{ role: 'user', content: 'known words' }] });
    await openai.beta.threads.messages.create(thread.id, { role: 'user', content: 'and more' });
    const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId }),
    );
    // The provider was called while the run's write waited at the database (whileDatabaseHeld waits for both).
    expect(seen.called).toBe(1);
    expect(lastUserText(-1 + upstream.requests.length)).toBe('and more');
    const names = answer.events.map((event) => event.event);
    expect(names.slice(0, 3)).toEqual(['thread.run.created', 'thread.run.queued', 'thread.run.in_progress']);
    expect(names.indexOf('thread.message.delta')).toBeGreaterThan(names.indexOf('thread.run.created'));
    expect(deltaText(answer.events)).toBe('You said: and more');
    expect(names.at(-2)).toBe('thread.run.completed');
    const created = defined(answer.events[0]).data as { id: string };
    const run = await openai.beta.threads.runs.retrieve(created.id, { thread_id: thread.id });
    expect(run.status).toBe('completed');
    expect(await countOf('runs', thread.id)).toBe(1);
    expect(await countOf('messages', thread.id)).toBe(3);
  });

  it.each(changes)(
    'takes the path of reads when the thread changed since (%s), telling nothing of the first answer, writing the run once',
    async (_, change) => {
      const { key, openai, assistantId } = await setup();
      await warm(openai, assistantId);
      const thread = await openai.beta.threads.create({ messages: [{ role: 'user', content: 'first words' }] });
      await openai.beta.threads.messages.create(thread.id, { role: 'user', content: 'known words' });
      await change(thread.id);
      const calls = upstream.requests.length;
      // The first call is made before the write's guard is known to have failed.
      const { answer } = await whileDatabaseHeld(proxy, upstream, () =>
        streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId }),
      );
      expect(upstream.requests.length - calls).toBe(2);
      expect(lastUserText(calls)).toBe('known words');
      const truth = defined(lastUserText(calls + 1));
      expect(truth).not.toBe('known words');
      const names = answer.events.map((event) => event.event);
      expect(names.filter((name) => name === 'thread.run.created')).toHaveLength(1);
      expect(names[0]).toBe('thread.run.created');
      expect(deltaText(answer.events)).toBe(`You said: ${truth}`);
      const created = defined(answer.events[0]).data as { id: string };
      const runs = await openai.beta.threads.runs.list(thread.id);
      expect(runs.data.map((run) => [run.id, run.status])).toEqual([[created.id, 'completed']]);
    },
  );

  it('calls the provider once after the assistant was changed through this gateway: no run starts on the settings before', async () => {
    const { openai, assistantId } = await setup('Old instructions.');
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create({ messages: [{ role: 'user', content: 'which?' }] });
    await openai.beta.assistants.update(assistantId, { instructions: 'New instructions.' });
    const calls = upstream.requests.length;
    const run = await openai.beta.threads.runs.stream(thread.id, { assistant_id: assistantId }).finalRun();
    expect(run).toMatchObject({ status: 'completed', instructions: 'New instructions.' });
    expect(upstream.requests.length - calls).toBe(1);
  });

  it('answers 429 before the provider is called when a requests policy refuses the run', async () => {
    const { tenant, key, openai, assistantId } = await setup();
    await createPolicy(gateway, tenant, { value: 1 });
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create({ messages: [{ role: 'user', content: 'known words' }] });
    const calls = upstream.requests.length;
    const refused = await gateway.request(`/v1/threads/${thread.id}/runs`, {
      key,
      body: { assistant_id: assistantId, stream: true },
    });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(upstream.requests.length).toBe(calls);
    expect(await countOf('runs', thread.id)).toBe(0);
  });

  it("makes a new thread's run (POST /v1/threads/runs) in one round trip once one was made, the provider called beside it", async () => {
    const { openai, assistantId } = await setup();
    const run = () =>
      openai.beta.threads
        .createAndRunStream({ assistant_id: assistantId, thread: { messages: [{ role: 'user', content: 'hi' }] } })
        .finalRun();
    // The first after the settings changed (the assistant created) learns the generation; the next
    // reads the assistant and the key beside it, and keeps them (as a run on a thread does).
    await run();
    await run();
    // Then: its rows with the settings' guard, and its end.
    expect(await roundTrips(run)).toBe(2);
    const { answer } = await whileDatabaseHeld(proxy, upstream, run);
    expect(answer.status).toBe('completed');
  });

  it('makes a new thread and its run from what is read when the settings moved, telling nothing of the first answer', async () => {
    const { key, openai, assistantId } = await setup('Old instructions.');
    await warm(openai, assistantId);
    await elsewhere.execute({
      sql: 'UPDATE assistants SET instructions = ? WHERE id = ?',
      args: ['New instructions.', assistantId],
    });
    const calls = upstream.requests.length;
    const { answer } = await whileDatabaseHeld(proxy, upstream, () =>
      streamed('/v1/threads/runs', key, {
        assistant_id: assistantId,
        thread: { messages: [{ role: 'user', content: 'which?' }] },
      }),
    );
    const sent = (index: number) => (defined(upstream.requests[index]).body?.messages as { content: string }[])[0];
    expect(upstream.requests.length - calls).toBe(2);
    expect(sent(calls)?.content).toBe('Old instructions.');
    expect(sent(calls + 1)?.content).toBe('New instructions.');
    const names = answer.events.map((event) => event.event);
    expect(names.slice(0, 2)).toEqual(['thread.created', 'thread.run.created']);
    expect(names.filter((name) => name === 'thread.created')).toHaveLength(1);
    const thread = defined(answer.events[0]).data as { id: string };
    const run = defined(answer.events[1]).data as { id: string; thread_id: string; instructions: string };
    expect(run).toMatchObject({ thread_id: thread.id, instructions: 'New instructions.' });
    expect(await countOf('runs', thread.id)).toBe(1);
  });
});

/** The text of the prompt's messages, by role, as the provider was sent them in its `index`th request. */
const promptOf = (index: number) =>
  (defined(upstream.requests[index]).body?.messages as { role: string; content: string | null }[]).map(
    (message) => `${message.role}: ${message.content ?? ''}`,
  );

/** A thread whose first run was streamed to its end, its answer `You said: first words`. */
async function threadAfterARun(key: string, openai: OpenAI, assistantId: string) {
  const thread = await openai.beta.threads.create({ messages: [{ role: 'user', content: 'first words' }] });
  const first = await streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId });
  expect(deltaText(first.events)).toBe('You said: first words');
  return thread;
}

describe('a later run on a thread, its history known from the run before: the provider called beside the write', () => {
  it("calls the provider while the write is at the database, the prompt the whole thread with the first run's answer, turn after turn", async () => {
    const { key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await threadAfterARun(key, openai, assistantId);
    for (const [turn, words] of ['second words', 'third words'].entries()) {
      await openai.beta.threads.messages.create(thread.id, { role: 'user', content: words });
      const calls = upstream.requests.length;
      const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
        streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId }),
      );
      expect(seen.called).toBe(1);
      // The guess held: its guard passed, and the provider was not called again from what is read.
      expect(upstream.requests.length - calls).toBe(1);
      const earlier = turn === 0 ? [] : ['user: second words', 'assistant: You said: second words'];
      expect(promptOf(upstream.requests.length - 1)).toEqual([
        'system: Be brief.',
        'user: first words',
        'assistant: You said: first words',
        ...earlier,
        `user: ${words}`,
      ]);
      const names = answer.events.map((event) => event.event);
      expect(names.slice(0, 3)).toEqual(['thread.run.created', 'thread.run.queued', 'thread.run.in_progress']);
      expect(names.at(-2)).toBe('thread.run.completed');
      expect(deltaText(answer.events)).toBe(`You said: ${words}`);
    }
    expect(await countOf('runs', thread.id)).toBe(3);
    expect(await countOf('messages', thread.id)).toBe(6);
  });

  const afterARun: [string, (threadId: string) => Promise<unknown>][] = [
    ...changes.map(([name, change]): [string, (threadId: string) => Promise<unknown>] => [
      `${name}, after the first answer`,
      change,
    ]),
    [
      "the first answer's content changed elsewhere",
      (threadId) =>
        elsewhere.execute({
          sql: 'UPDATE messages SET content = ? WHERE thread_id = ? AND run_id IS NOT NULL',
          args: [JSON.stringify([{ type: 'text', text: { value: 'changed elsewhere', annotations: [] } }]), threadId],
        }),
    ],
    [
      "the first run's step made a tool call elsewhere, which a prompt shows",
      (threadId) =>
        elsewhere.execute({
          sql: "UPDATE run_steps SET type = 'tool_calls', status = 'completed', step_details = ? WHERE thread_id = ?",
          args: [
            JSON.stringify({
              type: 'tool_calls',
              tool_calls: [
                {
                  id: 'call_elsewhere',
                  type: 'function',
                  function: { name: 'get_weather', arguments: '{}', output: 'sunny' },
                },
              ],
            }),
            threadId,
          ],
        }),
    ],
  ];
  it.each(afterARun)(
    'takes the path of reads when the thread changed after its run (%s), telling nothing of the first answer, writing the run once',
    async (_, change) => {
      const { key, openai, assistantId } = await setup();
      await warm(openai, assistantId);
      const thread = await threadAfterARun(key, openai, assistantId);
      await change(thread.id);
      await openai.beta.threads.messages.create(thread.id, {
        role: 'user',
        content: `second words\n${fakeDirective({ echo_messages: true })}`,
      });
      const calls = upstream.requests.length;
      const { answer } = await whileDatabaseHeld(proxy, upstream, () =>
        streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId }),
      );
      // The guess (the thread as this gateway last saw it), then the truth, read.
      expect(upstream.requests.length - calls).toBe(2);
      const guess = promptOf(calls);
      const truth = promptOf(calls + 1);
      expect(guess.slice(1, 3)).toEqual(['user: first words', 'assistant: You said: first words']);
      expect(truth).not.toEqual(guess);
      const names = answer.events.map((event) => event.event);
      expect(names.filter((name) => name === 'thread.run.created')).toHaveLength(1);
      expect(names[0]).toBe('thread.run.created');
      // The answer is the truth's (the fake echoes the messages it was sent), and only it.
      const echoed = JSON.parse(deltaText(answer.events)) as unknown;
      expect(echoed).toEqual(defined(upstream.requests[calls + 1]).body?.messages);
      const created = defined(answer.events[0]).data as { id: string };
      const runs = await openai.beta.threads.runs.list(thread.id);
      expect(runs.data.map((run) => [run.id, run.status])).toEqual([
        [created.id, 'completed'],
        [expect.any(String), 'completed'],
      ]);
    },
  );
});

describe('a thread whose history was read: known from its run on', () => {
  it('guesses the run after one whose prompt was read, once its answer was seen', async () => {
    const { key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create();
    // The guess of its first run fails (the message is not this gateway's): made from what is read.
    await defined(changes[0])[1](thread.id);
    await streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId });
    // Not known now: its prompt is read, beside its write, and its answer seen.
    await openai.beta.threads.messages.create(thread.id, { role: 'user', content: 'second words' });
    const calls = upstream.requests.length;
    await streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId });
    expect(upstream.requests.length - calls).toBe(1);
    await openai.beta.threads.messages.create(thread.id, { role: 'user', content: 'third words' });
    const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId }),
    );
    expect(seen.called).toBe(1);
    expect(promptOf(upstream.requests.length - 1)).toEqual([
      'system: Be brief.',
      'user: added elsewhere',
      'assistant: You said: added elsewhere',
      'user: second words',
      'assistant: You said: second words',
      'user: third words',
    ]);
    expect(deltaText(answer.events)).toBe('You said: third words');
  });
});

describe('a thread with a tool exchange: the calls and outputs in the prompt of the run after it', () => {
  /** A thread whose run called a function and was given its output, `streamed` or polled; the run done. */
  async function afterToolExchange(openai: OpenAI, assistantId: string, streamedOutputs: boolean) {
    const thread = await openai.beta.threads.create();
    const waiting = await waitingForOutputs(openai, assistantId, thread.id);
    expect(waiting.status).toBe('requires_action');
    const call = defined(waiting.required_action?.submit_tool_outputs.tool_calls[0]);
    const submission = { thread_id: thread.id, tool_outputs: [{ tool_call_id: call.id, output: 'sunny' }] };
    const done = streamedOutputs
      ? await openai.beta.threads.runs.submitToolOutputsStream(waiting.id, submission).finalRun()
      : await openai.beta.threads.runs.submitToolOutputsAndPoll(waiting.id, submission, POLL);
    expect(done.status).toBe('completed');
    await gateway.tasks.drain(10_000);
    return { thread, call };
  }

  /** The messages of the provider's last request, the call's id as `call`. */
  const lastPrompt = (callId: string) =>
    JSON.parse(JSON.stringify(defined(upstream.requests.at(-1)).body?.messages).replaceAll(callId, 'call')) as {
      role: string;
    }[];

  it('knows the thread from a streamed submission on: the next run called beside its write, its prompt the one the path of reads sends', async () => {
    const { key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const next = { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'second words' }] };
    // Polled, the submission is not handed back: the next run reads the thread beside its write.
    const polled = await afterToolExchange(openai, assistantId, false);
    const read = await streamed(`/v1/threads/${polled.thread.id}/runs`, key, next);
    expect(deltaText(read.events)).toBe('You said: second words');
    const readPrompt = lastPrompt(polled.call.id);
    expect(readPrompt.map((message) => message.role)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'assistant',
      'user',
    ]);
    expect(readPrompt[3]).toMatchObject({ role: 'tool', tool_call_id: 'call', content: 'sunny' });

    // Streamed, its answer is handed back: the thread is known, the next run made from it.
    const handed = await afterToolExchange(openai, assistantId, true);
    const guessed = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(`/v1/threads/${handed.thread.id}/runs`, key, next),
    );
    expect(guessed.seen.called).toBe(1);
    expect(deltaText(guessed.answer.events)).toBe('You said: second words');
    expect(lastPrompt(handed.call.id)).toEqual(readPrompt);
  });

  it('knows it when the turn before the outputs said something first: the prompt the one the path of reads sends', async () => {
    const { key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create();
    // A first turn that says something, then calls the function: text before the calls.
    const waiting = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      {
        assistant_id: assistantId,
        additional_messages: [
          { role: 'user', content: `Weather?\n${fakeDirective({ reply: 'Let me look.', tool_calls: 1 })}` },
        ],
      },
      POLL,
    );
    expect(waiting.status).toBe('requires_action');
    const call = defined(waiting.required_action?.submit_tool_outputs.tool_calls[0]);
    await openai.beta.threads.runs
      .submitToolOutputsStream(waiting.id, {
        thread_id: thread.id,
        tool_outputs: [{ tool_call_id: call.id, output: 'sunny' }],
      })
      .finalRun();
    await gateway.tasks.drain(10_000);
    const next = { assistant_id: assistantId, additional_messages: [{ role: 'user', content: 'second words' }] };
    const guessed = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(`/v1/threads/${thread.id}/runs`, key, next),
    );
    expect(guessed.seen.called).toBe(1);
    const known = lastPrompt(call.id);
    // The same thread read: forgotten here, its next run reads it.
    knownHistories(gateway.deps.db)?.forget(thread.id);
    await openai.beta.threads.messages.create(thread.id, { role: 'user', content: 'third words' });
    await streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId });
    const readPrompt = lastPrompt(call.id);
    expect(known.map((message) => message.role)).toEqual([
      'system',
      'user',
      'assistant',
      'assistant',
      'tool',
      'assistant',
      'user',
    ]);
    // The read prompt is the known one, the second run's answer and the third words after it.
    expect(readPrompt.slice(0, known.length)).toEqual(known);
    expect(readPrompt.slice(known.length).map((message) => message.role)).toEqual(['assistant', 'user']);
  });
});

/** A fresh thread whose run waits for the output of one call (after a warm-up run): the call and its step. */
async function waitingThread() {
  const { key, openai, assistantId } = await setup();
  await warm(openai, assistantId);
  const thread = await openai.beta.threads.create();
  const waiting = await waitingForOutputs(openai, assistantId, thread.id);
  expect(waiting.status).toBe('requires_action');
  const call = defined(waiting.required_action?.submit_tool_outputs.tool_calls[0]);
  return { key, openai, thread, waiting, call, step: await waitingStep(openai, waiting) };
}

/** The run's tool-calls step that waits for its outputs. */
async function waitingStep(openai: OpenAI, run: { id: string; thread_id: string }) {
  const steps = (await openai.beta.threads.runs.steps.list(run.id, { thread_id: run.thread_id })).data;
  return defined(steps.find((step) => step.type === 'tool_calls' && step.status === 'in_progress'));
}

describe('tool outputs submitted: what the turn needs read in one round trip, the provider called beside the write', () => {
  it('reads once, then calls the provider while the write that takes the outputs is at the database: 3 round trips in all', async () => {
    const { key, thread, waiting, call, step } = await waitingThread();
    await gateway.tasks.drain(10_000);
    const before = proxy.count;
    // The write names the step (its outputs); the reads before it name the run.
    proxy.holdContaining(step.id);
    let answer: Awaited<ReturnType<typeof streamed>>;
    try {
      const submitted = streamed(`/v1/threads/${thread.id}/runs/${waiting.id}/submit_tool_outputs`, key, {
        stream: true,
        tool_outputs: [{ tool_call_id: call.id, output: 'sunny' }],
      });
      submitted.catch(() => undefined);
      const seen = await waitFor(
        () => ({
          called: JSON.stringify(upstream.requests.at(-1)?.body?.messages),
          held: proxy.heldContaining(step.id),
        }),
        (state) => state.held > 0 && state.called.includes('sunny'),
      );
      // The provider was called with the outputs while the write waited at the database.
      expect(seen.held).toBe(1);
      expect(seen.called).toContain('sunny');
      // Nothing of the turn is told before its write commits.
      expect(upstream.requests.at(-1)?.outcome).toBe('open');
      proxy.release(step.id);
      answer = await submitted;
    } finally {
      proxy.release(step.id);
    }
    expect(answer.events.slice(0, 3).map((event) => event.event)).toEqual([
      'thread.run.step.completed',
      'thread.run.queued',
      'thread.run.in_progress',
    ]);
    expect(answer.events.at(-2)?.event).toBe('thread.run.completed');
    const sent = defined(upstream.requests.at(-1)).body?.messages as { role: string }[];
    expect(sent.map((message) => message.role)).toEqual(['system', 'user', 'assistant', 'tool']);
    expect(sent[3]).toMatchObject({ role: 'tool', tool_call_id: call.id, content: 'sunny' });
    await gateway.tasks.drain(10_000);
    await proxy.quiet();
    // The reads, the write beside the provider's call, the turn's end.
    expect(proxy.count - before).toBe(3);
  });

  it('answers run_not_active to the second of two submissions at once: its provider call stopped, the outputs written once', async () => {
    const { key, openai, thread, waiting, call, step } = await waitingThread();
    const calls = upstream.requests.length;
    proxy.holdContaining(step.id);
    const submit = (output: string) =>
      gateway.request(`/v1/threads/${thread.id}/runs/${waiting.id}/submit_tool_outputs`, {
        key,
        body: { stream: true, tool_outputs: [{ tool_call_id: call.id, output }] },
      });
    let answers: Response[];
    try {
      const both = Promise.all([submit('first'), submit('second')]);
      both.catch(() => undefined);
      // Both read the run waiting, and called the provider beside their writes.
      const seen = await waitFor(
        () => ({ called: upstream.requests.length - calls, held: proxy.heldContaining(step.id) }),
        (state) => state.called === 2 && state.held === 2,
      );
      expect(seen).toEqual({ called: 2, held: 2 });
      proxy.release(step.id);
      answers = await both;
    } finally {
      proxy.release(step.id);
    }
    const statuses = answers.map((response) => response.status).sort();
    expect(statuses).toEqual([200, 400]);
    const refused = defined(answers.find((response) => response.status === 400));
    expect((await errorOf(refused)).code).toBe('run_not_active');
    const streamedAnswer = parseEventStream(await defined(answers.find((response) => response.status === 200)).text());
    expect(streamedAnswer.at(-2)?.event).toBe('thread.run.completed');
    await gateway.tasks.drain(10_000);
    // The refused one's provider call was stopped; the run answered once, with one of the outputs.
    const outcomes = upstream.requests.slice(calls).map((request) => request.outcome);
    expect(outcomes.sort()).toEqual(['cancelled', 'completed']);
    const stored = await openai.beta.threads.runs.steps.retrieve(step.id, { thread_id: thread.id, run_id: waiting.id });
    const output = stored.step_details.type === 'tool_calls' ? stored.step_details.tool_calls[0] : undefined;
    expect(output?.type === 'function' && output.function.output).toMatch(/^(first|second)$/);
    const run = await openai.beta.threads.runs.retrieve(waiting.id, { thread_id: thread.id });
    expect(run.status).toBe('completed');
    expect(await countOf('messages', thread.id)).toBe(2);
  });
});

describe('a thread whose run searched its files: known from that run on', () => {
  it('guesses the run after one that searched, the search and its results in its prompt as the path of reads sends them', async () => {
    const { tenant, key, openai } = await setup();
    const store = await seedStore(gateway, tenant, [
      { filename: 'policies.md', chunks: ['Refunds are granted within 30 days of purchase.'] },
    ]);
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      instructions: 'Answer from the files.',
      tools: [{ type: 'file_search' }],
      tool_resources: { file_search: { vector_store_ids: [store.id] } },
    });
    await warm(openai, assistant.id);
    const search = { tool_calls: [{ name: 'file_search', arguments: { queries: ['refunds'] } }] };
    const thread = await openai.beta.threads.create({
      messages: [{ role: 'user', content: `Refunds?\n${fakeDirective([search, { reply: 'Within 30 days.' }])}` }],
    });
    const first = await streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistant.id });
    expect(deltaText(first.events)).toBe('Within 30 days.');
    await openai.beta.threads.messages.create(thread.id, {
      role: 'user',
      content: `And then?\n${fakeDirective({ reply: 'Nothing more.' })}`,
    });
    const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistant.id }),
    );
    expect(seen.called).toBe(1);
    expect(deltaText(answer.events)).toBe('Nothing more.');
    const sent = defined(upstream.requests.at(-1)).body?.messages as {
      role: string;
      content: string | null;
      tool_calls?: { function: { name: string } }[];
    }[];
    expect(sent.map((message) => message.role)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant', 'user']);
    expect(sent[2]?.tool_calls?.[0]?.function.name).toBe('file_search');
    expect(sent[3]?.content).toContain('Refunds are granted within 30 days of purchase.');
    expect(sent[4]?.content).toBe('Within 30 days.');
  });
});

/** What this gateway knows of the thread now, as its next run would take it (taken: it is gone after). */
const knownNow = (threadId: string, workspaceId: string) =>
  knownHistories(gateway.deps.db)?.take({ id: threadId, workspaceId }, 1_000_000) ?? null;

/** The stored content (its JSON, as the database holds it) of the message `runId` wrote. */
const storedAnswer = async (runId: string) =>
  defined((await elsewhere.execute({ sql: 'SELECT content FROM messages WHERE run_id = ?', args: [runId] })).rows[0])
    .content;

/** A streamed run's body, read until `until` appears in it (or to its end): what was read, and the reader. */
async function readUntil(response: Response, until: string) {
  const reader = defined(response.body).getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes(until)) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  return { text, reader };
}

describe("a streamed run's answer, handed back from where the run settled (StreamOptions.answered)", () => {
  it('is the message as stored, byte for byte, known before the event that ends the run leaves', async () => {
    const { tenant, key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const reply = 'Ça va, "quoted" \\ and a tab\there. 🙂';
    const thread = await openai.beta.threads.create({
      messages: [{ role: 'user', content: `first words\n${fakeDirective({ reply })}` }],
    });
    const response = await gateway.request(`/v1/threads/${thread.id}/runs`, {
      key,
      body: { assistant_id: assistantId, stream: true },
    });
    const { text, reader } = await readUntil(response, 'event: thread.run.completed');
    // Known now, with the run's answer: told before its last events were sent.
    const known = knownNow(thread.id, tenant.workspace.id);
    await reader.cancel();
    const run = defined(parseEventStream(text).find((event) => event.event === 'thread.run.created')).data as {
      id: string;
    };
    const stored = (await openai.beta.threads.messages.list(thread.id, { order: 'asc' })).data;
    expect(known?.messages.map((message) => message.id)).toEqual(stored.map((message) => message.id));
    expect(known?.unconfirmed).toHaveLength(1);
    expect(JSON.stringify(defined(known?.unconfirmed[0]).content)).toBe(await storedAnswer(run.id));
  });

  it('is known exactly when its client left before the run ended: the run settled all the same', async () => {
    const { tenant, key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create({ messages: [{ role: 'user', content: 'first words' }] });
    const response = await gateway.request(`/v1/threads/${thread.id}/runs`, {
      key,
      body: { assistant_id: assistantId, stream: true },
    });
    const { text, reader } = await readUntil(response, 'event: thread.run.created');
    await reader.cancel();
    await gateway.tasks.drain(10_000);
    const run = defined(parseEventStream(text.slice(0, text.lastIndexOf('\n\n') + 2))[0]).data as { id: string };
    const known = knownNow(thread.id, tenant.workspace.id);
    expect(known?.messages).toHaveLength(2);
    expect(JSON.stringify(defined(known?.unconfirmed[0]).content)).toBe(await storedAnswer(run.id));
  });

  const otherEnds: [string, string, Record<string, unknown>][] = [
    ['waits for tool outputs, after some text', 'requires_action', { reply: 'Let me look.', tool_calls: 1 }],
    ['failed', 'failed', { status: 400 }],
    ['ended incomplete', 'incomplete', { finish_reason: 'length' }],
    ['completed with more than a known history holds', 'completed', { reply: 'word '.repeat(4_000) }],
  ];
  it.each(otherEnds)('is nothing when the run %s: the thread is not known', async (_, status, scenario) => {
    const { tenant, key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const thread = await openai.beta.threads.create({
      messages: [{ role: 'user', content: `first words\n${fakeDirective(scenario)}` }],
    });
    const { events } = await streamed(`/v1/threads/${thread.id}/runs`, key, { assistant_id: assistantId });
    expect(events.at(-2)?.event).toBe(`thread.run.${status}`);
    await gateway.tasks.drain(10_000);
    expect(knownNow(thread.id, tenant.workspace.id)).toBeNull();
  });

  it('is nothing when the run was cancelled', async () => {
    const { tenant, key, openai, assistantId } = await setup();
    await warm(openai, assistantId);
    const gate = freshGate('cancelled');
    const thread = await openai.beta.threads.create({
      messages: [{ role: 'user', content: `first words\n${fakeDirective({ hold: gate })}` }],
    });
    const response = await gateway.request(`/v1/threads/${thread.id}/runs`, {
      key,
      body: { assistant_id: assistantId, stream: true },
    });
    const { text, reader } = await readUntil(response, 'event: thread.run.in_progress');
    const run = defined(parseEventStream(text.slice(0, text.lastIndexOf('\n\n') + 2))[0]).data as { id: string };
    await waitFor(
      () => upstream.gateState(gate).waiting,
      (waiting) => waiting === 1,
    );
    const cancel = await gateway.request(`/v1/threads/${thread.id}/runs/${run.id}/cancel`, { key, body: {} });
    expect(cancel.status).toBe(200);
    upstream.openGate(gate);
    while (!(await reader.read()).done);
    await gateway.tasks.drain(10_000);
    expect((await openai.beta.threads.runs.retrieve(run.id, { thread_id: thread.id })).status).toBe('cancelled');
    expect(knownNow(thread.id, tenant.workspace.id)).toBeNull();
  });
});
