import { defined } from '../../support/defined';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readEvents } from '../../support/events';
import {
  fakeDirective,
  startFakeUpstream,
  type FakeScenario,
  type FakeUpstreamServer,
} from '../../support/fake-upstream';
import { createTestGateway, json, type Tenant, type TestGateway } from '../../support/gateway';
import { startFakeUpstreamProcess, type FakeUpstreamProcess } from '../../support/processes';

/**
 * An upstream under a tenant's control, answering what no provider would: the cheap cases, in
 * process (test/reliability/hostile.test.ts runs the expensive ones against a gateway process and
 * measures its memory and responsiveness). Each behaviour must end the run in its documented
 * state, say why in last_error or incomplete_details, and leave only bounded rows behind.
 */

const CAP = 65_536;
const IDLE_MS = 300;
/** A provider key not shaped like an API key (so only the literal redaction can catch it), as Azure's are. */
const KEY = 'a3f96c0e5b2d47e18c9a0f3b6d2e7c41';

let gateway: TestGateway;
let fake: FakeUpstreamServer;
let tenant: Tenant;
let virtualKey: string;
let assistantId: string;

/** A gateway with a tenant, a virtual key to the fake and an assistant with a tool: where a run goes. */
interface Target {
  gateway: TestGateway;
  tenant: Tenant;
  virtualKey: string;
  assistantId: string;
}

/**
 * The same, idle for up to GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS's default: what a flood without
 * progress (blank lines, empty events) must get through, on a machine that may be short of CPU,
 * without the few hundred milliseconds the idle-timeout tests need.
 */
let patient: Target;

async function target(env: Record<string, string>): Promise<Target> {
  const gateway = await createTestGateway({
    env: { GATEWAY_MAX_ANSWER_BYTES: String(CAP), GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: '5000', ...env },
  });
  const tenant = await gateway.tenant();
  const virtualKey = await gateway.virtualKey(tenant, { base_url: fake.baseURL, api_key: KEY });
  const assistant = await json(
    await gateway.request('/v1/assistants', {
      key: tenant.workspaceKey,
      body: {
        model: 'fake-model',
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
      },
    }),
  );
  return { gateway, tenant, virtualKey, assistantId: assistant.id };
}

beforeAll(async () => {
  fake = await startFakeUpstream();
  ({ gateway, tenant, virtualKey, assistantId } = await target({
    GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS: String(IDLE_MS),
  }));
  patient = await target({});
});
afterAll(async () => {
  await gateway.close();
  await patient.gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());

interface Ended {
  run: any;
  /** The run's assistant message, if it has one. */
  message: any;
  steps: { type: string; status: string; lastError: any; stepDetails: string }[];
  /** The streamed events' names, when streamed. */
  events: string[];
  /** Bytes the run left in its rows: run, its messages, its steps. */
  storedBytes: number;
}

/** Creates a run whose upstream answers `scenario`, and waits for its end. */
async function runToEnd(
  scenario: FakeScenario,
  options: { stream?: boolean; virtualKey?: string; content?: string; on?: Target } = {},
): Promise<Ended> {
  const { gateway, tenant, assistantId, virtualKey } = options.on ?? main();
  const response = await gateway.request('/v1/threads/runs', {
    key: tenant.workspaceKey,
    headers: { 'x-gateway-virtual-key': options.virtualKey ?? virtualKey },
    body: {
      assistant_id: assistantId,
      stream: options.stream ?? false,
      thread: { messages: [{ role: 'user', content: options.content ?? `Go\n${fakeDirective(scenario)}` }] },
    },
  });
  expect(response.status).toBe(200);
  let created: { id: string; thread_id: string };
  const events: string[] = [];
  if (options.stream) {
    const text = await response.text();
    for (const block of text.split('\n\n').filter(Boolean))
      events.push(defined(defined(/^event: (.*)$/m.exec(block))[1]));
    created = JSON.parse(defined(defined(/^event: thread\.run\.created\ndata: (.*)$/m.exec(text))[1]));
  } else {
    created = await json(response);
  }
  const read = async () =>
    json(await gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}`, { key: tenant.workspaceKey }));
  let run = await read();
  for (
    const deadline = Date.now() + 20_000;
    ['queued', 'in_progress', 'cancelling'].includes(run.status) && Date.now() < deadline;
  ) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    run = await read();
  }
  const client = gateway.database.client;
  const readRows = async () => ({
    messages: await json(
      await gateway.request(`/v1/threads/${created.thread_id}/messages?run_id=${created.id}`, {
        key: tenant.workspaceKey,
      }),
    ),
    steps: (
      await client.execute({
        sql: 'SELECT type, status, last_error, step_details FROM run_steps WHERE run_id = ? ORDER BY seq',
        args: [run.id],
      })
    ).rows.map((row) => ({
      type: String(row[0]),
      status: String(row[1]),
      lastError: row[2] ? JSON.parse(String(row[2])) : null,
      stepDetails: String(row[3]),
    })),
  });
  // A run's row can end before its step and message do (a settle that fails writes the run alone
  // first, then closes them one by one): read them once they have. (A run waiting for tool outputs
  // keeps its tool-calls step open.)
  let { messages, steps } = await readRows();
  const open = () =>
    run.status !== 'requires_action' &&
    (steps.some((step) => step.status === 'in_progress') ||
      messages.data.some((message: { status: string }) => message.status === 'in_progress'));
  for (const deadline = Date.now() + 5_000; open() && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    ({ messages, steps } = await readRows());
  }
  const sizes = await client.execute({
    sql: `SELECT (SELECT coalesce(length(required_action), 0) + coalesce(length(last_error), 0) + coalesce(length(usage), 0) FROM runs WHERE id = ?1)
            + (SELECT coalesce(sum(length(content)), 0) FROM messages WHERE run_id = ?1)
            + (SELECT coalesce(sum(length(step_details) + coalesce(length(last_error), 0)), 0) FROM run_steps WHERE run_id = ?1)`,
    args: [run.id],
  });
  return { run, message: messages.data[0], steps, events, storedBytes: Number(defined(sizes.rows[0])[0]) };
}

/** The gateway with the short idle timeout, which most tests use. */
const main = (): Target => ({ gateway, tenant, virtualKey, assistantId });

/** The log lines about a run, parsed. */
function logsOf(runId: string): { level: string; message: string; [field: string]: unknown }[] {
  return gateway.logs.map((line) => JSON.parse(line)).filter((line) => line.run_id === runId);
}

/** Resolves once the fake's exchanges have all ended; answers how the last one did. */
async function lastExchange(): Promise<string | undefined> {
  for (const deadline = Date.now() + 5000; fake.inFlight > 0 && Date.now() < deadline;)
    await new Promise((resolve) => setTimeout(resolve, 10));
  return fake.requests.at(-1)?.outcome;
}

describe('tool-call indices', () => {
  it.each([
    [4294967294, '4294967294'],
    [-1, '-1'],
    [1.5, '1.5'],
    [128, '128'],
    ['abc', '"abc"'],
    ['__proto__', '"__proto__"'],
    ['length', '"length"'],
    [true, 'true'],
    [{}, '{}'],
  ])('index %j fails the run at once with a protocol error naming it', async (index, shown) => {
    for (const stream of [false, true]) {
      const ended = await runToEnd({ tool_calls: 1, tool_call_index: index }, { stream });
      expect(ended.run).toMatchObject({
        status: 'failed',
        required_action: null,
        last_error: {
          code: 'server_error',
          message: `The upstream sent a tool call with index ${shown}; tool-call indices must be integers from 0 to 127.`,
        },
      });
      // Refused with its first fragment: no step was opened for it.
      expect(ended.steps).toEqual([]);
      expect(ended.storedBytes).toBeLessThan(2048);
      if (stream) expect(ended.events.slice(-2)).toEqual(['thread.run.failed', 'done']);
    }
  });

  it('128 calls (indices 0 to 127) are taken; a 129th fails the run', async () => {
    const taken = await runToEnd({ tool_calls: 128, argument_chunk_chars: 64 });
    expect(taken.run.status).toBe('requires_action');
    expect(taken.run.required_action.submit_tool_outputs.tool_calls).toHaveLength(128);
    const refused = await runToEnd({ tool_calls: 129, argument_chunk_chars: 64 });
    expect(refused.run).toMatchObject({
      status: 'failed',
      last_error: { message: expect.stringContaining('index 128;') },
    });
  });

  it('without indices: one call is taken; an id-less fragment while several calls are open fails the run', async () => {
    const one = await runToEnd({
      tool_calls: [{ name: 'lookup', arguments: { city: 'Paris' } }],
      tool_call_index: null,
    });
    expect(one.run.status).toBe('requires_action');
    expect(one.run.required_action.submit_tool_outputs.tool_calls).toEqual([
      { id: expect.any(String), type: 'function', function: { name: 'lookup', arguments: '{"city":"Paris"}' } },
    ]);
    const several = await runToEnd({ tool_calls: 2, tool_call_index: null });
    expect(several.run).toMatchObject({
      status: 'failed',
      last_error: {
        message:
          'The upstream sent a tool-call fragment with neither an index nor an id while several tool calls were open.',
      },
    });
  });

  it("a hostile run does not disturb another tenant's run at the same time", async () => {
    const [hostile, healthy] = await Promise.all([
      runToEnd({ tool_calls: 1, tool_call_index: 4294967294, first_byte_delay_ms: 20 }),
      runToEnd({ reply: 'all is well', chunk_delay_ms: 5 }),
    ]);
    expect(hostile.run.status).toBe('failed');
    expect(healthy.run.status).toBe('completed');
    expect(healthy.message.content[0].text.value).toBe('all is well');
  });
});

describe('the answer cap (GATEWAY_MAX_ANSWER_BYTES)', () => {
  it.each([false, true])(
    'a longer answer (streamed: %s) is kept up to the cap, the upstream dropped, the run incomplete',
    async (stream) => {
      // Far more than the buffers between the fake and the gateway hold, so that reading it all would show.
      const ended = await runToEnd({ stream_bytes: 1000 * CAP, chunk_bytes: 1000 }, { stream });
      expect(ended.run).toMatchObject({
        status: 'incomplete',
        incomplete_details: { reason: 'max_completion_tokens' },
        last_error: null,
        usage: { completion_tokens: CAP / 4 },
      });
      expect(ended.message).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_tokens' } });
      const text: string = ended.message.content[0].text.value;
      expect(text.length).toBe(CAP);
      expect(text.startsWith('lorem ipsum dolor')).toBe(true);
      expect(ended.storedBytes).toBeLessThan(CAP + 4096);
      // The upstream was not read to its end: the gateway dropped the connection.
      expect(await lastExchange()).toBe('cancelled');
      expect(logsOf(ended.run.id)).toContainEqual(
        expect.objectContaining({
          level: 'warn',
          message: 'the upstream answer reached the answer cap and was cut',
          cap_bytes: CAP,
        }),
      );
      if (stream)
        expect(ended.events.slice(-4)).toEqual([
          'thread.message.incomplete',
          'thread.run.step.completed',
          'thread.run.incomplete',
          'done',
        ]);
    },
  );

  it('counts UTF-8 bytes and never keeps half a character', async () => {
    // 'é' is 2 bytes, '€' 3: an odd cap falls inside a character.
    const reply = Array.from({ length: CAP / 2 }, (_, i) => (i % 2 ? 'é€' : 'a')).join(' ');
    const ended = await runToEnd({ reply, chunk_tokens: 500 });
    expect(ended.run.status).toBe('incomplete');
    const text: string = ended.message.content[0].text.value;
    expect(reply.startsWith(text)).toBe(true);
    const bytes = new TextEncoder().encode(text).length;
    expect(bytes).toBeLessThanOrEqual(CAP);
    expect(bytes).toBeGreaterThan(CAP - 4);
  });

  it('an answer of exactly the cap completes', async () => {
    const ended = await runToEnd({ stream_bytes: CAP, chunk_bytes: 4096 });
    expect(ended.run.status).toBe('completed');
    expect(ended.message.content[0].text.value.length).toBe(CAP);
  });

  it('tool-call arguments count too: the step fails saying so, nothing waits for outputs, nothing large is stored', async () => {
    const ended = await runToEnd({ tool_calls: 2, tool_argument_bytes: 1000 * CAP, argument_chunk_chars: 1000 });
    expect(ended.run).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_completion_tokens' },
      required_action: null,
    });
    const toolStep = defined(ended.steps.find((step) => step.type === 'tool_calls'));
    expect(toolStep).toMatchObject({
      status: 'failed',
      lastError: {
        code: 'server_error',
        message: `The answer reached the gateway's limit of ${CAP} bytes (GATEWAY_MAX_ANSWER_BYTES), which cut the tool calls short.`,
      },
    });
    expect(ended.storedBytes).toBeLessThan(4096);
    expect(await lastExchange()).toBe('cancelled');
  });

  it('text and tool-call names and arguments share the cap', async () => {
    const ended = await runToEnd({
      reply: 'word '.repeat(CAP / 8),
      chunk_tokens: 100,
      tool_calls: 1,
      tool_argument_bytes: CAP,
      argument_chunk_chars: 1000,
    });
    expect(ended.run.status).toBe('incomplete');
    expect(ended.message.content[0].text.value.length).toBe((5 * CAP) / 8);
  });
});

describe('error bodies', () => {
  it('a gzip body inflating to 64 MB is read up to 8 KiB and quoted up to 500 characters', async () => {
    const ended = await runToEnd({ status: 500, gzip_error_bytes: 64_000_000 });
    const message: string = ended.run.last_error.message;
    expect(ended.run.status).toBe('failed');
    expect(message).toBe(`The upstream answered HTTP 500: ${'{"error":{"message":"'}${'a'.repeat(500 - 21)}`);
  });
});

describe('the provider key in what the upstream sends back', () => {
  // Every position of the key around the 500-character cut: wholly before it, across it at every
  // character, and wholly after it.
  const offsets = Array.from({ length: KEY.length + 6 }, (_, i) => 500 - KEY.length - 3 + i);

  function expectNoKeyPart(message: string) {
    for (let length = 4; length <= KEY.length; length++) expect(message).not.toContain(KEY.slice(0, length));
    expect(message.length).toBeLessThanOrEqual(600);
  }

  it('in an error body, at every cut position', async () => {
    for (const offset of offsets) {
      const text = `${'.'.repeat(offset)}${KEY} rest`;
      const ended = await runToEnd({ status: 401, error: { error: { message: text } } });
      const message: string = ended.run.last_error.message;
      expectNoKeyPart(message);
      // Redacted before the cut: the whole key became the marker, which may be cut in turn.
      if (offset <= 500 - '[redacted]'.length) expect(message).toContain('[redacted]');
    }
  });

  it('a part of the key that the upstream echoes, left at the end of the cut text, is removed too', async () => {
    for (let length = 4; length < KEY.length; length++) {
      const text = `${'.'.repeat(500 - length)}${KEY.slice(0, length)}-and-more`;
      const ended = await runToEnd({ status: 401, error: { error: { message: text } } });
      expect(ended.run.last_error.message).toBe(
        `The upstream refused the virtual key's provider API key: HTTP 401: ${'.'.repeat(500 - length)}[redacted]`,
      );
    }
  });

  it('in a mid-stream error chunk, at every cut position', async () => {
    for (const offset of offsets) {
      const text = `${'.'.repeat(offset)}${KEY} rest`;
      const ended = await runToEnd(
        { reply: 'a b c', error_after_chunks: 2, stream_error: { error: { message: text } } },
        { stream: offset % 2 === 0 },
      );
      const message: string = ended.run.last_error.message;
      expect(message.startsWith('The upstream reported an error mid-stream: ...')).toBe(true);
      expectNoKeyPart(message);
    }
  });

  it('a key shorter than 8 characters (`none`) is not a secret: words containing it are left alone', async () => {
    const local = await gateway.virtualKey(tenant, { base_url: fake.baseURL, api_key: 'none' });
    const text = 'Nevertheless, the model gpt-5-nonexistent does not exist; none was found.';
    const ended = await runToEnd({ status: 404, error: { error: { message: text } } }, { virtualKey: local });
    expect(ended.run.last_error.message).toBe(
      `The upstream has no model "fake-model" (or no Chat Completions at the virtual key's base_url): HTTP 404: ${text}`,
    );
  });
});

describe('event-stream framing', () => {
  it('a line longer than 1 MiB fails the run', async () => {
    const ended = await runToEnd({ flood: 'x', flood_bytes: 2 * 1024 * 1024, chunk_bytes: 65_536 }, { on: patient });
    expect(ended.run).toMatchObject({
      status: 'failed',
      last_error: { message: 'The upstream sent a server-sent event line longer than 1048576 bytes.' },
    });
  });

  it('an event larger than 1 MiB (many data lines, no blank line) fails the run', async () => {
    const ended = await runToEnd({
      flood: `data: ${'y'.repeat(1000)}\n`,
      flood_bytes: 2 * 1024 * 1024,
      chunk_bytes: 65_536,
    });
    expect(ended.run).toMatchObject({
      status: 'failed',
      last_error: { message: 'The upstream sent a server-sent event larger than 1048576 characters.' },
    });
  });

  it('1 MiB of blank lines, then the answer: completed', async () => {
    const ended = await runToEnd(
      { flood: '\n', flood_bytes: 1024 * 1024, chunk_bytes: 65_536, reply: 'still here' },
      { on: patient },
    );
    expect(ended.run.status).toBe('completed');
    expect(ended.message.content[0].text.value).toBe('still here');
  });

  it('a flood of tiny events, then the answer: completed', async () => {
    const event = 'data: {"choices":[]}\n\n';
    const ended = await runToEnd(
      {
        flood: event,
        flood_bytes: event.length * Math.floor(2 ** 20 / event.length),
        chunk_bytes: 65_536,
        reply: 'still here',
      },
      { on: patient },
    );
    expect(ended.run.status).toBe('completed');
    expect(ended.message.content[0].text.value).toBe('still here');
  });

  it('comments only (`: ping`) are not activity: the run fails as silent after the idle timeout', async () => {
    const ended = await runToEnd({ flood: ': ping\n\n', chunk_delay_ms: IDLE_MS / 6 }, { stream: true });
    expect(ended.run).toMatchObject({
      status: 'failed',
      last_error: {
        code: 'server_error',
        message: `The upstream went silent for longer than allowed within ${IDLE_MS} ms.`,
      },
    });
    expect(await lastExchange()).toBe('cancelled');
  });

  it('a large event still arriving is activity: a slow 64 KB data line completes', async () => {
    const line = `data: {"choices":[{"index":0,"delta":{"content":"${'z'.repeat(60_000)}"}}]}\n\n`;
    const ended = await runToEnd({
      flood: line,
      flood_bytes: line.length,
      chunk_bytes: 4096,
      chunk_delay_ms: IDLE_MS / 6,
      reply: '.',
    });
    expect(ended.run.status).toBe('completed');
    expect(ended.message.content[0].text.value).toBe(`${'z'.repeat(60_000)}.`);
  });
});

describe("the idle timeout counts the upstream's silence, not a stall of the gateway", () => {
  let upstream: FakeUpstreamProcess;
  beforeAll(async () => {
    // A process of its own: it keeps sending while this process's event loop is held.
    upstream = await startFakeUpstreamProcess();
  });
  afterAll(() => upstream.stop());

  it('an event loop held past the idle timeout while the upstream kept sending: the run completes', async () => {
    const slug = await gateway.virtualKey(tenant, { base_url: upstream.baseURL, api_key: KEY });
    const scenario: FakeScenario = { reply: 'one two three four five', chunk_delay_ms: IDLE_MS / 3 };
    const response = await gateway.request('/v1/threads/runs', {
      key: tenant.workspaceKey,
      headers: { 'x-gateway-virtual-key': slug },
      body: {
        assistant_id: assistantId,
        stream: true,
        thread: { messages: [{ role: 'user', content: `Go\n${fakeDirective(scenario)}` }] },
      },
    });
    let held = false;
    const events = await readEvents(response, ({ event }) => {
      if (held || event !== 'thread.message.delta') return;
      held = true;
      // Once the run waits for the upstream's next chunk, the whole event loop is held for three
      // idle timeouts (a long turn, a machine short of CPU): the chunks sent meanwhile wait in the
      // socket, and the idle timer is overdue when the loop comes back. Held from the check phase:
      // the next turn's timers run before its I/O (from a timer's callback it would not show: Node
      // runs no timer that fell due during one in the same phase).
      setImmediate(() => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3 * IDLE_MS));
    });
    expect(held).toBe(true);
    // The run as its last event left it.
    const run = events.filter(({ data }) => data?.object === 'thread.run').at(-1)?.data;
    expect(run).toMatchObject({ status: 'completed', last_error: null });
    const messages = await json(
      await gateway.request(`/v1/threads/${run.thread_id}/messages?run_id=${run.id}`, { key: tenant.workspaceKey }),
    );
    expect(messages.data[0].content[0].text.value).toBe('one two three four five');
  });
});

describe('usage numbers', () => {
  it.each([
    [{ total_tokens: -1e9 }, 'total_tokens'],
    [{ total_tokens: 1 }, 'total_tokens'],
    [{ total_tokens: '01e400' }, 'total_tokens'],
    [{ prompt_tokens: '01e4' }, 'prompt_tokens'],
    [{ prompt_tokens: -1 }, 'prompt_tokens'],
    [{ prompt_tokens: 2 ** 53 }, 'prompt_tokens'],
    [{ completion_tokens: 1.5 }, 'completion_tokens'],
    [{ completion_tokens: {} }, 'completion_tokens'],
  ])('%j: the usage is counted from the streamed answer, and the anomaly logged', async (usage, field) => {
    const reply = 'twelve characters of answer';
    const ended = await runToEnd({ reply, usage });
    expect(ended.run.status).toBe('completed');
    const { prompt_tokens, completion_tokens, total_tokens } = ended.run.usage;
    for (const value of [prompt_tokens, completion_tokens, total_tokens])
      expect(Number.isSafeInteger(value) && value >= 0).toBe(true);
    expect(completion_tokens).toBe(Math.ceil(reply.length / 4));
    expect(prompt_tokens).toBeGreaterThan(0);
    expect(total_tokens).toBe(prompt_tokens + completion_tokens);
    const warnings = logsOf(ended.run.id).filter((line) => line.level === 'warn');
    expect(warnings).toEqual([
      expect.objectContaining({
        message: 'the upstream reported invalid usage; counting it from the streamed answer',
        field,
      }),
    ]);
  });

  it('a total above the sum of its parts is taken as reported', async () => {
    const ended = await runToEnd({ reply: 'hi', usage: { prompt_tokens: 10, completion_tokens: 1, total_tokens: 20 } });
    expect(ended.run.usage).toEqual({ prompt_tokens: 10, completion_tokens: 1, total_tokens: 20 });
  });
});

describe('malformed chunks', () => {
  it.each([
    [
      'content that is not a string',
      `data: {"choices":[{"index":0,"delta":{"content":{"a":1}}}]}\n\n`,
      '`delta.content` is not a string',
    ],
    ['choices that are not a list', `data: {"choices":{"0":{}}}\n\n`, '`choices` is not a list'],
    [
      'tool calls that are not a list',
      `data: {"choices":[{"index":0,"delta":{"tool_calls":{"index":0}}}]}\n\n`,
      '`delta.tool_calls` is not a list',
    ],
    ['a chunk that is not an object', `data: [1,2]\n\n`, 'a chunk is not a JSON object'],
  ])('%s fails the run saying what was wrong', async (_name, flood, what) => {
    const ended = await runToEnd({ flood, flood_bytes: flood.length, reply: 'never' });
    expect(ended.run).toMatchObject({
      status: 'failed',
      last_error: { message: `The upstream sent a malformed chunk: ${what}.` },
    });
  });
});

describe('recording how a run ended fails (a real database failure: a trigger refuses the write)', () => {
  async function withTriggers<T>(triggers: string[], body: () => Promise<T>): Promise<T> {
    const client = gateway.database.client;
    const names: string[] = [];
    for (const trigger of triggers) {
      await client.execute(trigger);
      names.push(defined(defined(/CREATE TRIGGER (\w+)/.exec(trigger))[1]));
    }
    try {
      return await body();
    } finally {
      for (const name of names) await client.execute(`DROP TRIGGER ${name}`);
    }
  }

  /**
   * The same refusal of the answer's message when the turn's closing write inserts it, as it ends
   * (an answer that ends before the message was written: resources/runs/execution/outbox.ts); the user's messages,
   * which carry the marker too, are let through.
   */
  const endedInsert = (name: string, when: string) => `CREATE TRIGGER ${name} BEFORE INSERT ON messages
    WHEN NEW.role = 'assistant' AND ${when}
    BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`;

  it('the final write fails: the run is failed at once, saying so, and keeps its answer so far', async () => {
    const triggers = [
      `CREATE TRIGGER refuse_completed BEFORE UPDATE OF status ON messages
        WHEN NEW.status = 'completed' AND NEW.content LIKE '%MARKER-ONE%'
        BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
      endedInsert('refuse_completed_insert', `NEW.status = 'completed' AND NEW.content LIKE '%MARKER-ONE%'`),
    ];
    const ended = await withTriggers(triggers, () => runToEnd({ reply: 'an answer MARKER-ONE' }, { stream: true }));
    expect(ended.run).toMatchObject({
      status: 'failed',
      last_error: {
        code: 'server_error',
        message: "The gateway could not record the run's outcome: the write to its database failed.",
      },
    });
    expect(ended.message).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'run_failed' } });
    expect(ended.message.content[0].text.value).toBe('an answer MARKER-ONE');
    expect(ended.events.slice(-3)).toEqual(['thread.run.failed', 'error', 'done']);
    expect(logsOf(ended.run.id)).toContainEqual(
      expect.objectContaining({ level: 'error', message: 'could not record how a run ended' }),
    );
  });

  it('settling it fails too: the run alone is failed, in a second small write, and its step and message closed', async () => {
    const triggers = [
      `CREATE TRIGGER refuse_content BEFORE UPDATE ON messages
        WHEN NEW.content LIKE '%MARKER-TWO%'
        BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
      endedInsert('refuse_content_insert', `NEW.content LIKE '%MARKER-TWO%'`),
    ];
    const ended = await withTriggers(triggers, () => runToEnd({ reply: 'an answer MARKER-TWO' }));
    expect(ended.run).toMatchObject({
      status: 'failed',
      last_error: {
        code: 'server_error',
        message: "The gateway could not record the run's outcome: the write to its database failed.",
      },
    });
    expect(ended.steps.map((step) => step.status)).toEqual(['failed']);
    expect(ended.message.status).toBe('incomplete');
  });

  it('even that fails: it is logged, and the run is left to its lease', async () => {
    const triggers = [
      `CREATE TRIGGER refuse_content_3 BEFORE UPDATE ON messages
        WHEN NEW.content LIKE '%MARKER-THREE%'
        BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
      `CREATE TRIGGER refuse_run_3 BEFORE UPDATE OF status ON runs
        WHEN NEW.status <> 'in_progress' AND EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = NEW.thread_id AND m.content LIKE '%MARKER-THREE%')
        BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
    ];
    const runId = await withTriggers(triggers, async () => {
      const response = await gateway.request('/v1/threads/runs', {
        key: tenant.workspaceKey,
        headers: { 'x-gateway-virtual-key': virtualKey },
        body: {
          assistant_id: assistantId,
          stream: true,
          thread: {
            messages: [{ role: 'user', content: `Go MARKER-THREE\n${fakeDirective({ reply: 'MARKER-THREE' })}` }],
          },
        },
      });
      const text = await response.text();
      expect(text).toContain('event: error');
      return defined(defined(/"id":"(run_\w+)"/.exec(text))[1]);
    });
    expect(logsOf(runId)).toContainEqual(
      expect.objectContaining({ level: 'error', message: 'could not fail a run whose outcome could not be recorded' }),
    );
    const row = await gateway.database.client.execute({ sql: 'SELECT status FROM runs WHERE id = ?', args: [runId] });
    expect(defined(row.rows[0])[0]).toBe('in_progress');
  });
});
