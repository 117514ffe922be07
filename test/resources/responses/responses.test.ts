import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeDirective, startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { createTestGateway, type TestGateway } from '../../support/gateway';
import { freshGate } from '../../support/gates';
import { waitFor } from '../../support/wait';
import { createPolicy, freshMinute, usedBy } from '../../support/ratelimit';
import { componentErrors } from '../../support/openapi';
import OpenAI from 'openai';
import { eq } from 'drizzle-orm';
import { createNodeApp } from '../../../src/runtime/node/app';
import { createNodeDeps } from '../../../src/runtime/node/deps';
import { messages, runs } from '../../../src/db/schema';
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
    expect(componentErrors('Response', response)).toEqual([]);
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
    const listed = await client.responses.inputItems.list(second.id);
    expect(listed.data).toEqual([
      expect.objectContaining({
        type: 'function_call_output',
        call_id: call.call_id,
        id: expect.stringMatching(/^fco_/),
      }),
    ]);
    expect(fake.requests.at(-1)?.body).toMatchObject({
      messages: expect.arrayContaining([expect.objectContaining({ role: 'tool', content: '{"temp":21}' })]),
    });
  });

  it('a background response is answered queued, polled to its end, and a held one is cancelled', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const started = await client.responses.create({
      model: 'gpt-4o-mini',
      background: true,
      input: `Hi\n${fakeDirective({ reply: 'Later, then.' })}`,
    });
    expect(['queued', 'in_progress']).toContain(started.status);
    expect(started.background).toBe(true);
    const done = await waitFor(
      () => client.responses.retrieve(started.id),
      (response) => response.status === 'completed',
    );
    expect(done.output_text).toBe('Later, then.');

    const gate = freshGate();
    const held = await client.responses.create({
      model: 'gpt-4o-mini',
      background: true,
      input: `Hi\n${fakeDirective({ hold: gate })}`,
    });
    await waitFor(
      () => fake.gateState(gate).waiting,
      (waiting) => waiting === 1,
    );
    const cancelling = await client.responses.cancel(held.id);
    expect(['in_progress', 'cancelled']).toContain(cancelling.status);
    const cancelled = await waitFor(
      () => client.responses.retrieve(held.id),
      (response) => response.status === 'cancelled',
    );
    expect(cancelled.status).toBe('cancelled');
    fake.openGate(gate);
  });

  it('goes on in a thread made with the Assistants API, and the thread shows the response', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const thread = await client.beta.threads.create({ messages: [{ role: 'user', content: 'My name is Ada.' }] });
    const response = await client.responses.create({
      model: 'gpt-4o-mini',
      conversation: thread.id,
      input: `What is my name?\n${fakeDirective({ reply: 'Your name is Ada.' })}`,
    });
    expect(response.conversation).toEqual({ id: thread.id });
    const sent = fake.requests.at(-1)?.body as { messages: { role: string; content: unknown }[] };
    expect(sent.messages.map((message) => message.role)).toEqual(['user', 'user']);
    const messages = await client.beta.threads.messages.list(thread.id, { order: 'asc' });
    expect(messages.data.map((message) => message.role)).toEqual(['user', 'user', 'assistant']);
    const last = messages.data[2]?.content[0];
    expect(last?.type === 'text' && last.text.value).toBe('Your name is Ada.');
    expect(messages.data[2]?.run_id).toBe(response.id);
  });

  it('keeps nothing with store: false, and says so when a response goes on from it', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const unkept = await client.responses.create({ model: 'gpt-4o-mini', store: false, input: 'Hello' });
    expect(unkept.status).toBe('completed');
    await expect(client.responses.retrieve(unkept.id)).rejects.toMatchObject({ status: 404 });
    const refused = await client.responses
      .create({ model: 'gpt-4o-mini', previous_response_id: unkept.id, input: 'And?' })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect(refused).toMatchObject({ param: 'previous_response_id' });
    const { db } = gateway.deps;
    expect(await db.select().from(messages).where(eq(messages.runId, unkept.id))).toEqual([]);
    expect(await db.select().from(runs).where(eq(runs.id, unkept.id))).toEqual([]);
  });

  it('runs an assistant as a stored prompt, its variables filled in its instructions', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const assistant = await client.beta.assistants.create({
      model: 'gpt-4o-mini',
      instructions: 'You help {{customer}} with invoices.',
    });
    const response = await client.responses.create({
      prompt: { id: assistant.id, variables: { customer: 'Grace' } },
      input: 'Hi',
    });
    expect(response.model).toBe('gpt-4o-mini');
    expect(response.prompt).toMatchObject({ id: assistant.id });
    const sent = fake.requests.at(-1)?.body as { messages: { role: string; content: unknown }[] };
    expect(sent.messages[0]).toEqual({ role: 'system', content: 'You help Grace with invoices.' });
  });

  it('refuses what it cannot do, naming the field, and writes nothing', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const cases: [Record<string, unknown>, string][] = [
      [{ previous_response_id: 'resp_unknown' }, 'previous_response_id'],
      [{ previous_response_id: 'resp_x', conversation: 'conv_x' }, 'previous_response_id'],
      [{ conversation: 'conv_unknown' }, 'conversation'],
      [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ tools: [{ type: 'function', name: 'bad name' }] }, 'tools[0].name'],
      [{ input: [{ type: 'function_call_output', call_id: 'call_nothing', output: 'x' }] }, 'input[0].call_id'],
      [{ background: true, store: false }, 'background'],
    ];
    for (const [fields, param] of cases) {
      const error = await client.responses
        .create({ model: 'gpt-4o-mini', input: 'Hi', ...fields })
        .catch((caught: unknown) => caught);
      expect(error, JSON.stringify(fields)).toBeInstanceOf(OpenAI.APIError);
      expect(error, JSON.stringify(fields)).toMatchObject({ param });
    }
  });

  it('streams the Responses API events, which the SDK reads whole, and the response is kept as streamed', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const stream = client.responses.stream({
      model: 'gpt-4o-mini',
      input: `Say it\n${fakeDirective({ reply: 'One two three.' })}`,
    });
    const deltas: string[] = [];
    stream.on('response.output_text.delta', (event) => deltas.push(event.delta));
    const final = await stream.finalResponse();
    expect(deltas.join('')).toBe('One two three.');
    expect(final.status).toBe('completed');
    expect(final.output_text).toBe('One two three.');
    expect(final.usage?.total_tokens).toBeGreaterThan(0);
    const kept = await client.responses.retrieve(final.id);
    // The SDK adds `parsed` to what it read: the rest is the same.
    expect(final.output).toMatchObject(kept.output);
    expect(kept.usage).toEqual(final.usage);
  });

  it("a background response's stream is told again from what it stored, from after starting_after", async () => {
    const { client } = await tenantCalling(gateway, fake);
    const started = await client.responses.create({
      model: 'gpt-4o-mini',
      background: true,
      input: `Hi\n${fakeDirective({ reply: 'Told again.' })}`,
    });
    const replayed = async (startingAfter?: number) => {
      const stream = await client.responses.retrieve(started.id, {
        stream: true,
        ...(startingAfter === undefined ? {} : { starting_after: startingAfter }),
      });
      const events = [];
      for await (const event of stream) events.push(event);
      return events;
    };
    // Asked while it may still execute: the events come once it ended.
    const whole = await replayed();
    expect(whole.map((event) => event.sequence_number)).toEqual(whole.map((_, index) => index));
    expect(whole.at(-1)?.type).toBe('response.completed');
    const text = whole.flatMap((event) => (event.type === 'response.output_text.delta' ? [event.delta] : [])).join('');
    expect(text).toBe('Told again.');
    for (const event of whole) expect(componentErrors('ResponseStreamEvent', event), event.type).toEqual([]);
    const resumed = await replayed(2);
    expect(resumed).toEqual(whole.slice(3));
  });

  it('a provider that fails makes a failed response, in the envelope when streamed, and nothing is left in progress', async () => {
    const { client } = await tenantCalling(gateway, fake);
    const failed = await client.responses.create({
      model: 'gpt-4o-mini',
      input: `Hi\n${fakeDirective({ status: 500 })}`,
    });
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatchObject({ code: 'server_error' });
    expect(componentErrors('Response', failed)).toEqual([]);
    expect((await client.responses.retrieve(failed.id)).status).toBe('failed');

    const stream = client.responses.stream({
      model: 'gpt-4o-mini',
      input: `Hi\n${fakeDirective({ reply: 'one two three four', cut_after_chunks: 3 })}`,
    });
    const events: string[] = [];
    stream.on('event', (event) => events.push(event.type));
    await stream.done().catch(() => undefined);
    expect(events.at(-1)).toBe('response.failed');
  });

  it('a background response whose executor stopped is failed by another gateway once its lease ran out, never left in progress', async () => {
    const { tenant, client } = await tenantCalling(gateway, fake);
    // A second gateway on the same database, 60 s later: the first one's lease has run out for it.
    const deps = await createNodeDeps(gateway.deps.config, gateway.database, {
      now: () => gateway.clock.now() + 60_000,
      secrets: gateway.deps.secrets,
      log: gateway.deps.log,
    });
    const other = createNodeApp(deps);
    const gate = freshGate('held');
    const started = await client.responses.create({
      model: 'gpt-4o-mini',
      background: true,
      input: `Hi\n${fakeDirective({ reply: 'never', hold: gate })}`,
    });
    await waitFor(
      () => fake.gateState(gate).waiting,
      (waiting) => waiting === 1,
    );
    const seen = await other.request(`/v1/responses/${started.id}`, {
      headers: { 'x-gateway-api-key': tenant.workspaceKey },
    });
    expect(await seen.json()).toMatchObject({ status: 'failed', error: { code: 'server_error' } });
    fake.openGate(gate);
    expect(await gateway.tasks.drain(5_000)).toBe(true);
    const after = await client.responses.retrieve(started.id);
    expect(after.status).toBe('failed');
    expect(after.output).toEqual([]);
  });

  it("policies govern responses: a requests policy refuses past its limit, a tokens policy is charged the response's usage", async () => {
    const { tenant, client } = await tenantCalling(gateway, fake);
    freshMinute(gateway.clock);
    const requests = await createPolicy(gateway, tenant, { type: 'requests', value: 2 });
    const tokens = await createPolicy(gateway, tenant, { type: 'tokens', value: 100_000 });
    const first = await client.responses.create({ model: 'gpt-4o-mini', input: 'one' });
    const streamed = await client.responses.stream({ model: 'gpt-4o-mini', input: 'two' }).finalResponse();
    const charged = (first.usage?.total_tokens ?? 0) + (streamed.usage?.total_tokens ?? 0);
    expect(
      await waitFor(
        () => usedBy(gateway.database.client, tokens),
        (used) => used === charged,
      ),
    ).toBe(charged);
    expect(await usedBy(gateway.database.client, requests)).toBe(2);
    const sent = fake.requests.length;
    await expect(client.responses.create({ model: 'gpt-4o-mini', input: 'three' })).rejects.toThrow(
      OpenAI.RateLimitError,
    );
    expect(fake.requests.length).toBe(sent);
  });
});
