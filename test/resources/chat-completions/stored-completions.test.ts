import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defined } from '../../support/defined';
import { errorOf, json } from '../../support/envelope';
import { fakeDirective, startFakeUpstream, type FakeUpstreamServer } from '../../support/fake-upstream';
import { createTestGateway, type TestGateway } from '../../support/gateway';
import { componentErrors, responseComponent } from '../../support/openapi';
import { waitFor } from '../../support/wait';
import { asking, tenantCalling } from './clients';

/**
 * Stored chat completions (`store: true`), through the official SDK configured only by base URL and
 * key: the gateway keeps what the provider behind a virtual key does not, a non-streamed answer as
 * the provider sent it and a streamed one assembled from its chunks, and serves OpenAI's list,
 * retrieve, update, delete and messages, each within its workspace.
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

const tenantWith = () => tenantCalling(gateway, fake);

/** The ids of a tenant's stored completions, as GET /v1/chat/completions lists them (every page). */
async function storedIds(client: OpenAI, query: OpenAI.Chat.ChatCompletionListParams = {}) {
  const ids = [];
  for await (const completion of client.chat.completions.list(query)) ids.push(completion.id);
  return ids;
}

/** Waits for a streamed completion's store, which follows the end of its stream. */
const storedOnce = (client: OpenAI, count: number) =>
  waitFor(
    () => storedIds(client),
    (ids) => ids.length >= count,
  );

describe('store: true', () => {
  it('keeps a non-streamed completion as the provider answered it, readable as soon as it is answered', async () => {
    const { client } = await tenantWith();
    const messages = [
      { role: 'system' as const, content: 'Be brief.' },
      {
        role: 'user' as const,
        content: [
          { type: 'text' as const, text: 'Describe' },
          { type: 'image_url' as const, image_url: { url: 'https://example.com/cat.png' } },
          { type: 'text' as const, text: `this cat\n${fakeDirective({ reply: 'A cat on a mat' })}` },
        ],
      },
    ];
    const completion = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages,
      store: true,
      metadata: { team: 'search', topic: 'cats' },
    });
    const stored = await client.chat.completions.retrieve(completion.id);
    expect(stored).toEqual({ ...completion, metadata: { team: 'search', topic: 'cats' } });
    expect(defined(stored.choices[0]).message.content).toBe('A cat on a mat');

    const listed = await client.chat.completions.messages.list(completion.id);
    expect(listed.data).toEqual([
      { id: `${completion.id}-0`, role: 'system', content: 'Be brief.', name: null, content_parts: null },
      {
        id: `${completion.id}-1`,
        role: 'user',
        content: `Describe\nthis cat\n${fakeDirective({ reply: 'A cat on a mat' })}`,
        name: null,
        content_parts: messages[1]?.content,
      },
    ]);
    expect(await storedIds(client)).toEqual([completion.id]);
  });

  it('keeps a streamed completion assembled from its chunks: content, tool calls, finish reason and usage', async () => {
    const { client } = await tenantWith();
    const runner = client.chat.completions.stream({
      model: 'gpt-4o',
      messages: [
        asking('weather in two cities?', {
          reply: 'Looking both up now',
          tool_calls: [
            { name: 'get_weather', arguments: { city: 'Paris' } },
            { name: 'get_weather', arguments: { city: 'Oslo, with a long name to split in fragments' } },
          ],
        }),
      ],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
      store: true,
    });
    const streamed = await runner.finalChatCompletion();
    await storedOnce(client, 1);
    const stored = await client.chat.completions.retrieve(streamed.id);
    const [choice] = stored.choices;
    expect(stored).toMatchObject({
      id: streamed.id,
      object: 'chat.completion',
      created: streamed.created,
      model: streamed.model,
      metadata: {},
    });
    expect(choice?.message.content).toBe('Looking both up now');
    expect(choice?.message.content).toBe(streamed.choices[0]?.message.content);
    expect(choice?.message.tool_calls).toEqual(
      streamed.choices[0]?.message.tool_calls?.map(({ id, type, function: fn }) => ({ id, type, function: fn })),
    );
    expect(choice?.message.tool_calls?.map((call) => call.type === 'function' && call.function.arguments)).toEqual([
      '{"city":"Paris"}',
      '{"city":"Oslo, with a long name to split in fragments"}',
    ]);
    expect(choice?.finish_reason).toBe('tool_calls');
    // The client did not ask for the usage chunk; the gateway did, and keeps its usage.
    expect(stored.usage?.completion_tokens).toBeGreaterThan(0);
    expect(stored.usage?.total_tokens).toBe(
      defined(stored.usage).prompt_tokens + defined(stored.usage).completion_tokens,
    );
  });

  it('keeps nothing of a call without store, of a provider that refused, or of a stream that failed', async () => {
    const { tenant, client } = await tenantWith();
    const plain = await client.chat.completions.create({ model: 'gpt-4o', messages: [asking('hello')] });
    await expect(
      client.chat.completions.create({ model: 'gpt-4o', messages: [asking('fail', { status: 500 })], store: true }),
    ).rejects.toMatchObject({ status: 500 });
    // The SDK raises the error event that ends the stream, and leaves.
    const failing = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('fail midway', { error_after_chunks: 2 })],
      stream: true,
      store: true,
    });
    await expect(async () => {
      for await (const chunk of failing) void chunk;
    }).rejects.toThrow();
    // A client that reads the stream to its end, error event and all.
    const response = await gateway.request('/v1/chat/completions', {
      key: tenant.workspaceKey,
      body: { model: 'gpt-4o', messages: [asking('fail', { error_after_chunks: 1 })], stream: true, store: true },
    });
    expect(await response.text()).toContain('"error"');
    // A call stored after them is listed alone: the ones before it were not kept.
    const kept = await client.chat.completions.create({ model: 'gpt-4o', messages: [asking('kept')], store: true });
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    expect(await storedIds(client)).toEqual([kept.id]);
    await expect(client.chat.completions.retrieve(plain.id)).rejects.toMatchObject({
      status: 404,
      code: 'chat_completion_not_found',
    });
    const notStored = gateway.logs
      .map((line) => JSON.parse(line))
      .filter((line) => line.message === 'chat completion not stored' && line.workspace_id === tenant.workspace.id);
    expect(notStored).toEqual([expect.objectContaining({ reason: 'the provider ended the stream with an error' })]);
  });

  it("a provider's id taken in the workspace, or unsafe, is stored under the gateway's own, the first kept as it was", async () => {
    const { client } = await tenantWith();
    const repeated = { completion_id: 'chatcmpl-always-the-same' };
    const first = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('first', { ...repeated, reply: 'the first' })],
      store: true,
    });
    const second = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('second', { ...repeated, reply: 'the second' })],
      store: true,
    });
    const unsafe = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('third', { completion_id: '../../v1/files', reply: 'the third' })],
      store: true,
    });
    expect([first.id, second.id, unsafe.id]).toEqual(['chatcmpl-always-the-same', first.id, '../../v1/files']);
    const ids = await storedIds(client);
    expect(ids).toHaveLength(3);
    expect(ids[0]).toBe('chatcmpl-always-the-same');
    expect(ids[1]).toMatch(/^chatcmpl-[A-Za-z0-9]{24}$/);
    expect(ids[2]).toMatch(/^chatcmpl-[A-Za-z0-9]{24}$/);
    const contents = await Promise.all(
      ids.map(async (id) => defined((await client.chat.completions.retrieve(id)).choices[0]).message.content),
    );
    expect(contents).toEqual(['the first', 'the second', 'the third']);
    expect((await client.chat.completions.retrieve(defined(ids[1]))).id).toBe(ids[1]);

    // Another workspace's store of the same provider id is its own.
    const other = await tenantWith();
    const elsewhere = await other.client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('elsewhere', { ...repeated, reply: 'elsewhere' })],
      store: true,
    });
    expect(await storedIds(other.client)).toEqual([elsewhere.id]);
    expect(defined((await other.client.chat.completions.retrieve(elsewhere.id)).choices[0]).message.content).toBe(
      'elsewhere',
    );
    expect(defined((await client.chat.completions.retrieve(elsewhere.id)).choices[0]).message.content).toBe(
      'the first',
    );
  });
});

describe('what is not kept', () => {
  it('a stream past the answer bound, or with a tool call index no answer has, is relayed whole and not kept', async () => {
    const small = await createTestGateway({ env: { GATEWAY_MAX_ANSWER_BYTES: '2000' } });
    try {
      const { tenant, client } = await tenantCalling(small, fake);
      const long = await client.chat.completions.create({
        model: 'gpt-4o',
        messages: [asking('long', { stream_bytes: 3000, chunk_bytes: 500 })],
        stream: true,
        store: true,
      });
      let text = '';
      for await (const chunk of long) text += chunk.choices[0]?.delta.content ?? '';
      expect(text.length).toBeGreaterThanOrEqual(3000);
      const hostile = await client.chat.completions.create({
        model: 'gpt-4o',
        messages: [asking('odd', { tool_calls: 1, tool_call_index: 4294967294 })],
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }],
        stream: true,
        store: true,
      });
      for await (const chunk of hostile) void chunk;
      expect(await small.tasks.drain(10_000)).toBe(true);
      expect(await storedIds(client)).toEqual([]);
      const reasons = small.logs
        .map((line) => JSON.parse(line))
        .filter((line) => line.message === 'chat completion not stored' && line.workspace_id === tenant.workspace.id)
        .map((line) => line.reason);
      expect(reasons).toEqual([
        'the completion is larger than 2000 characters (GATEWAY_MAX_ANSWER_BYTES)',
        "a tool call's index is not an integer below 128",
      ]);
    } finally {
      await small.close();
    }
  });

  it('a write the database refuses is logged, and the answer is the one the provider gave', async () => {
    const { tenant, client } = await tenantWith();
    await gateway.database.client.execute(
      `CREATE TRIGGER refuse_stored_${tenant.workspace.id.replaceAll('-', '_')} BEFORE INSERT ON stored_chat_completions
       WHEN NEW.workspace_id = '${tenant.workspace.id}' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
    );
    const completion = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('hi', { reply: 'answered all the same' })],
      store: true,
    });
    expect(defined(completion.choices[0]).message.content).toBe('answered all the same');
    const streamed = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('hi', { reply: 'streamed all the same' })],
      stream: true,
      store: true,
    });
    let text = '';
    for await (const chunk of streamed) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('streamed all the same');
    expect(await gateway.tasks.drain(10_000)).toBe(true);
    const failures = gateway.logs
      .map((line) => JSON.parse(line))
      .filter((line) => line.message === 'chat completion not stored' && line.workspace_id === tenant.workspace.id);
    expect(failures).toHaveLength(2);
    expect(JSON.stringify(failures)).toContain('refused by the test');
    expect(await storedIds(client)).toEqual([]);
  });
});

describe('listing', () => {
  it('filters by model and metadata, pages with limit and after, in either order', async () => {
    const { client } = await tenantWith();
    const made: { id: string; model: string; metadata: Record<string, string> }[] = [];
    const plans: { model: string; metadata: Record<string, string> }[] = [
      { model: 'gpt-4o', metadata: { team: 'a', env: 'prod' } },
      { model: 'gpt-4o-mini', metadata: { team: 'a', env: 'dev' } },
      { model: 'gpt-4o', metadata: { team: 'b', env: 'prod' } },
      { model: 'gpt-4o', metadata: { team: 'a', env: 'prod' } },
      { model: 'gpt-4o-mini', metadata: {} },
    ];
    for (const plan of plans) {
      const completion = await client.chat.completions.create({ ...plan, messages: [asking('hi')], store: true });
      made.push({ id: completion.id, ...plan });
    }
    const idsOf = (keep: (item: (typeof made)[number]) => boolean) => made.filter(keep).map((item) => item.id);

    expect(await storedIds(client)).toEqual(idsOf(() => true));
    expect(await storedIds(client, { order: 'desc' })).toEqual(idsOf(() => true).reverse());
    expect(await storedIds(client, { model: 'gpt-4o' })).toEqual(idsOf((item) => item.model === 'gpt-4o'));
    expect(await storedIds(client, { metadata: { team: 'a' } })).toEqual(idsOf((item) => item.metadata.team === 'a'));
    expect(await storedIds(client, { model: 'gpt-4o', metadata: { team: 'a', env: 'prod' } })).toEqual(
      idsOf((item) => item.model === 'gpt-4o' && item.metadata.team === 'a' && item.metadata.env === 'prod'),
    );
    expect(await storedIds(client, { metadata: { team: 'c' } })).toEqual([]);

    const page = await client.chat.completions.list({ limit: 2 });
    expect(page.data.map((completion) => completion.id)).toEqual(idsOf(() => true).slice(0, 2));
    expect(page.has_more).toBe(true);
    const next = await client.chat.completions.list({ limit: 2, after: defined(page.data[1]).id });
    expect(next.data.map((completion) => completion.id)).toEqual(idsOf(() => true).slice(2, 4));
    const last = await client.chat.completions.list({ limit: 2, after: defined(next.data[1]).id });
    expect(last.data.map((completion) => completion.id)).toEqual(idsOf(() => true).slice(4));
    expect(last.has_more).toBe(false);
    // The SDK follows the pages itself.
    expect(await storedIds(client, { limit: 2 })).toEqual(idsOf(() => true));
  });

  it("a completion's messages page with limit, after and order", async () => {
    const { tenant, client } = await tenantWith();
    const messages = [
      { role: 'system' as const, content: 'one' },
      { role: 'user' as const, content: 'two', name: 'ann' },
      { role: 'assistant' as const, content: 'three' },
      { role: 'user' as const, content: 'four' },
    ];
    const { id } = await client.chat.completions.create({ model: 'gpt-4o', messages, store: true });
    const contents = async (query: OpenAI.Chat.Completions.MessageListParams) => {
      const out = [];
      for await (const message of client.chat.completions.messages.list(id, query)) out.push(message.content);
      return out;
    };
    expect(await contents({})).toEqual(['one', 'two', 'three', 'four']);
    expect(await contents({ order: 'desc', limit: 3 })).toEqual(['four', 'three', 'two', 'one']);
    const page = await client.chat.completions.messages.list(id, { limit: 2, after: `${id}-0` });
    expect(page.data).toEqual([
      { id: `${id}-1`, role: 'user', content: 'two', name: 'ann', content_parts: null },
      { id: `${id}-2`, role: 'assistant', content: 'three', name: null, content_parts: null },
    ]);
    expect(page.has_more).toBe(true);
    const response = await gateway.request(`/v1/chat/completions/${id}/messages?after=${id}-9`, {
      key: tenant.workspaceKey,
    });
    expect(await errorOf(response)).toMatchObject({ status: 400, code: 'invalid_value', param: 'after' });
  });
});

describe('update and delete', () => {
  it('an update replaces the metadata only; a delete removes the completion and its messages', async () => {
    const { tenant, client } = await tenantWith();
    const { id } = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('hi', { reply: 'unchanged' })],
      store: true,
      metadata: { before: 'yes' },
    });
    const updated = await client.chat.completions.update(id, { metadata: { after: 'yes', team: 'x' } });
    expect(updated).toMatchObject({ id, metadata: { after: 'yes', team: 'x' } });
    expect(defined(updated.choices[0]).message.content).toBe('unchanged');
    expect(await client.chat.completions.retrieve(id)).toEqual(updated);
    expect(await storedIds(client, { metadata: { team: 'x' } })).toEqual([id]);
    expect(await storedIds(client, { metadata: { before: 'yes' } })).toEqual([]);
    const cleared = await gateway.request(`/v1/chat/completions/${id}`, {
      key: tenant.workspaceKey,
      body: { metadata: null },
    });
    expect((await json(cleared)).metadata).toEqual({});

    expect(await client.chat.completions.delete(id)).toEqual({ id, object: 'chat.completion.deleted', deleted: true });
    for (const attempt of [
      () => client.chat.completions.retrieve(id),
      () => client.chat.completions.messages.list(id),
      () => client.chat.completions.update(id, { metadata: {} }),
      () => client.chat.completions.delete(id),
    ]) {
      await expect(attempt()).rejects.toMatchObject({ status: 404, code: 'chat_completion_not_found', param: null });
    }
    expect(await storedIds(client)).toEqual([]);
  });
});

describe("OpenAI's description", () => {
  // Not the messages' list: the reference types its items as the model's answer (role `assistant`,
  // `refusal` required), where the list holds the request's messages, as OpenAI's API lists them.
  it('every answer of the stored completions has the shape the reference gives its operation', async () => {
    const { tenant, client } = await tenantWith();
    const { id } = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'system', content: 'Be brief.' }, asking('hi', { reply: 'kept' })],
      store: true,
      metadata: { team: 'a' },
    });
    const answers: [string, string, { method?: string; body?: unknown }][] = [
      ['getChatCompletion', `/v1/chat/completions/${id}`, {}],
      ['listChatCompletions', '/v1/chat/completions?limit=1', {}],
      ['updateChatCompletion', `/v1/chat/completions/${id}`, { body: { metadata: { team: 'b' } } }],
      ['deleteChatCompletion', `/v1/chat/completions/${id}`, { method: 'DELETE' }],
    ];
    for (const [operation, path, request] of answers) {
      const response = await gateway.request(path, { key: tenant.workspaceKey, ...request });
      expect(response.status, operation).toBe(200);
      expect(componentErrors(responseComponent(operation), await json(response)), operation).toEqual([]);
    }
  });
});

describe('workspaces', () => {
  it("another workspace's stored completion is not found, listed, updated or deleted", async () => {
    const owner = await tenantWith();
    const stranger = await tenantWith();
    const { id } = await owner.client.chat.completions.create({
      model: 'gpt-4o',
      messages: [asking('mine')],
      store: true,
      metadata: { team: 'mine' },
    });
    for (const attempt of [
      () => stranger.client.chat.completions.retrieve(id),
      () => stranger.client.chat.completions.messages.list(id),
      () => stranger.client.chat.completions.update(id, { metadata: { taken: 'yes' } }),
      () => stranger.client.chat.completions.delete(id),
    ]) {
      await expect(attempt()).rejects.toMatchObject({ status: 404, code: 'chat_completion_not_found', param: null });
    }
    expect(await storedIds(stranger.client)).toEqual([]);
    expect(await storedIds(stranger.client, { metadata: { team: 'mine' } })).toEqual([]);
    const response = await gateway.request(`/v1/chat/completions?after=${id}`, { key: stranger.tenant.workspaceKey });
    expect(await errorOf(response)).toMatchObject({ status: 400, param: 'after' });
    expect(await owner.client.chat.completions.retrieve(id)).toMatchObject({ id, metadata: { team: 'mine' } });
  });
});

describe('bad input', () => {
  const tooMany = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));

  it.each([
    ['limit=0', 'limit', 'value_below_minimum'],
    ['limit=101', 'limit', 'value_above_maximum'],
    ['limit=ten', 'limit', 'invalid_value'],
    ['order=sideways', 'order', 'invalid_value'],
    ['after=nothing-of-that-id', 'after', 'invalid_value'],
    ['before=x', 'before', 'unknown_parameter'],
    [`metadata[team]=${'v'.repeat(513)}`, 'metadata.team', 'string_above_max_length'],
    [`metadata[${'k'.repeat(65)}]=v`, 'metadata', 'string_above_max_length'],
    [
      Object.keys(tooMany)
        .map((key) => `metadata[${key}]=v`)
        .join('&'),
      'metadata',
      'invalid_value',
    ],
  ])('GET /v1/chat/completions?%s is a 400 naming %s', async (query, param, code) => {
    const { tenant } = await tenantWith();
    const response = await gateway.request(`/v1/chat/completions?${query}`, { key: tenant.workspaceKey });
    expect(await errorOf(response)).toMatchObject({ status: 400, param, code });
  });

  it.each([
    ['limit=0', 'limit'],
    ['order=up', 'order'],
    ['model=gpt-4o', 'model'],
  ])('GET /v1/chat/completions/{id}/messages?%s is a 400 naming %s', async (query, param) => {
    const { client, tenant } = await tenantWith();
    const { id } = await client.chat.completions.create({ model: 'gpt-4o', messages: [asking('hi')], store: true });
    const response = await gateway.request(`/v1/chat/completions/${id}/messages?${query}`, {
      key: tenant.workspaceKey,
    });
    expect(await errorOf(response)).toMatchObject({ status: 400, param });
  });

  it('metadata past its bounds is refused by the create and the update, naming it, and nothing is kept', async () => {
    const { client, tenant } = await tenantWith();
    const before = fake.requests.length;
    await expect(
      client.chat.completions.create({ model: 'gpt-4o', messages: [asking('hi')], store: true, metadata: tooMany }),
    ).rejects.toMatchObject({ status: 400, param: 'metadata' });
    await expect(
      client.chat.completions.create({
        model: 'gpt-4o',
        messages: [asking('hi')],
        store: true,
        metadata: { k: 'v'.repeat(513) },
      }),
    ).rejects.toMatchObject({ status: 400, param: 'metadata.k' });
    expect(fake.requests.length).toBe(before);
    expect(await storedIds(client)).toEqual([]);

    const { id } = await client.chat.completions.create({ model: 'gpt-4o', messages: [asking('hi')], store: true });
    for (const [body, param] of [
      [{ metadata: tooMany }, 'metadata'],
      [{}, 'metadata'],
      [{ metadata: { k: 'v' }, model: 'gpt-5' }, 'model'],
    ] as const) {
      const response = await gateway.request(`/v1/chat/completions/${id}`, { key: tenant.workspaceKey, body });
      expect(await errorOf(response)).toMatchObject({ status: 400, param });
    }
    expect(await client.chat.completions.retrieve(id)).toMatchObject({ metadata: {} });
  });
});
