import { defined } from '../../support/defined';
import { eq } from 'drizzle-orm';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { messages, threads, vectorStores } from '../../../src/db/schema';
import { createFakeUpstream, fakeThread } from '../../support/fake-upstream';
import { storeFile } from '../../support/files';
import { errorOf, gatewayWithDefaultKey, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * A thread's vector store, as OpenAI kept it: created inline by tool_resources.file_search.vector_stores,
 * and filled by messages' file_search attachments (the store is created when the thread has none).
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let client: OpenAI;

beforeAll(async () => {
  ({ gateway, tenant, client } = await gatewayWithDefaultKey(upstream.fetch));
});
afterAll(() => gateway?.close());

const text = (name: string, content = `the content of ${name}`) =>
  storeFile(gateway, tenant, { filename: name, content });
const storeIdOf = (thread: { tool_resources?: { file_search?: { vector_store_ids?: string[] } } | null }) =>
  thread.tool_resources?.file_search?.vector_store_ids?.[0];
async function filesOf(storeId: string) {
  await gateway.tasks.drain(45_000);
  const page = await client.vectorStores.files.list(storeId);
  return page.data.map((file) => [file.id, file.status]).sort();
}

describe('a thread’s vector store', () => {
  it('is created with the thread from tool_resources.file_search.vector_stores and its messages’ attachments', async () => {
    const inline = await text('inline.md');
    const attached = await text('attached.txt');
    const thread = await client.beta.threads.create({
      tool_resources: { file_search: { vector_stores: [{ file_ids: [inline], metadata: { from: 'thread' } }] } },
      messages: [
        { role: 'user', content: 'Read this', attachments: [{ file_id: attached, tools: [{ type: 'file_search' }] }] },
      ],
    });
    const storeId = defined(storeIdOf(thread));
    expect(storeId).toMatch(/^vs_/);
    expect(thread.tool_resources).toEqual({ file_search: { vector_store_ids: [storeId] } });
    expect(await filesOf(storeId)).toEqual(
      [
        [attached, 'completed'],
        [inline, 'completed'],
      ].sort(),
    );
    expect((await client.vectorStores.retrieve(storeId)).metadata).toEqual({ from: 'thread' });
    const [message] = (await client.beta.threads.messages.list(thread.id)).data;
    expect(defined(message).attachments).toEqual([{ file_id: attached, tools: [{ type: 'file_search' }] }]);
    expect((await client.beta.threads.retrieve(thread.id)).tool_resources).toEqual({
      file_search: { vector_store_ids: [storeId] },
    });
  });

  it('takes a message’s file_search attachment into the thread’s store, creating it when the thread has none', async () => {
    const thread = await client.beta.threads.create({ metadata: { plain: 'yes' } });
    expect(storeIdOf(thread)).toBeUndefined();
    const first = await text('first.txt');
    await client.beta.threads.messages.create(thread.id, {
      role: 'user',
      content: 'one',
      attachments: [{ file_id: first, tools: [{ type: 'file_search' }] }],
    });
    const storeId = defined(storeIdOf(await client.beta.threads.retrieve(thread.id)));
    expect(storeId).toMatch(/^vs_/);
    const second = await text('second.txt');
    await client.beta.threads.messages.create(thread.id, {
      role: 'user',
      content: 'two',
      attachments: [{ file_id: second, tools: [{ type: 'file_search' }] }],
    });
    expect(storeIdOf(await client.beta.threads.retrieve(thread.id))).toBe(storeId);
    expect(await filesOf(storeId)).toEqual(
      [
        [first, 'completed'],
        [second, 'completed'],
      ].sort(),
    );
  });

  it('is created by createAndRun’s thread, and filled by a run’s additional_messages', async () => {
    const assistant = await client.beta.assistants.create({ model: 'fake-model' });
    const inline = await text('run-inline.txt');
    const run = await client.beta.threads.createAndRun({
      assistant_id: assistant.id,
      thread: {
        ...fakeThread('hello', { reply: 'hi' }),
        tool_resources: { file_search: { vector_stores: [{ file_ids: [inline] }] } },
      },
    });
    await gateway.tasks.drain(20_000);
    const storeId = defined(storeIdOf(await client.beta.threads.retrieve(run.thread_id)));
    expect(await filesOf(storeId)).toEqual([[inline, 'completed']]);
    const extra = await text('additional.txt');
    await client.beta.threads.runs.create(run.thread_id, {
      assistant_id: assistant.id,
      additional_messages: [
        { role: 'user', content: 'more', attachments: [{ file_id: extra, tools: [{ type: 'file_search' }] }] },
      ],
    });
    expect(await filesOf(storeId)).toEqual(
      [
        [extra, 'completed'],
        [inline, 'completed'],
      ].sort(),
    );
  });

  it('refuses an unknown attachment, another workspace’s file for code_interpreter and both ways of naming a store, writing nothing', async () => {
    const threadsBefore = (
      await gateway.database.db.select().from(threads).where(eq(threads.workspaceId, tenant.workspace.id))
    ).length;
    const storesBefore = (
      await gateway.database.db.select().from(vectorStores).where(eq(vectorStores.workspaceId, tenant.workspace.id))
    ).length;
    const file = await text('ok.txt');
    const other = await gateway.tenant();
    const theirs = await storeFile(gateway, other, { filename: 'theirs.txt', content: 'theirs' });
    const create = async (body: object) =>
      errorOf(await gateway.request('/v1/threads', { key: tenant.workspaceKey, body }));
    expect(
      await create({
        messages: [
          {
            role: 'user',
            content: 'x',
            attachments: [
              { file_id: file, tools: [{ type: 'file_search' }] },
              { file_id: theirs, tools: [{ type: 'file_search' }] },
            ],
          },
        ],
      }),
    ).toMatchObject({ status: 404, code: 'file_not_found', param: 'messages[0].attachments[1].file_id' });
    expect(
      await create({ tool_resources: { file_search: { vector_stores: [{ file_ids: ['file-nope'] }] } } }),
    ).toMatchObject({
      status: 404,
      param: 'tool_resources.file_search.vector_stores[0].file_ids[0]',
    });
    expect(
      await create({
        messages: [
          { role: 'user', content: 'x', attachments: [{ file_id: theirs, tools: [{ type: 'code_interpreter' }] }] },
        ],
      }),
    ).toMatchObject({
      status: 404,
      code: 'file_not_found',
      param: 'messages[0].attachments[0].file_id',
    });
    expect(
      await create({ tool_resources: { file_search: { vector_store_ids: ['vs_x'], vector_stores: [{}] } } }),
    ).toMatchObject({
      status: 400,
      param: 'tool_resources.file_search.vector_stores',
    });
    expect(
      (await gateway.database.db.select().from(threads).where(eq(threads.workspaceId, tenant.workspace.id))).length,
    ).toBe(threadsBefore);
    expect(
      (await gateway.database.db.select().from(vectorStores).where(eq(vectorStores.workspaceId, tenant.workspace.id)))
        .length,
    ).toBe(storesBefore);

    const thread = await client.beta.threads.create();
    const refused = await errorOf(
      await gateway.request(`/v1/threads/${thread.id}/messages`, {
        key: tenant.workspaceKey,
        body: { role: 'user', content: 'x', attachments: [{ file_id: theirs, tools: [{ type: 'file_search' }] }] },
      }),
    );
    expect(refused).toMatchObject({ status: 404, code: 'file_not_found', param: 'attachments[0].file_id' });
    expect(await gateway.database.db.select().from(messages).where(eq(messages.threadId, thread.id))).toEqual([]);
    expect(storeIdOf(await client.beta.threads.retrieve(thread.id))).toBeUndefined();
  });

  it('keeps an attachment without tools on the message only', async () => {
    const file = await text('plain.txt');
    const thread = await client.beta.threads.create();
    const message = await json(
      await gateway.request(`/v1/threads/${thread.id}/messages`, {
        key: tenant.workspaceKey,
        body: { role: 'user', content: 'x', attachments: [{ file_id: file }] },
      }),
    );
    expect(message.attachments).toEqual([{ file_id: file, tools: [] }]);
    expect(storeIdOf(await client.beta.threads.retrieve(thread.id))).toBeUndefined();
  });
});
