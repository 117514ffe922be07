import { exports } from 'cloudflare:workers';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { defined } from '../support/defined';
import { fakeProviderKey } from './gateway-client';
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
});
