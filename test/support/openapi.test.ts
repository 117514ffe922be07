import { defined } from './defined';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  componentErrors,
  componentNames,
  fieldsOpenAiSendsUndocumented,
  responseComponent,
  responseStreamEventErrors,
  streamEventErrors,
  streamEvents,
} from './openapi';
import { parseEventStream, type StreamEvent } from './sse';

/**
 * The validator of test/support/openapi.ts, on what OpenAI itself sends (the run streams of
 * test/fixtures/openai-run-stream-example.txt: example 1 a capture of the live API, example 2
 * OpenAI's documented example) and on values broken on purpose: it must accept the one and
 * refuse the other, saying where.
 */

const examples = readFileSync(new URL('../fixtures/openai-run-stream-example.txt', import.meta.url), 'utf8')
  .split(/# =+ EXAMPLE \d.*\n/)
  .slice(1)
  .map((section) => parseEventStream(section.replace(/^#.*\n/gm, '')));
const [liveCapture, documented, errorExample] = examples as [StreamEvent[], StreamEvent[], StreamEvent[]];

const dataOf = (events: StreamEvent[], name: string): any =>
  structuredClone(defined(events.find((event) => event.event === name)).data);
const completedRun = () => dataOf(liveCapture, 'thread.run.completed');

/** A list of failures without the values and schemas they show: what a test can compare. */
const failuresOf = (events: StreamEvent[]) =>
  new Set(
    events.flatMap(({ event, data }) => streamEventErrors(event, data)).map((line) => line.replace(/ \(got.*/, '')),
  );

describe('what OpenAI sends', () => {
  // Its run steps leave out two fields the reference requires (and the SDKs type, and the
  // gateway sends): `expired_at` and `metadata`.
  const STEPS_WITHOUT = [
    "/data: must have required property 'expired_at'",
    "/data: must have required property 'metadata'",
  ];

  it('every event of the live capture validates, but for the two fields its run steps leave out', () => {
    expect(liveCapture.length).toBeGreaterThan(10);
    expect(failuresOf(liveCapture)).toEqual(new Set(STEPS_WITHOUT));
  });

  it("every event of OpenAI's documented tool-call stream validates, but for those and its run's null instructions", () => {
    // The reference types a run's instructions as a string, and its own example has null.
    expect(failuresOf(documented)).toEqual(new Set([...STEPS_WITHOUT, '/data/instructions: must be string']));
    expect(documented.map(({ event }) => event)).toContain('thread.run.step.delta');
  });

  it('each undocumented field that is let through is one the live API was captured sending', () => {
    const objects: Record<string, string> = {
      RunObject: 'thread.run.completed',
      RunStepObject: 'thread.run.step.completed',
    };
    for (const [component, fields] of Object.entries(fieldsOpenAiSendsUndocumented)) {
      for (const field of Object.keys(fields))
        expect(dataOf(liveCapture, defined(objects[component]))).toHaveProperty(field);
    }
  });
});

describe('strictness', () => {
  it('refuses a missing required field, naming it', () => {
    const { usage: _, ...run } = completedRun();
    expect(componentErrors('RunObject', run)).toEqual([
      expect.stringMatching(/^\/: must have required property 'usage'/),
    ]);
  });

  it('refuses a property OpenAI does not document, naming it', () => {
    expect(componentErrors('RunObject', { ...completedRun(), gateway_extra: 1 })).toEqual([
      expect.stringMatching(/^\/: has the undocumented property 'gateway_extra'/),
    ]);
    // Inside nested objects too.
    const run = completedRun();
    run.usage.cached_tokens = 3;
    expect(componentErrors('RunObject', run)).toEqual([
      expect.stringMatching(/^\/usage: has the undocumented property 'cached_tokens'/),
    ]);
  });

  it('keeps open what the reference leaves open: metadata, a function tool’s parameters', () => {
    const run = completedRun();
    run.metadata = { any_key: 'any value' };
    run.tools[2].function.parameters.properties.extra = { type: 'number', whatever: true };
    expect(componentErrors('RunObject', run)).toEqual([]);
  });

  it('refuses a value outside an enum, with the allowed values', () => {
    expect(componentErrors('RunObject', { ...completedRun(), status: 'done' })).toEqual([
      expect.stringMatching(/^\/status: must be one of \["queued",.*\] \(got "done"/),
    ]);
  });

  it('points into lists and nested objects', () => {
    const message = dataOf(liveCapture, 'thread.message.completed');
    message.content[0].text.value = 7;
    const errors = componentErrors('ListMessagesResponse', {
      object: 'list',
      data: [message],
      first_id: message.id,
      last_id: message.id,
      has_more: false,
    });
    expect(errors.some((line) => line.startsWith('/data/0/content/0/text/value: must be string (got 7'))).toBe(true);
  });
});

describe("OpenAPI 3.0's nullable", () => {
  it('admits null where the reference marks a field nullable, however it writes it', () => {
    // `type: object` + nullable; `$ref` + nullable; `allOf: [$ref, {nullable: true}]`.
    const run = {
      ...completedRun(),
      required_action: null,
      response_format: null,
      truncation_strategy: null,
      tool_choice: null,
    };
    expect(componentErrors('RunObject', run)).toEqual([]);
  });

  it('still checks the value when it is not null', () => {
    const errors = componentErrors('RunObject', { ...completedRun(), truncation_strategy: { type: 'everything' } });
    expect(
      errors.some((line) => line.startsWith('/truncation_strategy/type: must be one of ["auto","last_messages"]')),
    ).toBe(true);
  });

  it('refuses null where the reference does not allow it', () => {
    expect(componentErrors('RunObject', { ...completedRun(), model: null })).toEqual([
      expect.stringMatching(/^\/model: must be string \(got null/),
    ]);
  });
});

describe('stream events', () => {
  it("maps each of the reference's event names to its data's component", () => {
    expect(Object.fromEntries(streamEvents)).toMatchObject({
      'thread.created': 'ThreadObject',
      'thread.run.created': 'RunObject',
      'thread.run.requires_action': 'RunObject',
      'thread.run.step.created': 'RunStepObject',
      'thread.run.step.delta': 'RunStepDeltaObject',
      'thread.message.created': 'MessageObject',
      'thread.message.delta': 'MessageDeltaObject',
      'thread.message.incomplete': 'MessageObject',
      error: 'Error',
    });
    expect(streamEvents.size).toBe(25);
  });

  it('checks the data against the event’s component', () => {
    const delta = dataOf(liveCapture, 'thread.message.delta');
    expect(streamEventErrors('thread.message.delta', delta)).toEqual([]);
    expect(streamEventErrors('thread.run.created', delta).length).toBeGreaterThan(0);
    delta.delta.content[0].type = 'txt';
    expect(streamEventErrors('thread.message.delta', delta).length).toBeGreaterThan(0);
    expect(streamEventErrors('done', '[DONE]')).toEqual([]);
    expect(streamEventErrors('done', 'DONE')).not.toEqual([]);
  });

  it('refuses an event the reference does not have', () => {
    expect(streamEventErrors('thread.run.progress', {})).toEqual([
      expect.stringMatching(/^event 'thread.run.progress' is not an AssistantStreamEvent/),
    ]);
  });

  it("reads the error event's data as the SDKs do, an ErrorResponse, not the reference's bare Error", () => {
    const bare = dataOf(errorExample, 'error');
    expect(componentErrors('Error', bare)).toEqual([]);
    expect(streamEventErrors('error', bare).length).toBeGreaterThan(0);
    expect(streamEventErrors('error', { error: bare })).toEqual([]);
  });
});

describe('the documents', () => {
  it('compile, every component', () => {
    for (const name of componentNames) expect(() => componentErrors(name, null), name).not.toThrow();
    expect(() => componentErrors('NoSuchObject', {})).toThrow(/no component named NoSuchObject/);
  });

  it("name each operation's answers", () => {
    expect(responseComponent('getRun')).toBe('RunObject');
    expect(responseComponent('listRunSteps')).toBe('ListRunStepsResponse');
    expect(responseComponent('deleteThread')).toBe('DeleteThreadResponse');
    expect(responseComponent('createRun', '429')).toBe('ErrorResponse');
  });
});

describe('the Responses document', () => {
  const message = {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    status: 'completed',
    content: [{ type: 'output_text', text: 'Hi', annotations: [], logprobs: [] }],
  };
  const response = {
    id: 'resp_1',
    object: 'response',
    created_at: 1741487325,
    status: 'completed',
    completed_at: 1741487326,
    error: null,
    incomplete_details: null,
    instructions: null,
    model: 'gpt-4o-mini',
    tools: [],
    output: [message],
    output_text: 'Hi',
    parallel_tool_calls: true,
    metadata: {},
    tool_choice: 'auto',
    temperature: 1,
    top_p: 1,
    usage: {
      input_tokens: 3,
      input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: 1,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 4,
    },
  };
  const delta = {
    type: 'response.output_text.delta',
    item_id: 'msg_1',
    output_index: 0,
    content_index: 0,
    delta: 'Hi',
    logprobs: [],
    sequence_number: 3,
  };

  it('validates a whole response, its allOf of three parts closed as one', () => {
    expect(componentErrors('Response', response)).toEqual([]);
    expect(componentErrors('Response', { ...response, gateway_extra: 1 })).toEqual([
      expect.stringMatching(/^\/: has the undocumented property 'gateway_extra'/),
    ]);
  });

  it('checks a discriminated union against the branch its type names, and reports only that branch', () => {
    expect(componentErrors('ResponseStreamEvent', delta)).toEqual([]);
    const { logprobs: _, ...withoutLogprobs } = delta;
    expect(componentErrors('ResponseStreamEvent', withoutLogprobs)).toEqual([
      expect.stringMatching(/^\/: must have required property 'logprobs' \(got /),
    ]);
    // Nested: an output item's content part, inside the response inside an event.
    const part = { type: 'output_text', text: 'Hi', annotations: [] };
    const event = { type: 'response.content_part.done', item_id: 'msg_1', output_index: 0, content_index: 0, part };
    expect(componentErrors('ResponseStreamEvent', { ...event, sequence_number: 4 })).toEqual([
      expect.stringMatching(/^\/part: must have required property 'logprobs'/),
    ]);
  });

  it('refuses a discriminator value that no branch has, naming the known ones', () => {
    expect(componentErrors('OutputMessageContent', { type: 'output_txt', text: 'Hi' })).toEqual([
      expect.stringMatching(/^\/type: must be one of \["output_text","refusal"\] \(got "output_txt"/),
    ]);
    expect(componentErrors('ResponseStreamEvent', { ...delta, type: 'response.output_text.progress' })).toEqual([
      expect.stringMatching(/^\/type: must be one of \[.*"response.output_text.delta".*\]/),
    ]);
  });

  it('leaves a union whose branches do not each require their own value as it is', () => {
    // InputItem's easy message has an optional `type`, and shares 'message' with Item's: an
    // item without a type is still one.
    expect(componentErrors('InputItem', { role: 'user', content: 'Hi' })).toEqual([]);
    expect(componentErrors('InputItem', { role: 'user', content: 7 }).length).toBeGreaterThan(0);
  });

  it("admits null where a field's anyOf has {type: 'null'}, and still checks the value when it is not null", () => {
    expect(componentErrors('Response', { ...response, completed_at: null })).toEqual([]);
    expect(componentErrors('Response', { ...response, completed_at: 'soon' })).toEqual([
      expect.stringMatching(/^\/completed_at: must be number \(got "soon"/),
    ]);
    expect(componentErrors('Response', { ...response, model: null }).length).toBeGreaterThan(0);
  });

  it("checks the reference's float format (a file search result's score)", () => {
    const call = { id: 'fs_1', type: 'file_search_call', status: 'completed', queries: ['q'] };
    const result = { file_id: 'file-1', filename: 'a.txt', text: 'x', attributes: {}, score: 0.5 };
    expect(componentErrors('FileSearchToolCall', { ...call, results: [result] })).toEqual([]);
    expect(componentErrors('FileSearchToolCall', { ...call, results: [{ ...result, score: '0.5' }] })).toEqual([
      expect.stringMatching(/^\/results\/0\/score: must be number/),
    ]);
  });

  it('checks that a streamed event is named as its type says', () => {
    expect(responseStreamEventErrors('response.output_text.delta', delta)).toEqual([]);
    expect(responseStreamEventErrors('response.output_text.done', delta)).toEqual([
      `event 'response.output_text.done' carries data of type "response.output_text.delta"`,
    ]);
    const completed = { type: 'response.completed', response, sequence_number: 9 };
    expect(responseStreamEventErrors('response.completed', completed)).toEqual([]);
  });

  it("names the Responses and Conversations operations' answers", () => {
    expect(responseComponent('createResponse')).toBe('Response');
    expect(responseComponent('getConversation')).toBe('ConversationResource');
  });
});
