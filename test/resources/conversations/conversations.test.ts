import { eq } from 'drizzle-orm';
import { defined } from '../../support/defined';
import { BadRequestError, NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runSteps } from '../../../src/db/schema';
import { createFakeUpstream, fakeDirective } from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, sdkClient, type TestGateway } from '../../support/gateway';
import { componentErrors } from '../../support/openapi';
import { heldThread, member, startRun, waitForRun, type Member } from '../../support/threads';
import type OpenAI from 'openai';

/**
 * The Conversations API on the thread store (docs/conversations.md): conversations created,
 * retrieved, updated and deleted; items created, listed both ways and page by page, retrieved and
 * deleted; a thread made with the Assistants API read as a conversation's items (messages, a run's
 * function call and its output, in the order its prompt gives them), a conversation read with the
 * Assistants API; other workspaces' ids; bad items refused naming their field. Every answer is
 * checked against OpenAI's description of it.
 */

let gateway: TestGateway;
let alice: Member;
/** The SDK as an application configures it: base URL and key. */
let client: OpenAI;
const upstream = createFakeUpstream();

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  alice = await member(gateway);
  client = sdkClient(gateway, alice.tenant);
});
afterAll(() => gateway.close());

/** Fails with the reference's words when `value` is not OpenAI's `component`. */
function expectShape(component: string, value: unknown) {
  expect(componentErrors(component, value), component).toEqual([]);
}

async function badRequest(promise: Promise<unknown>) {
  const error: unknown = await promise.then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(BadRequestError);
  return (error as BadRequestError).error as { code: string; param: string | null; message: string };
}

describe('conversations', () => {
  it('are created with items and metadata, retrieved, updated and deleted', async () => {
    const created = await client.conversations.create({
      metadata: { topic: 'demo' },
      items: [{ type: 'message', role: 'user', content: 'Hello!' }],
    });
    expect(created).toEqual({
      id: expect.stringMatching(/^conv_[A-Za-z0-9]{24}$/),
      object: 'conversation',
      created_at: expect.any(Number),
      metadata: { topic: 'demo' },
    });
    expectShape('ConversationResource', created);
    expect(await client.conversations.retrieve(created.id)).toEqual(created);

    const updated = await client.conversations.update(created.id, { metadata: { topic: 'changed' } });
    expect(updated).toEqual({ ...created, metadata: { topic: 'changed' } });
    expectShape('ConversationResource', updated);
    expect(await client.conversations.update(created.id, { metadata: null })).toMatchObject({ metadata: {} });

    const items = await client.conversations.items.list(created.id);
    expect(items.data).toEqual([
      {
        type: 'message',
        id: expect.stringMatching(/^msg_/),
        status: 'completed',
        role: 'user',
        content: [{ type: 'input_text', text: 'Hello!' }],
      },
    ]);

    const deleted = await client.conversations.delete(created.id);
    expect(deleted).toEqual({ id: created.id, object: 'conversation.deleted', deleted: true });
    expectShape('DeletedConversationResource', deleted);
    await expect(client.conversations.retrieve(created.id)).rejects.toBeInstanceOf(NotFoundError);
    const gone = await errorOf(await alice.request(`/v1/conversations/${created.id}`));
    expect(gone).toMatchObject({ status: 404, code: 'conversation_not_found', type: 'invalid_request_error' });
  });

  it('are threads: a conv_ id works in the Assistants API, with its system message shown as such', async () => {
    const conversation = await client.conversations.create({
      items: [
        { role: 'developer', content: 'Answer in French.' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi there' }] },
      ],
    });
    const listed = await alice.openai.beta.threads.messages.list(conversation.id, { order: 'asc' });
    expect(listed.data.map((message) => [message.role, message.content])).toEqual([
      ['developer', [{ type: 'text', text: { value: 'Answer in French.', annotations: [] } }]],
      ['user', [{ type: 'text', text: { value: 'Hi there', annotations: [] } }]],
    ]);
    expect((await alice.openai.beta.threads.retrieve(conversation.id)).id).toBe(conversation.id);

    // A run on it sends the developer message to the provider as a system message.
    const run = await alice.openai.beta.threads.runs.createAndPoll(conversation.id, {
      assistant_id: alice.assistantId,
    });
    expect(run.status).toBe('completed');
    const sent = upstream.requests.at(-1)?.body?.messages as { role: string; content: unknown }[];
    expect(sent).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'system', content: 'Answer in French.' },
      { role: 'user', content: 'Hi there' },
    ]);
  });

  it('answer 404 for another workspace’s id, in both APIs', async () => {
    const bob = await member(gateway);
    const bobs = await sdkClient(gateway, bob.tenant).conversations.create({ items: [{ role: 'user', content: 'x' }] });
    const thread = await bob.openai.beta.threads.create();
    for (const id of [bobs.id, thread.id]) {
      await expect(client.conversations.retrieve(id)).rejects.toBeInstanceOf(NotFoundError);
      await expect(client.conversations.items.list(id)).rejects.toBeInstanceOf(NotFoundError);
      await expect(
        client.conversations.items.create(id, { items: [{ role: 'user', content: 'y' }] }),
      ).rejects.toBeInstanceOf(NotFoundError);
      await expect(client.conversations.delete(id)).rejects.toBeInstanceOf(NotFoundError);
    }
    await expect(alice.openai.beta.threads.messages.list(bobs.id)).rejects.toBeInstanceOf(NotFoundError);
    // Nothing was written to bob's.
    expect((await bob.openai.beta.threads.messages.list(bobs.id)).data).toHaveLength(1);
  });
});

describe('items', () => {
  it('are created, listed in both orders and page by page, retrieved and deleted', async () => {
    const { id } = await client.conversations.create({});
    const created = await client.conversations.items.create(id, {
      items: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'one' }] },
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'two' },
            { type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'low' },
          ],
        },
        // An answer given back from elsewhere: its id is not this conversation's, so it is written anew.
        {
          type: 'message',
          id: 'msg_elsewhere',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: 'three', annotations: [] }],
        },
      ],
    });
    expectShape('ConversationItemList', created);
    expect(created.data.map((item) => item.type === 'message' && item.content)).toEqual([
      [{ type: 'input_text', text: 'one' }],
      [
        { type: 'input_text', text: 'two' },
        { type: 'input_image', image_url: 'https://example.com/cat.png', file_id: null, detail: 'low' },
      ],
      [{ type: 'output_text', text: 'three', annotations: [], logprobs: [] }],
    ]);
    const ids = created.data.map((item) => item.id);

    const newestFirst = await json(await alice.request(`/v1/conversations/${id}/items`));
    expectShape('ConversationItemList', newestFirst);
    expect(newestFirst.data.map((item: { id: string }) => item.id)).toEqual([...ids].reverse());
    expect(newestFirst).toMatchObject({ first_id: ids[2], last_id: ids[0], has_more: false });

    const first = await client.conversations.items.list(id, { order: 'asc', limit: 2 });
    expect(first.data.map((item) => item.id)).toEqual(ids.slice(0, 2));
    expect(first.has_more).toBe(true);
    const rest = await client.conversations.items.list(id, {
      order: 'asc',
      limit: 2,
      after: defined(first.data[1]).id,
    });
    expect(rest.data.map((item) => item.id)).toEqual(ids.slice(2));
    expect(rest.has_more).toBe(false);
    // The SDK's auto-pagination follows last_id.
    const all: string[] = [];
    for await (const item of client.conversations.items.list(id, { order: 'asc', limit: 1 }))
      all.push(defined(item.id));
    expect(all).toEqual(ids);

    const second = await client.conversations.items.retrieve(ids[1] ?? '', { conversation_id: id });
    expectShape('ConversationItem', second);
    expect(second).toEqual(created.data[1]);

    const afterDelete = await client.conversations.items.delete(ids[1] ?? '', { conversation_id: id });
    expectShape('ConversationResource', afterDelete);
    expect(afterDelete.id).toBe(id);
    expect((await client.conversations.items.list(id, { order: 'asc' })).data.map((item) => item.id)).toEqual([
      ids[0],
      ids[2],
    ]);
    await expect(client.conversations.items.retrieve(ids[1] ?? '', { conversation_id: id })).rejects.toBeInstanceOf(
      NotFoundError,
    );
    const unknownAfter = await errorOf(await alice.request(`/v1/conversations/${id}/items?after=msg_nope`));
    expect(unknownAfter).toMatchObject({ status: 400, param: 'after' });
  });

  it('are read from a thread whose run called a function and got its output, in the prompt’s order', async () => {
    const { threadId, runId } = await startRun(alice, [{ tool_calls: 1 }, { reply: 'It is sunny.' }]);
    const waiting = await waitForRun(alice, threadId, runId, ['requires_action']);
    const callId: string = waiting.required_action.submit_tool_outputs.tool_calls[0].id;
    await alice.openai.beta.threads.runs.submitToolOutputs(runId, {
      thread_id: threadId,
      tool_outputs: [{ tool_call_id: callId, output: '{"weather":"sunny"}' }],
    });
    expect((await waitForRun(alice, threadId, runId, ['completed'])).status).toBe('completed');
    const steps = await alice.openai.beta.threads.runs.steps.list(runId, { thread_id: threadId, order: 'asc' });
    const toolStep = steps.data.find((step) => step.type === 'tool_calls');
    const stepKey = toolStep?.id.replace(/^step_/, '');

    const items = await client.conversations.items.list(threadId, { order: 'asc' });
    expectShape('ConversationItemList', await json(await alice.request(`/v1/conversations/${threadId}/items`)));
    const messages = await alice.openai.beta.threads.messages.list(threadId, { order: 'asc' });
    expect(messages.data.map((message) => message.role)).toEqual(['user', 'assistant']);
    expect(items.data).toEqual([
      {
        type: 'message',
        id: messages.data[0]?.id,
        status: 'completed',
        role: 'user',
        content: [{ type: 'input_text', text: expect.stringContaining('Look it up') }],
      },
      {
        type: 'function_call',
        id: `fc_${stepKey}_0`,
        call_id: callId,
        name: 'lookup',
        arguments: expect.any(String),
        status: 'completed',
      },
      {
        type: 'function_call_output',
        id: `fco_${stepKey}_0`,
        call_id: callId,
        output: '{"weather":"sunny"}',
        status: 'completed',
      },
      {
        type: 'message',
        id: messages.data[1]?.id,
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'It is sunny.', annotations: [], logprobs: [] }],
      },
    ]);
    const call = await client.conversations.items.retrieve(`fc_${stepKey}_0`, { conversation_id: threadId });
    expect(call).toEqual(items.data[1]);
    expectShape('ConversationItem', call);
    expect(await client.conversations.items.retrieve(`fco_${stepKey}_0`, { conversation_id: threadId })).toEqual(
      items.data[2],
    );
    // A tool item is part of its step: refused, and kept.
    const refused = await badRequest(
      client.conversations.items.delete(`fc_${stepKey}_0`, { conversation_id: threadId }),
    );
    expect(refused.param).toBe('item_id');
    expect((await client.conversations.items.list(threadId)).data).toHaveLength(4);

    // Two more runs that called the function and were cancelled: their steps are the thread's
    // newest, and none of its items. A first page, whose rows are read beside the order (as many
    // steps as the page's limit, newest first), reads the step it shows after it.
    await alice.openai.beta.threads.messages.create(threadId, {
      role: 'user',
      content: fakeDirective({ tool_calls: 1 }),
    });
    for (let round = 0; round < 2; round++) {
      const run = await alice.openai.beta.threads.runs.create(threadId, { assistant_id: alice.assistantId });
      expect((await waitForRun(alice, threadId, run.id, ['requires_action'])).status).toBe('requires_action');
      await alice.openai.beta.threads.runs.cancel(run.id, { thread_id: threadId });
      expect((await waitForRun(alice, threadId, run.id, ['cancelled'])).status).toBe('cancelled');
    }
    const everything = (await client.conversations.items.list(threadId, { order: 'asc', limit: 100 })).data;
    expect(everything.map((item) => item.type)).toEqual([
      'message',
      'function_call',
      'function_call_output',
      'message',
      'message',
    ]);
    const newest = await client.conversations.items.list(threadId, { limit: 3 });
    expect(newest.data).toEqual(everything.slice(-3).reverse());
    expect(newest.has_more).toBe(true);
    // Every page after an item, either way, is what follows it in the whole list: whether the rows
    // read beside the order (from its message or step on) were the page's, or the page named more.
    for (const order of ['asc', 'desc'] as const) {
      const all = order === 'asc' ? everything : [...everything].reverse();
      for (const [at, item] of all.entries()) {
        for (const limit of [1, 2]) {
          const page = await client.conversations.items.list(threadId, { order, limit, after: defined(item.id) });
          expect(page.data).toEqual(all.slice(at + 1, at + 1 + limit));
          expect(page.has_more).toBe(at + 1 + limit < all.length);
        }
      }
    }
  });

  it('fill the output of a call that has none (a response that ended on its calls), once', async () => {
    const { threadId, runId } = await startRun(alice, [{ tool_calls: 1 }, { reply: 'Done.' }]);
    const waiting = await waitForRun(alice, threadId, runId, ['requires_action']);
    const callId: string = waiting.required_action.submit_tool_outputs.tool_calls[0].id;
    await alice.openai.beta.threads.runs.submitToolOutputs(runId, {
      thread_id: threadId,
      tool_outputs: [{ tool_call_id: callId, output: 'first' }],
    });
    await waitForRun(alice, threadId, runId, ['completed']);
    // What a response's run leaves (resources/responses/): its tool step completed, the output not given yet.
    const { db } = gateway.deps;
    const toolStep = (await db.select().from(runSteps).where(eq(runSteps.runId, runId))).find(
      (row) => row.type === 'tool_calls',
    );
    if (toolStep?.stepDetails.type !== 'tool_calls') throw new Error('no tool step');
    const calls = toolStep.stepDetails.tool_calls.map((call) =>
      call.type === 'function' ? { ...call, function: { ...call.function, output: null } } : call,
    );
    await db
      .update(runSteps)
      .set({ stepDetails: { type: 'tool_calls', tool_calls: calls } })
      .where(eq(runSteps.id, toolStep.id));

    const added = await client.conversations.items.create(threadId, {
      items: [
        { type: 'function_call_output', call_id: callId, output: [{ type: 'input_text', text: 'sunny' }] },
        { role: 'user', content: 'Thanks' },
      ],
    });
    expectShape('ConversationItemList', added);
    expect(added.data.map((item) => item.type)).toEqual(['function_call_output', 'message']);
    expect(added.data[0]).toEqual({
      type: 'function_call_output',
      id: `fco_${toolStep.id.replace(/^step_/, '')}_0`,
      call_id: callId,
      output: 'sunny',
      status: 'completed',
    });
    expect(await client.conversations.items.retrieve(added.data[0]?.id ?? '', { conversation_id: threadId })).toEqual(
      added.data[0],
    );
    // The call is answered now: a second output is refused, naming it.
    const again = await badRequest(
      client.conversations.items.create(threadId, {
        items: [{ type: 'function_call_output', call_id: callId, output: 'again' }],
      }),
    );
    expect(again.param).toBe('items[0].call_id');
    // The call given back as the response that made it answered it, and a reference: not written again.
    const [answer] = (await alice.openai.beta.threads.messages.list(threadId, { run_id: runId })).data;
    if (!answer) throw new Error('the run wrote no answer');
    const replay = await client.conversations.items.create(threadId, {
      items: [
        { type: 'function_call', call_id: callId, name: 'lookup', arguments: '{}' },
        { type: 'item_reference', id: defined(defined(added.data[1]).id) },
        {
          type: 'message',
          id: answer.id,
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: 'Done.', annotations: [] }],
        },
      ],
    });
    expect(replay.data).toEqual([]);
    expect((await client.conversations.items.list(threadId)).data).toHaveLength(5);
  });

  it('are refused while a run holds the thread, as its messages are', async () => {
    const { threadId, runId } = await heldThread(alice);
    const refused = await badRequest(
      client.conversations.items.create(threadId, { items: [{ role: 'user', content: 'x' }] }),
    );
    expect(refused.code).toBe('thread_has_active_run');
    expect(refused.message).toContain(runId);
    await alice.openai.beta.threads.runs.cancel(runId, { thread_id: threadId });
  });

  it('take a text file as text, named by its filename', async () => {
    const { id } = await client.conversations.create({
      items: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'Summarise:' },
            {
              type: 'input_file',
              filename: 'notes.md',
              file_data: `data:text/markdown;base64,${btoa('# Notes\nBuy milk.')}`,
            },
          ],
        },
      ],
    });
    const [item] = (await client.conversations.items.list(id)).data;
    expect(item?.type === 'message' && item.content).toEqual([
      { type: 'input_text', text: 'Summarise:' },
      { type: 'input_text', text: 'File: notes.md\n\n# Notes\nBuy milk.' },
    ]);
  });
});

describe('bad items', () => {
  const cases: [string, unknown, string][] = [
    ['an unknown type', [{ type: 'telepathy', text: 'x' }], 'items[0].type'],
    [
      'a part its role cannot hold',
      [{ role: 'system', content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] }],
      'items[0].content[0].type',
    ],
    [
      'an image URL that is not http(s)',
      [{ role: 'user', content: [{ type: 'input_image', image_url: 'ftp://example.com/a.png' }] }],
      'items[0].content[0].image_url',
    ],
    [
      'an unknown image file',
      [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-nope' }] }],
      'items[0].content[0].file_id',
    ],
    [
      'an unknown file',
      [{ role: 'user', content: [{ type: 'input_file', file_id: 'file-nope' }] }],
      'items[0].content[0].file_id',
    ],
    [
      'a file that is not text',
      [{ role: 'user', content: [{ type: 'input_file', filename: 'a.pdf', file_data: btoa('%PDF-1.4') }] }],
      'items[0].content[0].file_data',
    ],
    [
      'a file by URL',
      [{ role: 'user', content: [{ type: 'input_file', file_url: 'https://example.com/a.txt' }] }],
      'items[0].content[0].file_url',
    ],
    ['too many', Array.from({ length: 21 }, () => ({ role: 'user', content: 'x' })), 'items'],
    [
      'an output for no call',
      [{ type: 'function_call_output', call_id: 'call_nope', output: 'x' }],
      'items[0].call_id',
    ],
    [
      'a call the conversation never made',
      [{ type: 'function_call', call_id: 'call_nope', name: 'f', arguments: '{}' }],
      'items[0].call_id',
    ],
    ['a reference to nothing', [{ type: 'item_reference', id: 'msg_nope' }], 'items[0].id'],
    ['a text too long', [{ role: 'user', content: 'x'.repeat(256_001) }], 'items[0].content'],
  ];

  it.each(cases)('%s: 400 naming the field, nothing written', async (_, items, param) => {
    const { id } = await client.conversations.create({});
    for (const [path, body] of [
      [`/v1/conversations/${id}/items`, { items }],
      ['/v1/conversations', { items }],
    ] as const) {
      const error = await errorOf(await alice.request(path, { body }));
      expect(error, path).toMatchObject({ status: 400, param, type: 'invalid_request_error' });
    }
    expect((await client.conversations.items.list(id)).data).toEqual([]);
  });
});

describe('include', () => {
  it('takes OpenAI’s values in either form and refuses others, naming the parameter', async () => {
    const { id } = await client.conversations.create({ items: [{ role: 'user', content: 'x' }] });
    for (const query of ['include[]=file_search_call.results', 'include=message.output_text.logprobs']) {
      expect((await alice.request(`/v1/conversations/${id}/items?${query}`)).status, query).toBe(200);
    }
    const refused = await errorOf(await alice.request(`/v1/conversations/${id}/items?include[]=everything`));
    expect(refused).toMatchObject({ status: 400, param: 'include[]' });
    expect(refused.message).toContain('file_search_call.results');
  });
});
