import { zodTextFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { defined } from '../../support/defined';
import { fakeDirective, startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { createTestGateway, type TestGateway } from '../../support/gateway';
import { tenantCalling } from '../chat-completions/clients';

/**
 * The Responses API as the official SDK's helpers use it: responses.parse with a zod schema, and a
 * conversation of three turns on a thread made with the Assistants API, each sent to the provider
 * with the turns before it.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});

/** The messages the provider was sent in its last chat completion. */
function lastSent(): unknown[] {
  const sent = fake.requests.filter((request) => request.path === '/v1/chat/completions').at(-1);
  return defined(sent?.body).messages;
}

describe('responses through the SDK', () => {
  it('responses.parse with zodTextFormat: the schema reaches the provider, its JSON comes back parsed', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const Weather = z.object({ city: z.string(), temperature: z.number().int(), sunny: z.boolean() });
    const answer = { city: 'Oslo', temperature: 21, sunny: false };
    const response = await client.responses.parse({
      model: 'gpt-4o-mini',
      input: `Weather in Oslo as JSON\n${fakeDirective({ reply: JSON.stringify(answer) })}`,
      text: { format: zodTextFormat(Weather, 'weather') },
    });
    expect(response.status).toBe('completed');
    expect(response.output_parsed).toEqual(answer);
    expect(response.text?.format).toMatchObject({ type: 'json_schema', name: 'weather', strict: true });
    const sent = defined(fake.requests.at(-1)?.body);
    expect(sent.response_format).toEqual({
      type: 'json_schema',
      json_schema: {
        name: 'weather',
        strict: true,
        schema: {
          type: 'object',
          properties: {
            city: { type: 'string' },
            temperature: expect.objectContaining({ type: 'integer' }),
            sunny: { type: 'boolean' },
          },
          required: ['city', 'temperature', 'sunny'],
          additionalProperties: false,
          $schema: expect.any(String),
        },
      },
    });
    // What the provider answered is stored as the response's text, and reads back the same.
    const again = await client.responses.retrieve(response.id);
    expect(JSON.parse(again.output_text)).toEqual(answer);
  });

  it('three turns in a conversation that is a beta.threads thread, each sent the turns before it', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const thread = await client.beta.threads.create();
    const turns = [
      { ask: 'My name is Ada.', reply: 'Hello Ada.' },
      { ask: 'I live in Oslo.', reply: 'Oslo is lovely.' },
      { ask: 'Who am I and where do I live?', reply: 'You are Ada, in Oslo.' },
    ];
    const history: { role: string; content: string }[] = [];
    const answers: string[] = [];
    for (const [index, turn] of turns.entries()) {
      const input = `${turn.ask}\n${fakeDirective({ reply: turn.reply })}`;
      const request = { model: 'gpt-4o-mini', conversation: thread.id, input, instructions: 'Be brief.' };
      // The last turn streams, through the SDK's stream helper, on the same conversation.
      const response =
        index === turns.length - 1
          ? await client.responses.stream(request).finalResponse()
          : await client.responses.create(request);
      expect(response).toMatchObject({ status: 'completed', conversation: { id: thread.id } });
      expect(response.output_text).toBe(turn.reply);
      answers.push(response.id);
      // The provider saw the instructions, every turn before this one, then this turn's input.
      expect(lastSent()).toEqual([
        { role: 'system', content: 'Be brief.' },
        ...history,
        { role: 'user', content: input },
      ]);
      history.push({ role: 'user', content: input }, { role: 'assistant', content: turn.reply });
    }
    // The thread shows the three turns, each answer written by its response's run.
    const messages = (await client.beta.threads.messages.list(thread.id, { order: 'asc' })).data;
    expect(
      messages.map((message) => {
        const [part] = message.content;
        return [message.role, part?.type === 'text' ? part.text.value.split('\n')[0] : null, message.run_id];
      }),
    ).toEqual(
      turns.flatMap((turn, index) => [
        ['user', turn.ask, null],
        ['assistant', turn.reply, answers[index]],
      ]),
    );
  });
});
