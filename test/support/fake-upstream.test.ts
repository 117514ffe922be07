import { defined } from './defined';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI, {
  APIError,
  AuthenticationError,
  AzureOpenAI,
  BadRequestError,
  InternalServerError,
  NotFoundError,
  RateLimitError,
} from 'openai';
import type {
  ChatCompletionChunk,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  ARGUMENT_CHUNK_CHARS,
  FakeCutError,
  completionTokens,
  countTokens,
  createFakeUpstream,
  fakeDirective,
  promptTokens,
  startFakeUpstream,
  type FakeScenario,
  type FakeUpstreamServer,
} from './fake-upstream';
import { errorOf } from './envelope';
import { freshGate, remoteGate } from './gates';
import { waitFor } from './wait';

/**
 * The fake upstream is only useful if it behaves like the real API, so it is driven here with the
 * official OpenAI SDK, which is what decides whether a wire format is acceptable.
 */

const API_KEY = 'sk-test-fake-upstream-0123456789';
const MODEL = 'gpt-4o-mini';

const WEATHER_TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Current weather of a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer' },
      },
      required: ['city', 'unit'],
    },
  },
};
const TIME_TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_time',
    parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] },
  },
};

let fake: FakeUpstreamServer;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeUpstream({ apiKey: API_KEY });
  client = new OpenAI({ apiKey: API_KEY, baseURL: fake.baseURL, maxRetries: 0 });
});
afterAll(() => fake.close());
beforeEach(() => fake.reset());

function user(text: string, scenario?: FakeScenario | FakeScenario[]): ChatCompletionMessageParam {
  return { role: 'user', content: scenario ? `${text}\n${fakeDirective(scenario)}` : text };
}

/**
 * A whole answer, asked for as the gateway asks (streamed, with usage) and put back together by
 * the SDK.
 */
function complete(params: ChatCompletionCreateParamsNonStreaming, on: OpenAI = client) {
  return on.chat.completions
    .stream({ ...params, stream: true, stream_options: { include_usage: true } })
    .finalChatCompletion();
}

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of iterable) items.push(item);
  return items;
}

/** What reached the client before the body ended or failed, and how it failed. */
async function readRaw(response: Response): Promise<{ text: string; reads: number; error: unknown }> {
  const reader = defined(response.body).getReader();
  const decoder = new TextDecoder();
  let text = '';
  let reads = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text, reads, error: undefined };
      reads += 1;
      text += decoder.decode(value, { stream: true });
    }
  } catch (error) {
    return { text, reads, error };
  }
}

function post(
  body: unknown,
  headers: Record<string, string> = {},
  path = '/v1/chat/completions',
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(`${fake.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

function dataEvents(text: string): string[] {
  return text
    .split('\n\n')
    .filter((event) => event !== '')
    .map((event) => {
      expect(event.startsWith('data: ')).toBe(true);
      return event.slice('data: '.length);
    });
}

describe('token rules', () => {
  it('counts words, per-message overhead, and tool-call fragments', () => {
    expect(countTokens('  one two\nthree  ')).toBe(3);
    expect(countTokens('')).toBe(0);
    expect(
      promptTokens([
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Hello world' },
            { type: 'image_url', image_url: { url: 'x' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
        },
      ]),
    ).toBe(3 + 2 + 3 + 2 + 3 + 2);
    expect(completionTokens('a b c', [{ arguments: 'x'.repeat(ARGUMENT_CHUNK_CHARS * 2 + 1) }])).toBe(3 + 1 + 3);
  });
});

describe('answers', () => {
  it('have the real shape, the requested reply and deterministic usage', async () => {
    const messages: ChatCompletionMessageParam[] = [
      { role: 'system', content: 'You are terse.' },
      user('Greet me', { reply: 'Hello there, general Kenobi' }),
    ];
    const completion = await complete({ model: MODEL, messages });

    expect(completion.id).toMatch(/^chatcmpl-[A-Za-z0-9]{29}$/);
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe(MODEL);
    expect(Math.abs(completion.created - Date.now() / 1000)).toBeLessThan(5);
    expect(completion.system_fingerprint).toMatch(/^fp_/);
    expect(completion.choices).toEqual([
      {
        index: 0,
        // As the SDK puts a streamed answer back together (its `parsed` included).
        message: { role: 'assistant', content: 'Hello there, general Kenobi', refusal: null, parsed: null },
        logprobs: null,
        finish_reason: 'stop',
      },
    ]);
    expect(completion.usage).toMatchObject({
      prompt_tokens: promptTokens(messages),
      completion_tokens: 4,
      total_tokens: promptTokens(messages) + 4,
    });
    // system: 3 + "You are terse."; user: 3 + "Greet me" + `#fake {"reply":"Hello there, general Kenobi"}`
    expect(promptTokens(messages)).toBe(3 + 3 + (3 + 2 + 5));

    expect(fake.requests).toHaveLength(1);
    const [recorded] = fake.requests;
    expect(recorded).toMatchObject({
      method: 'POST',
      path: '/v1/chat/completions',
      stream: true,
      scenarioSource: 'directive',
      outcome: 'completed',
      body: { model: MODEL, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user' }] },
    });
    expect(defined(recorded).headers.authorization).toBe(`Bearer ${API_KEY}`);
    expect(defined(recorded).headers['content-type']).toBe('application/json');
    expect(Date.now() - defined(recorded).receivedAt).toBeLessThan(5000);
  });

  it('echo the last user message by default, and mention tool outputs being submitted', async () => {
    const plain = await complete({ model: MODEL, messages: [user('earlier'), user('What is the weather in Paris?')] });
    expect(defined(plain.choices[0]).message.content).toBe('You said: What is the weather in Paris?');
    expect(defined(fake.requests[0]).scenarioSource).toBe('builtin');

    // The directive of the first step must not be replayed once the tool outputs come back.
    const roundTrip = await complete({
      model: MODEL,
      tools: [WEATHER_TOOL],
      messages: [
        user('Weather?', { tool_calls: 1 }),
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temperature":21}' },
      ],
    });
    expect(defined(roundTrip.choices[0]).message).toMatchObject({ content: 'The tool returned: {"temperature":21}' });
    expect(defined(roundTrip.choices[0]).finish_reason).toBe('stop');
  });

  it('echo the messages they were sent, as JSON, with echo_messages', async () => {
    const messages: ChatCompletionMessageParam[] = [
      { role: 'system', content: 'You are terse.' },
      { role: 'assistant', content: 'Earlier  answer,\nwith lines.' },
      user('Now?', { echo_messages: true }),
    ];
    const echoed = await complete({ model: MODEL, messages });
    expect(JSON.parse(defined(defined(echoed.choices[0]).message.content))).toEqual(messages);
    const invalid = await complete({
      model: MODEL,
      messages: [{ role: 'user', content: 'Hi\n#fake {"echo_messages":"yes"}' }],
    }).catch((e: unknown) => e);
    expect(invalid).toMatchObject({
      status: 400,
      message: expect.stringContaining("invalid value for 'echo_messages'"),
    });
  });

  it('answer valid JSON in JSON mode', async () => {
    const object = await complete({
      model: MODEL,
      response_format: { type: 'json_object' },
      messages: [user('Reply in JSON')],
    });
    expect(JSON.parse(defined(defined(object.choices[0]).message.content))).toEqual({
      reply: 'You said: Reply in JSON',
    });

    const schema = await complete({
      model: MODEL,
      messages: [user('Give me a person')],
      response_format: {
        type: 'json_schema',
        json_schema: {
          name: 'person',
          strict: true,
          schema: {
            type: 'object',
            properties: {
              name: { type: 'string' },
              age: { type: 'integer', minimum: 18 },
              tags: { type: 'array', items: { type: 'string' } },
            },
            required: ['name', 'age', 'tags'],
            additionalProperties: false,
          },
        },
      },
    });
    expect(JSON.parse(defined(defined(schema.choices[0]).message.content))).toEqual({
      name: 'example',
      age: 18,
      tags: [],
    });
  });

  it('stop with length at max_completion_tokens, or when the scenario says so', async () => {
    const cut = await complete({
      model: MODEL,
      max_completion_tokens: 4,
      messages: [user('Count', { reply: 'one two three four five six' })],
    });
    expect(cut.choices[0]).toMatchObject({ message: { content: 'one two three four' }, finish_reason: 'length' });
    expect(defined(cut.usage).completion_tokens).toBe(4);

    const forced = await complete({ model: MODEL, messages: [user('Hi', { reply: 'Hi', finish_reason: 'length' })] });
    expect(forced.choices[0]).toMatchObject({ message: { content: 'Hi' }, finish_reason: 'length' });
  });
});

describe('streamed answers', () => {
  it('stream role, one word per chunk, finish, a usage chunk and [DONE]', async () => {
    const reply = 'The quick brown fox jumps';
    const messages = [user('Tell me', { reply })];
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = await collect(stream);

    expect(chunks).toHaveLength(1 + 5 + 1 + 1);
    for (const chunk of chunks) {
      expect(chunk).toMatchObject({
        id: defined(chunks[0]).id,
        object: 'chat.completion.chunk',
        model: MODEL,
        created: defined(chunks[0]).created,
      });
    }
    expect(defined(chunks[0]).choices).toEqual([
      { index: 0, delta: { role: 'assistant', content: '', refusal: null }, logprobs: null, finish_reason: null },
    ]);
    const words = chunks.slice(1, 6).map((c) => defined(c.choices[0]).delta.content);
    expect(words).toEqual(['The', ' quick', ' brown', ' fox', ' jumps']);
    expect(defined(chunks[6]).choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
    expect(chunks.slice(0, 7).every((c) => c.usage === null)).toBe(true);
    expect(defined(chunks[7]).choices).toEqual([]);
    expect(defined(chunks[7]).usage).toMatchObject({
      prompt_tokens: promptTokens(messages),
      completion_tokens: 5,
      total_tokens: promptTokens(messages) + 5,
    });
    expect(fake.requests[0]).toMatchObject({
      stream: true,
      body: { stream: true, stream_options: { include_usage: true } },
      outcome: 'completed',
    });
  });

  it('stream reasoning first, a word a chunk in the field asked for, counted as reasoning tokens; folded into the message unstreamed', async () => {
    const scenario: FakeScenario = { reasoning: 'Think it over', reply: 'Done' };
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [user('Tell me', scenario)],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = await collect(stream);
    const deltas = chunks.flatMap((chunk) => chunk.choices.map((choice) => choice.delta as Record<string, unknown>));
    expect(deltas.slice(1, 5)).toEqual([
      { reasoning_content: 'Think' },
      { reasoning_content: ' it' },
      { reasoning_content: ' over' },
      { content: 'Done' },
    ]);
    expect(chunks.at(-1)?.usage).toMatchObject({
      completion_tokens: 4,
      completion_tokens_details: { reasoning_tokens: 3 },
    });
    const whole = await post({
      model: MODEL,
      messages: [user('Tell me', { ...scenario, reasoning_field: 'reasoning' })],
    });
    const { choices } = (await whole.json()) as { choices: { message: unknown }[] };
    expect(defined(choices[0]).message).toMatchObject({ content: 'Done', reasoning: 'Think it over' });
  });

  it('is valid server-sent events ending in [DONE]', async () => {
    const response = await post({
      model: MODEL,
      stream: true,
      messages: [user('Hi', { reply: 'a b', chunk_tokens: 2 })],
    });
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const { text, error } = await readRaw(response);
    expect(error).toBeUndefined();
    const events = dataEvents(text);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as ChatCompletionChunk);
    expect(chunks.map((c) => c.choices[0]?.delta.content)).toEqual(['', 'a b', undefined]);
    expect(chunks.every((c) => !('usage' in c))).toBe(true);
  });

  it('writes each chunk as it is produced, not the whole body at the end', async () => {
    const started = Date.now();
    const response = await post({
      model: MODEL,
      stream: true,
      messages: [user('Hi', { reply: 'a b c d e', chunk_delay_ms: 40 })],
    });
    const reader = defined(response.body).getReader();
    await reader.read();
    const firstChunkAt = Date.now() - started;
    let reads = 1;
    while (!(await reader.read()).done) reads += 1;
    const doneAt = Date.now() - started;
    // 8 events (role, 5 words, finish, [DONE]) and a delay before each but the first: had the body
    // been assembled before sending, everything would arrive at once.
    expect(doneAt - firstChunkAt).toBeGreaterThanOrEqual(7 * 40 - 30);
    expect(reads).toBeGreaterThanOrEqual(5);
  });

  it('delays the headers by first_byte_delay_ms', async () => {
    const started = Date.now();
    const response = await post({ model: MODEL, stream: true, messages: [user('Hi', { first_byte_delay_ms: 200 })] });
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(response.status).toBe(200);
    await response.text();
  });

  it('cuts max_tokens answers short with length', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      max_tokens: 2,
      stream: true,
      messages: [user('Count', { reply: 'one two three four' })],
    });
    const chunks = await collect(stream);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('one two');
    expect(defined(defined(chunks.at(-1)).choices[0]).finish_reason).toBe('length');
  });
});

describe('gates', () => {
  it('hold an answer until the gate opens over HTTP, then let the later ones straight through', async () => {
    const name = freshGate();
    const gate = remoteGate(fake.baseURL, name);
    let answered = false;
    const held = post({ model: MODEL, stream: true, messages: [user('Hi', { reply: 'Held', hold: name })] }).then(
      (response) => {
        answered = true;
        return response;
      },
    );
    expect(await waitFor(gate.state, (state) => state.waiting === 1)).toEqual({
      name,
      open: false,
      waiting: 1,
      passed: 0,
    });
    expect(answered).toBe(false);
    expect(fake.inFlight).toBe(1);

    expect(await gate.open()).toEqual({ name, open: true, waiting: 0, passed: 1 });
    const response = await held;
    expect(response.status).toBe(200);
    expect(dataEvents(await response.text()).join('')).toContain('Held');
    // Open it stays: a request after the opening is answered at once.
    const later = await complete({ model: MODEL, messages: [user('Hi', { reply: 'Later', hold: name })] });
    expect(defined(later.choices[0]).message.content).toBe('Later');
    expect(fake.gateState(name)).toEqual({ name, open: true, waiting: 0, passed: 2 });
    // The control requests are not provider traffic.
    expect(fake.requests.map((request) => request.path)).toEqual(['/v1/chat/completions', '/v1/chat/completions']);
  });

  it('an opening before the request is not lost, and opens that gate alone', async () => {
    const [early, other] = [freshGate(), freshGate()];
    fake.openGate(early);
    expect(
      defined((await complete({ model: MODEL, messages: [user('Hi', { reply: 'Passed', hold: early })] })).choices[0])
        .message.content,
    ).toBe('Passed');
    const leave = new AbortController();
    const error = post(
      { model: MODEL, stream: true, messages: [user('Hi', { hold: other })] },
      {},
      undefined,
      leave.signal,
    ).catch((e: unknown) => e);
    expect(
      await waitFor(
        () => fake.gateState(other),
        (state) => state.waiting === 1,
      ),
    ).toMatchObject({ open: false, waiting: 1 });
    // A client that leaves while held: the exchange ends cancelled and the gate holds nothing.
    leave.abort();
    expect(await error).toMatchObject({ name: 'AbortError' });
    await fake.waitForIdle();
    expect(defined(fake.requests[1]).outcome).toBe('cancelled');
    expect(fake.gateState(other)).toEqual({ name: other, open: false, waiting: 0, passed: 0 });
  });

  it('refuses a gate name it could not serve, in a scenario and in a control request', async () => {
    const refused = await post({ model: MODEL, stream: true, messages: [user('Hi', { hold: 'a/b' })] });
    expect(refused.status).toBe(400);
    expect(await errorOf(refused)).toMatchObject({
      code: 'invalid_fake_directive',
      message: expect.stringContaining("'hold'"),
    });
    expect((await fetch(`${fake.url}/fake/gates/a%20b`)).status).toBe(400);
    expect((await fetch(`${fake.url}/fake/gates/ok/open`)).status).toBe(405);
    await expect(remoteGate(fake.url, 'a b').state()).rejects.toThrow(/answered 400/);
  });
});

describe('tool calls', () => {
  it('stream like OpenAI and reassemble with the SDK helper, in parallel', async () => {
    const calls = [
      { name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' } },
      { name: 'get_time', arguments: { zone: 'Europe/Paris' } },
    ];
    const raw: ChatCompletionChunk[] = [];
    const stream = client.chat.completions.stream({
      model: MODEL,
      tools: [WEATHER_TOOL, TIME_TOOL],
      tool_choice: 'auto',
      stream_options: { include_usage: true },
      messages: [user('Weather and time in Paris?', { tool_calls: calls })],
    });
    stream.on('chunk', (chunk) => raw.push(chunk));
    const final = await stream.finalChatCompletion();

    const message = defined(final.choices[0]).message;
    expect(defined(final.choices[0]).finish_reason).toBe('tool_calls');
    expect(message.content).toBeNull();
    expect(message.tool_calls).toHaveLength(2);
    defined(message.tool_calls).forEach((call, i) => {
      expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
      expect(call).toMatchObject({
        type: 'function',
        function: { name: defined(calls[i]).name, arguments: JSON.stringify(defined(calls[i]).arguments) },
      });
    });
    const args = calls.map((c) => ({ arguments: JSON.stringify(c.arguments) }));
    expect(defined(final.usage).completion_tokens).toBe(completionTokens('', args));

    // Each call opens with id, type, name and empty arguments; fragments carry only index and arguments.
    const deltas = raw.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
    expect(defined(defined(raw[0]).choices[0]).delta).toMatchObject({ role: 'assistant', content: null });
    for (const [index, call] of calls.entries()) {
      const [header, ...fragments] = deltas.filter((d) => d.index === index);
      expect(header).toEqual({
        index,
        id: defined(defined(message.tool_calls)[index]).id,
        type: 'function',
        function: { name: call.name, arguments: '' },
      });
      expect(fragments.length).toBe(Math.ceil(JSON.stringify(call.arguments).length / ARGUMENT_CHUNK_CHARS));
      expect(fragments.length).toBeGreaterThan(1);
      for (const fragment of fragments) expect(Object.keys(fragment).sort()).toEqual(['function', 'index']);
    }
    expect(defined(fake.requests[0]).body).toMatchObject({ tools: [WEATHER_TOOL, TIME_TOOL], tool_choice: 'auto' });
  });

  it('call the first function tool with schema-derived arguments when the directive names none', async () => {
    const completion = await complete({
      model: MODEL,
      tools: [WEATHER_TOOL, TIME_TOOL],
      messages: [user('Weather?', { tool_calls: true })],
    });
    const choice = defined(completion.choices[0]);
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = defined(defined(choice.message.tool_calls)[0]);
    expect(call.type === 'function' && call.function.name).toBe('get_weather');
    expect(call.type === 'function' && JSON.parse(call.function.arguments)).toEqual({
      city: 'example',
      unit: 'celsius',
    });
  });

  it('play a directive array one step per model turn', async () => {
    const directive = user('Weather in Paris?', [
      { tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' }, id: 'call_fixed' }] },
      { reply: 'It is 21 degrees in Paris.' },
    ]);
    const first = await complete({ model: MODEL, tools: [WEATHER_TOOL], messages: [directive] });
    const assistant = defined(first.choices[0]).message;
    expect(defined(defined(assistant.tool_calls)[0]).id).toBe('call_fixed');

    const second = await complete({
      model: MODEL,
      tools: [WEATHER_TOOL],
      messages: [directive, assistant, { role: 'tool', tool_call_id: 'call_fixed', content: '21' }],
    });
    expect(defined(second.choices[0]).message.content).toBe('It is 21 degrees in Paris.');
    expect(fake.requests.map((r) => r.scenarioSource)).toEqual(['directive', 'directive']);
  });

  it('search with the user’s message when given the gateway’s file_search function and no scenario, once a turn', async () => {
    const FILE_SEARCH = {
      type: 'function' as const,
      function: {
        name: 'file_search',
        parameters: { type: 'object', properties: { queries: { type: 'array', items: { type: 'string' } } } },
      },
    };
    const first = await complete({
      model: MODEL,
      tools: [WEATHER_TOOL, FILE_SEARCH],
      messages: [user('Are refunds accepted?')],
    });
    const call = defined(defined(defined(first.choices[0]).message.tool_calls)[0]);
    expect(call.type === 'function' && [call.function.name, JSON.parse(call.function.arguments)]).toEqual([
      'file_search',
      { queries: ['Are refunds accepted?'] },
    ]);
    // Its results back: the answer, no second search.
    const second = await complete({
      model: MODEL,
      tools: [FILE_SEARCH],
      messages: [
        user('Are refunds accepted?'),
        defined(first.choices[0]).message,
        { role: 'tool', tool_call_id: call.id, content: '【0†policy.txt】 Refunds are accepted.' },
      ],
    });
    expect(defined(second.choices[0]).message).toMatchObject({
      content: 'The tool returned: 【0†policy.txt】 Refunds are accepted.',
    });
    // Not with tool_choice none, nor when a scenario says what to answer.
    expect(
      defined(
        (await complete({ model: MODEL, tools: [FILE_SEARCH], tool_choice: 'none', messages: [user('Refunds?')] }))
          .choices[0],
      ).message.tool_calls,
    ).toBeUndefined();
    expect(
      defined(
        (await complete({ model: MODEL, tools: [FILE_SEARCH], messages: [user('Refunds?', { reply: 'No.' })] }))
          .choices[0],
      ).message,
    ).toMatchObject({ content: 'No.' });
    expect(
      defined((await complete({ model: MODEL, tools: [WEATHER_TOOL], messages: [user('Refunds?')] })).choices[0])
        .message.tool_calls,
    ).toBeUndefined();
  });

  it('refuse a nameless tool call when the request has no tools', async () => {
    const error = await complete({ model: MODEL, messages: [user('Hi', { tool_calls: 1 })] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BadRequestError);
    expect((error as BadRequestError).code).toBe('invalid_fake_directive');
  });
});

describe('errors', () => {
  it("a 500 surfaces as InternalServerError with OpenAI's body", async () => {
    const error = await complete({ model: MODEL, messages: [user('Hi', { status: 500 })] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InternalServerError);
    expect((error as APIError).status).toBe(500);
    expect((error as APIError).error).toEqual({
      message: 'The server had an error while processing your request. Sorry about that!',
      type: 'server_error',
      param: null,
      code: null,
    });
  });

  it('a 429 surfaces as RateLimitError with retry-after', async () => {
    const error = await complete({ model: MODEL, messages: [user('Hi', { status: 429, retry_after: 7 })] }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(RateLimitError);
    const rateLimit = error as RateLimitError;
    expect(rateLimit.headers?.get('retry-after')).toBe('7');
    expect(rateLimit.type).toBe('requests');
    expect(rateLimit.code).toBe('rate_limit_exceeded');
    expect(rateLimit.message).toContain(`Rate limit reached for ${MODEL}`);
  });

  it('other statuses and bodies are selectable, streamed requests included', async () => {
    fake.enqueue({ status: 404 }, { status: 503, error: { error: { message: 'custom', type: 'server_error' } } });
    const missing = await complete({ model: 'gpt-9', messages: [user('Hi')] }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NotFoundError);
    expect((missing as NotFoundError).code).toBe('model_not_found');
    expect((missing as NotFoundError).message).toContain('`gpt-9` does not exist');

    const overloaded = await client.chat.completions
      .create({ model: MODEL, stream: true, messages: [user('Hi')] })
      .catch((e: unknown) => e);
    expect((overloaded as APIError).status).toBe(503);
    expect((overloaded as APIError).message).toContain('custom');
  });

  it('the API key is checked, and the failure is recorded', async () => {
    const wrong = new OpenAI({ apiKey: 'sk-wrong-key-abcdefghijkl', baseURL: fake.baseURL, maxRetries: 0 });
    const error = await complete({ model: MODEL, messages: [user('Hi')] }, wrong).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuthenticationError);
    const auth = error as AuthenticationError;
    expect(auth.status).toBe(401);
    expect(auth.error).toMatchObject({ type: 'invalid_request_error', param: null, code: 'invalid_api_key' });
    expect(auth.message).toContain('Incorrect API key provided: sk-');
    expect(auth.message).not.toContain('sk-wrong-key-abcdefghijkl');
    expect(defined(fake.requests[0]).headers.authorization).toBe('Bearer sk-wrong-key-abcdefghijkl');

    const none = await post({ model: MODEL, messages: [user('Hi')] }, { authorization: '' });
    expect(none.status).toBe(401);
    expect(((await none.json()) as { error: { message: string } }).error.message).toMatch(
      /^You didn't provide an API key/,
    );
  });

  it('answers a request that is not streamed with one chat.completion, as the stream would add up to', async () => {
    const messages = [user('Hi there')];
    const completion = await client.chat.completions.create({ model: MODEL, messages });
    expect(completion).toMatchObject({
      object: 'chat.completion',
      model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: 'You said: Hi there' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: promptTokens(messages), completion_tokens: 4, total_tokens: promptTokens(messages) + 4 },
    });
    const tools = [{ type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object' } } }];
    const called = await client.chat.completions.create({
      model: MODEL,
      messages: [user('Call it', { tool_calls: [{ name: 'lookup', arguments: { q: 'a long enough query' } }] })],
      tools,
    });
    expect(called.choices[0]).toMatchObject({
      message: {
        content: null,
        tool_calls: [{ type: 'function', function: { name: 'lookup', arguments: '{"q":"a long enough query"}' } }],
      },
      finish_reason: 'tool_calls',
    });
  });

  it("bad JSON, missing fields and unknown paths get OpenAI's 400 and 404", async () => {
    const badJson = await post('{"model":');
    expect(badJson.status).toBe(400);
    expect(await badJson.json()).toMatchObject({
      error: {
        message: expect.stringMatching(/^We could not parse the JSON body/),
        type: 'invalid_request_error',
        param: null,
        code: null,
      },
    });

    const noMessages = await post({ model: MODEL });
    expect(noMessages.status).toBe(400);
    expect(await noMessages.json()).toMatchObject({ error: { param: 'messages', code: 'missing_required_parameter' } });

    const unknown = await post({}, {}, '/v1/responses');
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ error: { message: 'Invalid URL (POST /v1/responses)' } });
  });

  it('refuses what OpenAI refuses: tool_choice without tools, unanswered and orphan tool messages', async () => {
    const refusal = (params: ChatCompletionCreateParamsNonStreaming) =>
      complete(params).then(
        () => expect.unreachable('accepted'),
        (e: unknown) => e as BadRequestError,
      );
    const call = (id: string) => ({
      id,
      type: 'function' as const,
      function: { name: 'get_weather', arguments: '{}' },
    });

    const noTools = await refusal({ model: MODEL, tool_choice: 'auto', messages: [user('Hi')] });
    expect(noTools).toBeInstanceOf(BadRequestError);
    expect(noTools.param).toBe('tool_choice');

    const unanswered = await refusal({
      model: MODEL,
      tools: [WEATHER_TOOL],
      messages: [
        user('Hi'),
        { role: 'assistant', content: null, tool_calls: [call('call_a'), call('call_b')] },
        { role: 'tool', tool_call_id: 'call_a', content: 'sunny' },
      ],
    });
    expect(unanswered.param).toBe('messages.[1].role');
    expect(unanswered.message).toContain('did not have response messages: call_b');

    const orphan = await refusal({
      model: MODEL,
      messages: [user('Hi'), { role: 'tool', tool_call_id: 'call_x', content: 'sunny' }],
    });
    expect(orphan.param).toBe('messages.[1].role');
    expect(orphan.message).toContain("must be a response to a preceeding message with 'tool_calls'");
  });

  it('a directive with a typo is refused instead of ignored', async () => {
    const error = await complete({ model: MODEL, messages: [{ role: 'user', content: '#fake {"replay":"x"}' }] }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(BadRequestError);
    expect((error as BadRequestError).message).toContain("unknown scenario field 'replay'");
  });
});

describe('scenario selection', () => {
  it('directive first (without consuming the queue), then the FIFO queue, then the default, then the built-in reply', async () => {
    fake.enqueue({ reply: 'first' }, { reply: 'second' });
    const ask = async (message: ChatCompletionMessageParam) =>
      defined((await complete({ model: MODEL, messages: [message] })).choices[0]).message.content;

    expect(await ask(user('Hi', { reply: 'from the directive' }))).toBe('from the directive');
    expect(await ask(user('Hi'))).toBe('first');
    expect(await ask(user('Hi'))).toBe('second');
    expect(await ask(user('Hi there'))).toBe('You said: Hi there');
    fake.setDefault({ reply: 'the default' });
    expect(await ask(user('Hi'))).toBe('the default');
    expect(fake.requests.map((r) => r.scenarioSource)).toEqual(['directive', 'queue', 'queue', 'builtin', 'default']);
  });

  it('reads the directive from content parts of the last user message only', async () => {
    const completion = await complete({
      model: MODEL,
      messages: [
        user('old', { reply: 'stale' }),
        { role: 'assistant', content: 'ok' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look:' },
            { type: 'text', text: fakeDirective({ reply: 'from parts' }) },
          ],
        },
      ],
    });
    expect(defined(completion.choices[0]).message.content).toBe('from parts');
  });

  it('lets the SDK retry through a queued 429', async () => {
    fake.enqueue({ status: 429, retry_after: 0.01 });
    const retrying = new OpenAI({ apiKey: API_KEY, baseURL: fake.baseURL, maxRetries: 1 });
    const completion = await complete({ model: MODEL, messages: [user('Hi')] }, retrying);
    expect(defined(completion.choices[0]).message.content).toBe('You said: Hi');
    expect(fake.requests).toHaveLength(2);
    expect(defined(fake.requests[1]).headers['x-stainless-retry-count']).toBe('1');
  });
});

describe('faults mid-stream', () => {
  it('a cut drops the connection: the SDK iteration rejects after N chunks, without [DONE]', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      stream: true,
      messages: [user('Hi', { reply: 'a b c d e f', cut_after_chunks: 3 })],
    });
    const received: ChatCompletionChunk[] = [];
    const error = await (async () => {
      for await (const chunk of stream) received.push(chunk);
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect(received.map((c) => defined(c.choices[0]).delta.content)).toEqual(['', 'a', ' b']);
    await fake.waitForIdle();
    expect(defined(fake.requests[0]).outcome).toBe('cut');

    // What a plain fetch() client sees: the body errors with undici's "terminated".
    const raw = await readRaw(
      await post({ model: MODEL, stream: true, messages: [user('Hi', { cut_after_chunks: 2 })] }),
    );
    expect(raw.error).toBeInstanceOf(TypeError);
    expect((raw.error as TypeError).message).toBe('terminated');
    expect(dataEvents(raw.text)).toHaveLength(2);
  });

  it('a stall holds the stream open until the client gives up, then nothing stays in flight', async () => {
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: MODEL, stream: true, messages: [user('Hi', { reply: 'a b c d', stall_after_chunks: 2 })] },
      { signal: controller.signal },
    );
    const received: ChatCompletionChunk[] = [];
    let whileStalled: { inFlight: number; outcome: string } | undefined;
    const started = Date.now();
    for await (const chunk of stream) {
      received.push(chunk);
      if (received.length === 2) {
        setTimeout(() => {
          whileStalled = { inFlight: fake.inFlight, outcome: defined(fake.requests[0]).outcome };
          controller.abort();
        }, 150);
      }
    }
    // The SDK ends an aborted iteration quietly; the loop only got here through the abort.
    expect(whileStalled).toEqual({ inFlight: 1, outcome: 'open' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(received).toHaveLength(2);
    await fake.waitForIdle();
    expect(fake.inFlight).toBe(0);
    expect(defined(fake.requests[0]).outcome).toBe('cancelled');
  });

  it('stall_after_done sends the whole answer and [DONE], then holds the body open until the client leaves', async () => {
    const controller = new AbortController();
    const response = await post(
      { model: MODEL, stream: true, messages: [user('Hi', { reply: 'a b', stall_after_done: true })] },
      {},
      undefined,
      controller.signal,
    );
    const reader = defined(response.body).getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!text.endsWith('data: [DONE]\n\n')) {
      const { done, value } = await reader.read();
      expect(done).toBe(false);
      text += decoder.decode(value, { stream: true });
    }
    expect(dataEvents(text).at(-1)).toBe('[DONE]');
    expect(defined(fake.requests[0]).outcome).toBe('open');
    expect(fake.inFlight).toBe(1);
    controller.abort();
    await fake.waitForIdle();
    expect(defined(fake.requests[0]).outcome).toBe('cancelled');
  });

  it('close() does not wait for stalled streams', async () => {
    const other = await startFakeUpstream();
    const response = await fetch(`${other.baseURL}/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: MODEL, stream: true, messages: [user('Hi', { stall_after_chunks: 1 })] }),
    });
    const reading = readRaw(response);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(other.inFlight).toBe(1);
    expect(other.openConnections).toBe(1);
    const started = Date.now();
    await other.close();
    expect(Date.now() - started).toBeLessThan(1000);
    const { text, error } = await reading;
    expect(dataEvents(text)).toHaveLength(1);
    expect(error).toBeInstanceOf(TypeError);
    expect(other.inFlight).toBe(0);
    expect(other.openConnections).toBe(0);
    expect(defined(other.requests[0]).outcome).toBe('closed');
  });

  it('a client leaving during the first-byte delay is not left in flight', async () => {
    const error = await post(
      { model: MODEL, stream: true, messages: [user('Hi', { first_byte_delay_ms: 5000 })] },
      {},
      undefined,
      AbortSignal.timeout(100),
    ).catch((e: unknown) => e);
    expect((error as Error).name).toBe('TimeoutError');
    await fake.waitForIdle();
    expect(defined(fake.requests[0]).outcome).toBe('cancelled');
  });

  it('a malformed chunk breaks the SDK iteration; the stream goes on behind it', async () => {
    const quiet = new OpenAI({ apiKey: API_KEY, baseURL: fake.baseURL, maxRetries: 0, logLevel: 'off' });
    const stream = await quiet.chat.completions.create({
      model: MODEL,
      stream: true,
      messages: [user('Hi', { malformed_after_chunks: 1 })],
    });
    await expect(collect(stream)).rejects.toBeInstanceOf(SyntaxError);

    const raw = await readRaw(
      await post({ model: MODEL, stream: true, messages: [user('Hi', { reply: 'x', malformed_after_chunks: 1 })] }),
    );
    const events = dataEvents(raw.text);
    expect(events[1]).toBe('{not json');
    expect(events.at(-1)).toBe('[DONE]');
    expect(events).toHaveLength(1 + 1 + 1 + 1 + 1); // role, malformed, "x", finish, [DONE]
  });

  it('an error event mid-stream surfaces as an APIError', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      stream: true,
      messages: [user('Hi', { error_after_chunks: 2 })],
    });
    const error = await collect(stream).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).message).toContain('The server had an error');
  });
});

describe('Azure OpenAI', () => {
  const azure = (apiKey = API_KEY) =>
    new AzureOpenAI({ endpoint: fake.url, apiKey, apiVersion: '2024-10-21', deployment: 'my-gpt-4o', maxRetries: 0 });

  it('serves the deployment path with the api-key header, streamed behind a prompt-filter chunk', async () => {
    const completion = await complete({ model: 'gpt-4o', messages: [user('Hi', { reply: 'Hello Azure' })] }, azure());
    expect(defined(completion.choices[0]).message.content).toBe('Hello Azure');
    expect(completion).toHaveProperty('prompt_filter_results');
    expect(fake.requests[0]).toMatchObject({
      path: '/openai/deployments/my-gpt-4o/chat/completions',
      query: { 'api-version': '2024-10-21' },
    });
    expect(defined(fake.requests[0]).headers['api-key']).toBe(API_KEY);

    const stream = await azure().chat.completions.create({
      model: 'gpt-4o',
      stream: true,
      stream_options: { include_usage: true },
      messages: [user('Hi', { reply: 'Hello Azure' })],
    });
    const chunks = await collect(stream);
    expect(defined(chunks[0]).choices).toEqual([]);
    expect(chunks[0]).toHaveProperty('prompt_filter_results');
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello Azure');
    expect(defined(defined(chunks.at(-1)).usage).completion_tokens).toBe(2);
  });

  it("refuses a wrong api-key with Azure's 401 and a missing api-version with 404", async () => {
    const error = await complete({ model: 'gpt-4o', messages: [user('Hi')] }, azure('wrong')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuthenticationError);
    expect((error as AuthenticationError).error).toMatchObject({
      code: '401',
      message: expect.stringContaining('Access denied'),
    });

    const noVersion = await post(
      { messages: [user('Hi')] },
      { 'api-key': API_KEY },
      '/openai/deployments/my-gpt-4o/chat/completions',
    );
    expect(noVersion.status).toBe(404);
  });
});

describe('large answers', () => {
  it('streams 1 MB in many chunks with matching usage', async () => {
    const bytes = 1024 * 1024;
    const stream = await client.chat.completions.create({
      model: MODEL,
      stream: true,
      stream_options: { include_usage: true },
      messages: [user('Everything', { stream_bytes: bytes })],
    });
    let length = 0;
    let contentChunks = 0;
    let words = 0;
    let usage: ChatCompletionChunk['usage'];
    for await (const chunk of stream) {
      const content = chunk.choices[0]?.delta.content;
      if (content) {
        contentChunks += 1;
        length += content.length;
        words += countTokens(content);
      }
      usage = chunk.usage ?? usage;
    }
    expect(length).toBe(bytes);
    expect(contentChunks).toBe(1024);
    expect(words).toBeGreaterThan(100_000);
    expect(defined(usage).completion_tokens).toBe(words);
  });
});

describe('hostile answers', () => {
  const streamed = (scenario: FakeScenario) =>
    post({ model: MODEL, stream: true, messages: [user('Hi', scenario)], tools: [WEATHER_TOOL] });

  it('sends any tool-call index given, or none', async () => {
    for (const index of [4294967294, -1, 1.5, 'abc', '__proto__']) {
      const events = dataEvents((await readRaw(await streamed({ tool_calls: 1, tool_call_index: index }))).text).slice(
        0,
        -1,
      );
      const indices = events
        .flatMap((data) => JSON.parse(data).choices[0]?.delta.tool_calls ?? [])
        .map((call: { index?: unknown }) => call.index);
      expect(indices.length).toBeGreaterThan(1);
      expect(new Set(indices)).toEqual(new Set([index]));
    }
    const events = dataEvents((await readRaw(await streamed({ tool_calls: 1, tool_call_index: null }))).text).slice(
      0,
      -1,
    );
    const calls = events.flatMap((data) => JSON.parse(data).choices[0]?.delta.tool_calls ?? []);
    expect(calls.length).toBeGreaterThan(1);
    expect(calls.every((call: object) => !('index' in call))).toBe(true);
  });

  it('generates tool-call arguments of tool_argument_bytes, in argument_chunk_chars fragments', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      stream: true,
      messages: [user('Hi', { tool_calls: 1, tool_argument_bytes: 100_000, argument_chunk_chars: 1000 })],
      tools: [WEATHER_TOOL],
    });
    let fragments = 0;
    let length = 0;
    for await (const chunk of stream) {
      const args = chunk.choices[0]?.delta.tool_calls?.[0]?.function?.arguments;
      if (args) {
        fragments += 1;
        length += args.length;
      }
    }
    expect({ fragments, length }).toEqual({ fragments: 100, length: 100_000 });
  });

  it('floods the event stream before the answer, flood_bytes of it', async () => {
    const { text } = await readRaw(
      await streamed({ flood: ': ping\n\n', flood_bytes: 80_000, chunk_bytes: 8_000, reply: 'after' }),
    );
    expect(text.startsWith(': ping\n\n'.repeat(10_000))).toBe(true);
    const answer = dataEvents(text.slice(80_000))
      .slice(0, -1)
      .map((data) => JSON.parse(data).choices[0]?.delta.content ?? '');
    expect(answer.join('')).toBe('after');
  });

  it('floods for ever without flood_bytes, until the client leaves', async () => {
    const leave = new AbortController();
    const response = await post(
      { model: MODEL, stream: true, messages: [user('Hi', { flood: ': ping\n\n', chunk_delay_ms: 1 })] },
      {},
      undefined,
      leave.signal,
    );
    const reader = defined(response.body).getReader();
    // Each read holds whole pings: one, or more when the machine is busy and writes coalesce.
    for (let pings = 0; pings < 20;) {
      const text = new TextDecoder().decode((await reader.read()).value);
      expect(text).toMatch(/^(: ping\n\n)+$/);
      pings += text.length / ': ping\n\n'.length;
    }
    leave.abort();
    await fake.waitForIdle();
    expect(defined(fake.requests[0]).outcome).toBe('cancelled');
  });

  it('answers an error with a gzip body that inflates to gzip_error_bytes', async () => {
    const response = await post({
      model: MODEL,
      stream: true,
      messages: [user('Hi', { status: 503, gzip_error_bytes: 10_000_000 })],
    });
    expect(response.status).toBe(503);
    expect(response.headers.get('content-encoding')).toBe('gzip');
    expect(Number(response.headers.get('content-length'))).toBeLessThan(100_000);
    const body = await response.text();
    expect(body.length).toBe(10_000_000);
    expect(body.startsWith('{"error":{"message":"aaaa')).toBe(true);
  });

  it('sends usage numbers as given, of any type', async () => {
    const text = (
      await readRaw(
        await post({
          model: MODEL,
          stream: true,
          stream_options: { include_usage: true },
          messages: [user('Hi', { reply: 'x', usage: { total_tokens: -1e9, prompt_tokens: '01e4' } })],
        }),
      )
    ).text;
    const usage = JSON.parse(defined(dataEvents(text).at(-2))).usage;
    expect(usage).toMatchObject({ prompt_tokens: '01e4', total_tokens: -1e9 });
  });
});

describe('turn bounds (issue 34)', () => {
  it('generates file_search arguments of tool_argument_queries, in argument_chunk_chars fragments', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      stream: true,
      messages: [
        user('Hi', {
          tool_calls: [{ name: 'file_search' }],
          tool_argument_queries: { count: 3, bytes: 5000 },
          argument_chunk_chars: 1000,
        }),
      ],
      tools: [
        {
          type: 'function',
          function: { name: 'file_search', parameters: { type: 'object', properties: { queries: { type: 'array' } } } },
        },
      ],
    });
    let args = '';
    for await (const chunk of stream) args += chunk.choices[0]?.delta.tool_calls?.[0]?.function?.arguments ?? '';
    const { queries } = JSON.parse(args) as { queries: string[] };
    expect(queries.map((query) => query.length)).toEqual([5000, 5000, 5000]);
    expect(queries[0]).toMatch(/^lorem ipsum/);
  });

  it('reads a body at the rate a /slow-read/<bytes per second>/ path says, then answers', async () => {
    const body = JSON.stringify({
      model: MODEL,
      stream: true,
      messages: [user(`Hi ${'x'.repeat(60_000)}`, { reply: 'read' })],
    });
    const started = performance.now();
    const response = await post(body, {}, '/slow-read/200000/v1/chat/completions');
    const { text } = await readRaw(response);
    // The fake sleeps a chunk's share of the second after reading it: no faster than the rate.
    expect(performance.now() - started).toBeGreaterThanOrEqual((body.length * 1000) / 200_000 - 5);
    expect(
      dataEvents(text)
        .slice(0, -1)
        .map((data) => JSON.parse(data).choices[0]?.delta.content ?? '')
        .join(''),
    ).toBe('read');
    expect(defined(fake.requests.at(-1)).path).toBe('/v1/chat/completions');
  });

  it('neither reads nor answers a body sent to /unread/, until the client leaves', async () => {
    const leave = new AbortController();
    const unread = post(
      { model: MODEL, stream: true, messages: [user('Hi', { reply: 'never' })] },
      {},
      '/unread/v1/chat/completions',
      leave.signal,
    );
    let settled = false;
    void unread.then(
      () => (settled = true),
      () => (settled = true),
    );
    // Sent after it, answered before it: the fake never looked at the first request.
    const after = await complete({ model: MODEL, messages: [user('Hi', { reply: 'after' })] });
    expect(defined(after.choices[0]).message.content).toBe('after');
    expect(settled).toBe(false);
    expect(fake.requests.map((request) => request.path)).toEqual(['/v1/chat/completions']);
    // Its connection is held until the client leaves (the kept-alive one of the request after it
    // may close meanwhile too, when the client's pool lets it go).
    const held = fake.openConnections;
    expect(held).toBeGreaterThanOrEqual(1);
    leave.abort();
    await expect(unread).rejects.toThrow();
    expect(
      await waitFor(
        () => fake.openConnections,
        (open) => open < held,
        5000,
      ),
    ).toBeLessThan(held);
  });
});

describe('in-process and as a script', () => {
  it('answers through fetch() without a socket, with the same faults', async () => {
    const local = createFakeUpstream({ defaultScenario: { reply: 'in process' } });
    const request = (scenario?: FakeScenario) =>
      new Request('http://fake.invalid/v1/chat/completions', {
        method: 'POST',
        body: JSON.stringify({ model: MODEL, stream: true, messages: [user('Hi', scenario)] }),
      });

    const chunks = dataEvents(await (await local.fetch(request())).text())
      .slice(0, -1)
      .map((data) => JSON.parse(data) as ChatCompletionChunk);
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('')).toBe('in process');
    expect(local.inFlight).toBe(0);

    const streamed = await local.fetch(request({ reply: 'a b c' }));
    expect(local.inFlight).toBe(1);
    expect(dataEvents(await streamed.text()).at(-1)).toBe('[DONE]');
    expect(local.inFlight).toBe(0);

    const cut = await readRaw(await local.fetch(request({ cut_after_chunks: 1 })));
    expect(cut.error).toBeInstanceOf(FakeCutError);
    expect(dataEvents(cut.text)).toHaveLength(1);
    expect(local.inFlight).toBe(0);

    const stalled = readRaw(await local.fetch(request({ stall_after_chunks: 0 })));
    expect(local.inFlight).toBe(1);
    local.abortAll();
    expect((await stalled).error).toBeInstanceOf(Error);
    expect(local.inFlight).toBe(0);
    expect(local.requests.map((r) => r.outcome)).toEqual(['completed', 'completed', 'cut', 'closed']);
  });

  it('keeps no request with record: false (as a script), and still counts those in flight', async () => {
    const local = createFakeUpstream({ record: false, defaultScenario: { reply: 'not kept' } });
    const request = (scenario?: FakeScenario) =>
      new Request('http://fake.invalid/v1/chat/completions', {
        method: 'POST',
        body: JSON.stringify({ model: MODEL, stream: true, messages: [user('Hi', scenario)] }),
      });
    expect(dataEvents(await (await local.fetch(request())).text()).at(-1)).toBe('[DONE]');
    const stalled = readRaw(await local.fetch(request({ stall_after_chunks: 0 })));
    expect(local.inFlight).toBe(1);
    local.abortAll();
    await stalled;
    expect(local.inFlight).toBe(0);
    expect(local.requests).toEqual([]);
  });

  it('runs as a script that prints its URL', async () => {
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/support/fake-upstream.ts', '--port', '0', '--api-key', 'k1'],
      {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk;
          if (out.includes('\n')) resolve(out.trim());
        });
        child.once('exit', (code) => reject(new Error(`exited with ${code}`)));
      });
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const script = new OpenAI({ apiKey: 'k1', baseURL: `${url}/v1`, maxRetries: 0 });
      const completion = await complete({ model: MODEL, messages: [user('Hi', { reply: 'from the script' })] }, script);
      expect(defined(completion.choices[0]).message.content).toBe('from the script');
    } finally {
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  });
});
