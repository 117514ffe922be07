import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeDirective, startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { createTestGateway, type TestGateway } from '../../support/gateway';
import { tenantCalling } from '../chat-completions/clients';

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

describe('responses', () => {
  it('answers a text response whole', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const response = await client.responses.create({
      model: 'gpt-4o-mini',
      input: `Say hello\n${fakeDirective({ reply: 'Hello there, friend.' })}`,
    });
    expect(response.status).toBe('completed');
    expect(response.output_text).toBe('Hello there, friend.');
    const again = await client.responses.retrieve(response.id);
    expect(again.output_text).toBe('Hello there, friend.');
  });

  it('goes on through previous_response_id with a function call round trip', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const tools = [
      {
        type: 'function' as const,
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        strict: false,
      },
    ];
    const first = await client.responses.create({
      model: 'gpt-4o-mini',
      input: `Weather in Paris?\n${fakeDirective({ tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] })}`,
      tools,
    });
    expect(first.status).toBe('completed');
    const call = first.output.find((item) => item.type === 'function_call');
    expect(call?.type === 'function_call' && call.name).toBe('get_weather');
    if (call?.type !== 'function_call') throw new Error('no call');
    const second = await client.responses.create({
      model: 'gpt-4o-mini',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
      tools,
    });
    expect(second.status).toBe('completed');
    expect(second.output_text.length).toBeGreaterThan(0);
    expect(fake.requests.at(-1)?.body).toMatchObject({
      messages: expect.arrayContaining([expect.objectContaining({ role: 'tool', content: '{"temp":21}' })]),
    });
  });
});
