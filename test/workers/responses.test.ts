import { createClient } from '@libsql/client/web';
import { exports } from 'cloudflare:workers';
import { eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/libsql/web';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import * as schema from '../../src/db/schema';
import { defined } from '../support/defined';
import { fakeProviderKey } from './gateway-client';
import { freshGate, remoteGate, whileRemoteDatabaseHeld } from '../support/gates';
import { parseEventStream } from '../support/sse';
import { waitFor } from '../support/wait';

/**
 * The Responses API inside workerd, as on Cloudflare, through the official SDK configured by base
 * URL and key alone (the workspace's default virtual key is the fake provider, in Node: what it
 * was sent comes back only as its answer, the `echo_messages` scenario of
 * test/support/fake-upstream.ts). Each response is a run, executed in its RunExecutor object.
 */

const API_KEY = inject('workersTenant').responsesWorkspaceKey;

let openai: OpenAI;

/** Text that makes the fake answer as `scenario` says (one per model turn when a list). */
const ask = (text: string, scenario: Record<string, unknown> | Record<string, unknown>[]) =>
  `${text}\n#fake ${JSON.stringify(scenario)}`;

beforeAll(async () => {
  await fakeProviderKey(API_KEY, 'fake', { default: true });
  openai = new OpenAI({
    baseURL: 'http://gateway/v1',
    apiKey: API_KEY,
    maxRetries: 0,
    fetch: (url, init) => exports.default.fetch(url, init),
  });
});

describe('responses on workerd', () => {
  it('responses.create answers a response whole, with its usage', async () => {
    const response = await openai.responses.create({
      model: 'fake-model',
      input: ask('Say hello', { reply: 'Hello there, friend.' }),
    });
    expect(response).toMatchObject({ object: 'response', status: 'completed', model: 'fake-model' });
    expect(response.id).toMatch(/^resp_/);
    expect(response.output_text).toBe('Hello there, friend.');
    expect(response.usage?.output_tokens).toBe(3);
  });

  it('responses.stream: its handlers see the deltas of the text, finalResponse() is completed, and retrieve answers the same', async () => {
    const stream = openai.responses.stream({
      model: 'fake-model',
      input: ask('Count', { reply: 'one two three four' }),
    });
    const deltas: string[] = [];
    const events: string[] = [];
    stream.on('response.output_text.delta', (event) => deltas.push(event.delta));
    stream.on('event', (event) => events.push(event.type));
    let doneText = '';
    stream.on('response.output_text.done', (event) => (doneText = event.text));
    let completed: unknown;
    stream.on('response.completed', (event) => (completed = event.response));
    const final = await stream.finalResponse();
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join('')).toBe('one two three four');
    expect(doneText).toBe('one two three four');
    expect(events.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
    expect(events.at(-1)).toBe('response.completed');
    expect(final.status).toBe('completed');
    expect(final.output_text).toBe('one two three four');
    expect(final.usage).toMatchObject({ output_tokens: 4, total_tokens: expect.any(Number) });
    expect(defined(final.usage).input_tokens).toBeGreaterThan(0);

    // What was streamed, as the stream's last event carried it, is what the response reads back
    // as (but for the fields the SDK adds: `output_text` to what it reads, `parsed` to finalResponse()).
    const { output_text: text, ...retrieved } = await openai.responses.retrieve(final.id);
    expect(retrieved).toEqual(completed);
    expect(text).toBe(final.output_text);
  });

  it('a function tool round trip through previous_response_id', async () => {
    const tools = [
      {
        type: 'function' as const,
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        strict: false,
      },
    ];
    const first = await openai.responses.create({
      model: 'fake-model',
      input: ask('Weather in Oslo?', [
        { tool_calls: [{ name: 'get_weather', arguments: { city: 'Oslo' } }] },
        { echo_messages: true },
      ]),
      tools,
    });
    expect(first.status).toBe('completed');
    const call = first.output.find((item) => item.type === 'function_call');
    if (call?.type !== 'function_call') throw new Error(`no function call in ${JSON.stringify(first.output)}`);
    expect(call).toMatchObject({ name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' });

    const second = await openai.responses.create({
      model: 'fake-model',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
      tools,
    });
    expect(second).toMatchObject({ status: 'completed', previous_response_id: first.id });
    // The provider was sent the call and its output after the question.
    const sent: { role: string; content: unknown; tool_call_id?: string }[] = JSON.parse(second.output_text);
    expect(sent.slice(-2)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: call.call_id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: call.call_id, content: '{"temp":21}' },
    ]);
  });

  it('a streamed function call, its arguments in their events, then its output streamed on through previous_response_id', async () => {
    const tools = [
      {
        type: 'function' as const,
        name: 'lookup',
        parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
        strict: false,
      },
    ];
    const first = openai.responses.stream({
      model: 'fake-model',
      input: ask('Look it up', [
        { tool_calls: [{ name: 'lookup', arguments: { q: 'tides' } }] },
        { reply: 'High at noon.' },
      ]),
      tools,
    });
    const argumentDeltas: string[] = [];
    first.on('response.function_call_arguments.delta', (event) => argumentDeltas.push(event.delta));
    let argumentsDone = '';
    first.on('response.function_call_arguments.done', (event) => (argumentsDone = event.arguments));
    const asked = await first.finalResponse();
    expect(asked.status).toBe('completed');
    const [call] = asked.output;
    if (call?.type !== 'function_call') throw new Error(`no function call in ${JSON.stringify(asked.output)}`);
    expect(argumentDeltas.join('')).toBe('{"q":"tides"}');
    expect(argumentsDone).toBe('{"q":"tides"}');
    expect(call).toMatchObject({ name: 'lookup', arguments: '{"q":"tides"}' });

    const second = openai.responses.stream({
      model: 'fake-model',
      previous_response_id: asked.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'noon' }],
      tools,
    });
    const text: string[] = [];
    second.on('response.output_text.delta', (event) => text.push(event.delta));
    const answered = await second.finalResponse();
    expect(answered).toMatchObject({ status: 'completed', previous_response_id: asked.id });
    expect(text.join('')).toBe('High at noon.');
    // The output is the second response's input, under the call's id.
    const items = (await openai.responses.inputItems.list(answered.id)).data;
    expect(items).toEqual([
      expect.objectContaining({ type: 'function_call_output', call_id: call.call_id, output: 'noon' }),
    ]);
  });

  it('a streamed response with store: false leaves nothing of its run once its stream has ended', async () => {
    const stream = openai.responses.stream({
      model: 'fake-model',
      store: false,
      input: ask('Forget this', { reply: 'Forgotten.' }),
    });
    const final = await stream.finalResponse();
    expect(final).toMatchObject({ status: 'completed', output_text: 'Forgotten.' });
    await expect(openai.responses.retrieve(final.id)).rejects.toMatchObject({ status: 404 });
    // Its rows go after the stream's end, kept alive by the request's waitUntil.
    const db = drizzle(createClient({ url: inject('sqldUrl') }), { schema });
    const gone = await waitFor(
      () => db.select({ id: schema.runs.id }).from(schema.runs).where(eq(schema.runs.id, final.id)),
      (rows) => rows.length === 0,
    );
    expect(gone).toEqual([]);
    const [row] = await db.select().from(schema.responses).where(eq(schema.responses.id, final.id));
    expect(row).toMatchObject({ stored: false, input: [], options: {} });
  });

  it('a background response, polled to its end', async () => {
    const started = await openai.responses.create({
      model: 'fake-model',
      background: true,
      input: ask('Later', { reply: 'Later, then.' }),
    });
    expect(started.background).toBe(true);
    expect(['queued', 'in_progress']).toContain(started.status);
    const done = await waitFor(
      () => openai.responses.retrieve(started.id),
      (response) => response.status === 'completed',
    );
    expect(done.output_text).toBe('Later, then.');
    expect(done.usage?.output_tokens).toBe(2);
    // Its stream, told again from what it stored, resumed after the third event.
    const events = async (startingAfter?: number) => {
      const stream = await openai.responses.retrieve(started.id, {
        stream: true,
        ...(startingAfter === undefined ? {} : { starting_after: startingAfter }),
      });
      const seen = [];
      for await (const event of stream) seen.push(event);
      return seen;
    };
    const whole = await events();
    expect(whole.at(-1)?.type).toBe('response.completed');
    expect(await events(2)).toEqual(whole.slice(3));
  });

  it('goes on in a thread made with beta.threads.create, which beta.threads.messages.list then shows', async () => {
    const thread = await openai.beta.threads.create({ messages: [{ role: 'user', content: 'My name is Ada.' }] });
    const question = ask('What is my name?', { echo_messages: true });
    const response = await openai.responses.create({ model: 'fake-model', conversation: thread.id, input: question });
    expect(response).toMatchObject({ status: 'completed', conversation: { id: thread.id } });
    // The provider was sent the thread's message, then the response's input.
    expect(JSON.parse(response.output_text)).toEqual([
      { role: 'user', content: 'My name is Ada.' },
      { role: 'user', content: question },
    ]);
    const messages = (await openai.beta.threads.messages.list(thread.id, { order: 'asc' })).data;
    expect(messages.map((message) => [message.role, message.run_id])).toEqual([
      ['user', null],
      ['user', null],
      ['assistant', response.id],
    ]);
    const [answer] = defined(messages[2]).content;
    expect(answer?.type === 'text' && answer.text.value).toBe(response.output_text);
  });

  it('a response on a prompt changed elsewhere since the isolate kept it is answered from the prompt as it is, once', async () => {
    const assistant = await openai.beta.assistants.create({ model: 'fake-model', instructions: 'Old instructions.' });
    /** A streamed response on the prompt: the events' names, and the messages the provider was sent. */
    const echoed = async () => {
      const stream = openai.responses.stream({
        model: 'fake-model',
        prompt: { id: assistant.id },
        input: ask('Who are you?', { echo_messages: true }),
      });
      const events: string[] = [];
      stream.on('event', (event) => events.push(event.type));
      const final = await stream.finalResponse();
      return { events, final, sent: JSON.parse(final.output_text) as { role: string; content: string }[] };
    };
    // The first after the assistant was made here reads the settings; the next starts on those kept
    // (its provider called beside its write: resources/responses/commands.ts, responseInOneTrip).
    for (let i = 0; i < 2; i++) {
      expect((await echoed()).sent[0]).toEqual({ role: 'system', content: 'Old instructions.' });
    }
    const db = drizzle(createClient({ url: inject('sqldUrl') }), { schema });
    await db
      .update(schema.assistants)
      .set({ instructions: 'New instructions.' })
      .where(eq(schema.assistants.id, assistant.id));
    // The guess's write is refused by the settings' guard: the answer is the one made from what is read.
    const changed = await echoed();
    expect(changed.sent[0]).toEqual({ role: 'system', content: 'New instructions.' });
    expect(changed.events.filter((name) => name === 'response.created')).toHaveLength(1);
    expect(changed.events.at(-1)).toBe('response.completed');
    // Its run, and the two before: the refused guess wrote nothing.
    const runs = await db
      .select({ id: schema.runs.id })
      .from(schema.runs)
      .where(eq(schema.runs.assistantId, assistant.id));
    expect(runs.map((run) => run.id).sort()).toContain(changed.final.id);
    expect(runs).toHaveLength(3);
  });
});

describe('a response on a previous response or in a conversation, its history handed back here (StreamOptions.answered)', () => {
  const FIRST = ask('My name is Ada.', { reply: 'Hello Ada.' });
  const headers = { 'x-gateway-api-key': API_KEY, 'content-type': 'application/json' };
  const post = (path: string, body: unknown) =>
    exports.default.fetch(`http://gateway/v1${path}`, { method: 'POST', headers, body: JSON.stringify(body) });

  /** A streamed response's answer (its deltas joined) and its events' names. */
  async function streamedResponse(response: Response) {
    expect(response.status).toBe(200);
    const events = parseEventStream(await response.text());
    const text = events
      .filter((event) => event.event === 'response.output_text.delta')
      .map((event) => (event.data as { delta: string }).delta)
      .join('');
    return { text, names: events.map((event) => event.event) };
  }

  /** The settings' generation as the database has it (db/settings-cache.ts). */
  const settingsGeneration = async () =>
    (await createClient({ url: inject('sqldUrl') }).execute('SELECT value FROM settings_generation WHERE id = 0'))
      .rows[0]?.value;

  /**
   * A streamed response (`context`: what it goes on from) made while the database holds requests
   * naming `heldOn`: the provider must be called before the write goes through. Answers what the
   * provider was sent, and how many times it was called. `generation` is the settings' generation
   * read before the test's first request: the isolate starts the guess on the generation it last
   * read (SettingsCache.provisional), which a change made by another file just before this call
   * would leave behind unseen by a read taken here. `given`: its gate and body when they are not a
   * question that holds at a fresh gate (the gate named in what it goes on from, and its input).
   */
  async function heldResponse(
    context: Record<string, string>,
    heldOn: string,
    generation: unknown,
    given?: { gate: ReturnType<typeof remoteGate>; body: Record<string, unknown> },
  ) {
    const gate = given?.gate ?? remoteGate(inject('upstreamUrl'), freshGate('response-chain'));
    const body = given?.body ?? { input: ask('What is my name?', { echo_messages: true, hold: gate.name }) };
    const { answer } = await whileRemoteDatabaseHeld(
      inject('databaseProxyUrl'),
      heldOn,
      gate,
      () => post('/responses', { model: 'fake-model', stream: true, ...body, ...context }),
      async () => (await settingsGeneration()) !== generation,
    );
    await gate.open();
    const { text, names } = await streamedResponse(await answer);
    expect(names.at(-1)).toBe('response.completed');
    // Called once, unless another file changed the settings meanwhile (they share the database),
    // which fails the settings' guard: the response is then made again from what is read.
    // A change made after the write committed refuses nothing: then once or twice.
    const calls = (await settingsGeneration()) === generation ? [1] : [1, 2];
    const state = await gate.state();
    expect(state.waiting).toBe(0);
    expect(calls).toContain(state.passed);
    return JSON.parse(text) as { role: string; content: string }[];
  }

  it('calls the provider beside the write on a previous response answered whole, once, the prompt the whole chain', async () => {
    const generation = await settingsGeneration();
    // Answered once it ended (RunHost.execute): its executor hands its answer back over RPC all the same.
    const first = await openai.responses.create({ model: 'fake-model', input: FIRST });
    expect(first.output_text).toBe('Hello Ada.');
    const sent = await heldResponse({ previous_response_id: first.id }, first.id, generation);
    expect(sent.slice(0, 2)).toEqual([
      { role: 'user', content: FIRST },
      { role: 'assistant', content: 'Hello Ada.' },
    ]);
    expect(sent).toHaveLength(3);
  });

  it('calls the provider beside the write on the output of a function call a response handed back, once, the call and its output in the prompt', async () => {
    const generation = await settingsGeneration();
    const gate = remoteGate(inject('upstreamUrl'), freshGate('response-call'));
    const tools = [
      { type: 'function' as const, name: 'get_weather', strict: false, parameters: { type: 'object', properties: {} } },
    ];
    // Its second model turn (the output given) echoes its prompt, held at the gate.
    const question = ask('Weather?', [
      { tool_calls: [{ name: 'get_weather', arguments: {}, id: 'call_w' }] },
      { echo_messages: true, hold: gate.name },
    ]);
    const first = await openai.responses.create({ model: 'fake-model', tools, input: question });
    expect(first.output).toMatchObject([{ type: 'function_call', call_id: 'call_w' }]);
    const output = { type: 'function_call_output', call_id: 'call_w', output: 'sunny' };
    const sent = await heldResponse({ previous_response_id: first.id }, first.id, generation, {
      gate,
      body: { tools, input: [output] },
    });
    expect(sent).toMatchObject([
      { role: 'user', content: question },
      { role: 'assistant', tool_calls: [{ id: 'call_w' }] },
      { role: 'tool', tool_call_id: 'call_w', content: 'sunny' },
    ]);
    expect(sent).toHaveLength(3);
  });

  it('calls the provider beside the write in a conversation made here, once, the prompt the whole conversation', async () => {
    const generation = await settingsGeneration();
    const conversation = await openai.conversations.create({
      items: [{ type: 'message', role: 'user', content: 'From the start.' }],
    });
    const first = await streamedResponse(
      await post('/responses', { model: 'fake-model', stream: true, input: FIRST, conversation: conversation.id }),
    );
    expect(first.text).toBe('Hello Ada.');
    const sent = await heldResponse({ conversation: conversation.id }, conversation.id, generation);
    expect(sent.slice(0, 3)).toEqual([
      { role: 'user', content: 'From the start.' },
      { role: 'user', content: FIRST },
      { role: 'assistant', content: 'Hello Ada.' },
    ]);
    expect(sent).toHaveLength(4);
  });

  it('reads a chain the isolate does not know (a background response) with its write, and hands the answer back: the turn after it is called beside its write', async () => {
    const generation = await settingsGeneration();
    // Answered queued: its answer is not handed back, so the isolate does not know its chain.
    const first = await openai.responses.create({ model: 'fake-model', background: true, input: FIRST });
    await waitFor(
      () => openai.responses.retrieve(first.id),
      (response) => response.status === 'completed',
    );
    const question = ask('Who?', { echo_messages: true });
    const second = await openai.responses.create({
      model: 'fake-model',
      input: question,
      previous_response_id: first.id,
    });
    expect(JSON.parse(second.output_text)).toEqual([
      { role: 'user', content: FIRST },
      { role: 'assistant', content: 'Hello Ada.' },
      { role: 'user', content: question },
    ]);
    const sent = await heldResponse({ previous_response_id: second.id }, second.id, generation);
    expect(sent.slice(0, 4)).toEqual([
      { role: 'user', content: FIRST },
      { role: 'assistant', content: 'Hello Ada.' },
      { role: 'user', content: question },
      { role: 'assistant', content: second.output_text },
    ]);
    expect(sent).toHaveLength(5);
  });

  it('answers 404 for a previous response deleted behind the isolate, and the prompt as read for a conversation changed behind it', async () => {
    const db = drizzle(createClient({ url: inject('sqldUrl') }), { schema });
    const previous = await openai.responses.create({ model: 'fake-model', input: FIRST });
    await db.delete(schema.responses).where(eq(schema.responses.id, previous.id));
    const refused = await post('/responses', {
      model: 'fake-model',
      input: 'And now?',
      previous_response_id: previous.id,
      stream: true,
    });
    expect(refused.status).toBe(404);
    expect(await refused.json()).toMatchObject({
      error: { code: 'response_not_found', param: 'previous_response_id' },
    });

    const conversation = await openai.conversations.create({});
    await openai.responses.create({ model: 'fake-model', input: FIRST, conversation: conversation.id });
    await createClient({ url: inject('sqldUrl') }).execute({
      sql: `INSERT INTO messages (id, thread_id, workspace_id, created_at, role, content, status, attachments, metadata)
            SELECT ?, id, workspace_id, ?, 'user', ?, 'completed', '[]', '{}' FROM threads WHERE id = ?`,
      args: [
        `msg_elsewhere${crypto.randomUUID().replaceAll('-', '')}`,
        Date.now(),
        JSON.stringify([{ type: 'text', text: { value: 'Added elsewhere.', annotations: [] } }]),
        conversation.id,
      ],
    });
    const question = ask('Who?', { echo_messages: true });
    const { text, names } = await streamedResponse(
      await post('/responses', { model: 'fake-model', stream: true, input: question, conversation: conversation.id }),
    );
    expect(names.filter((name) => name === 'response.created')).toHaveLength(1);
    expect(JSON.parse(text)).toEqual([
      { role: 'user', content: FIRST },
      { role: 'assistant', content: 'Hello Ada.' },
      { role: 'user', content: 'Added elsewhere.' },
      { role: 'user', content: question },
    ]);
  });
});
