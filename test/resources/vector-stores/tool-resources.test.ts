import { defined } from '../../support/defined';
import { count, eq } from 'drizzle-orm';
import { NotFoundError, type OpenAI } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assistants, runs, threads, vectorStoreFiles, vectorStores } from '../../../src/db/schema';
import { createFakeUpstream, fakeThread } from '../../support/fake-upstream';
import { storeFile } from '../../support/files';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * tool_resources, wherever a request gives them (assistants, threads, a thread and its run): the
 * vector stores and files they name are the workspace's, or the request is a 404 naming the field;
 * and an assistant's `file_search.vector_stores` creates its store from files, as a new thread's
 * does, in the transaction that writes the assistant. The official SDK where it can say it.
 */

const ASSISTANT_CAP = 3;
const upstream = createFakeUpstream();
let gateway: TestGateway;

beforeAll(async () => {
  gateway = await createTestGateway({
    deps: { fetch: upstream.fetch },
    env: { GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE: String(ASSISTANT_CAP) },
  });
});
afterAll(() => gateway?.close());

/** A tenant whose default virtual key is the fake (runs, and the embeddings of its stores), and its SDK. */
async function member(): Promise<{ tenant: Tenant; client: OpenAI }> {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  return { tenant, client: gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey }) };
}

const text = (tenant: Tenant, name: string, content = `the content of ${name}`) =>
  storeFile(gateway, tenant, { filename: name, content });
const storeIdOf = (owner: { tool_resources?: { file_search?: { vector_store_ids?: string[] } } | null }) =>
  owner.tool_resources?.file_search?.vector_store_ids?.[0];

/** What the workspace holds: its rows that a refused request must not add to. */
async function rowsOf(tenant: Tenant) {
  const { db } = gateway.database;
  const workspaceId = tenant.workspace.id;
  const counted = async (
    table: typeof assistants | typeof threads | typeof runs | typeof vectorStores | typeof vectorStoreFiles,
  ) => defined((await db.select({ n: count() }).from(table).where(eq(table.workspaceId, workspaceId)))[0]).n;
  return {
    assistants: await counted(assistants),
    threads: await counted(threads),
    runs: await counted(runs),
    stores: await counted(vectorStores),
    storeFiles: await counted(vectorStoreFiles),
  };
}

describe('an assistant’s vector store, created from files (tool_resources.file_search.vector_stores)', () => {
  it('is created in the assistant’s workspace with its files, chunking and metadata; its id is the assistant’s; runs search it', async () => {
    const { tenant, client } = await member();
    const keeper = await text(
      tenant,
      'lighthouse.md',
      'The lighthouse keeper’s cat is called Pharos and sleeps on the lamp.',
    );
    const other = await text(tenant, 'harbour.txt', 'The harbour closes at nine in winter.');
    const chunking = { type: 'static' as const, static: { max_chunk_size_tokens: 200, chunk_overlap_tokens: 50 } };
    const assistant = await client.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'file_search' }],
      tool_resources: {
        file_search: {
          vector_stores: [{ file_ids: [keeper, other], chunking_strategy: chunking, metadata: { from: 'assistant' } }],
        },
      },
    });
    const storeId = defined(storeIdOf(assistant));
    expect(storeId).toMatch(/^vs_/);
    expect(assistant.tool_resources).toEqual({ file_search: { vector_store_ids: [storeId] } });
    expect(await client.beta.assistants.retrieve(assistant.id)).toEqual(assistant);

    const store = await client.vectorStores.retrieve(storeId);
    expect(store.metadata).toEqual({ from: 'assistant' });
    await gateway.tasks.drain(20_000);
    const files = (await client.vectorStores.files.list(storeId)).data;
    expect(files.map((file) => [file.id, file.status, file.chunking_strategy]).sort()).toEqual(
      [
        [keeper, 'completed', chunking],
        [other, 'completed', chunking],
      ].sort(),
    );

    // A run of the assistant searches the store it created.
    const marker = `cat-${crypto.randomUUID()}`;
    const run = await client.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        thread: fakeThread(`${marker} What is the cat called?`, [
          { tool_calls: [{ name: 'file_search', arguments: { queries: ['lighthouse cat name'] } }] },
          { reply: 'Pharos.' },
        ]),
      },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('completed');
    const [, second] = upstream.requests.filter(
      (request) => request.path.endsWith('/chat/completions') && request.rawBody.includes(marker),
    );
    const toolMessage = defined(defined(second).body).messages.find(
      (message: { role: string }) => message.role === 'tool',
    );
    expect(toolMessage.content).toContain('The lighthouse keeper’s cat is called Pharos');
  });

  it('is created by a modify too, which then names it instead of the store named before (kept as a store of the workspace)', async () => {
    const { tenant, client } = await member();
    const first = await client.vectorStores.create({ name: 'first' });
    const assistant = await client.beta.assistants.create({
      model: 'fake-model',
      tool_resources: { file_search: { vector_store_ids: [first.id] } },
    });
    const file = await text(tenant, 'notes.txt');
    const response = await gateway.request(`/v1/assistants/${assistant.id}`, {
      key: tenant.workspaceKey,
      body: { name: 'renamed', tool_resources: { file_search: { vector_stores: [{ file_ids: [file] }] } } },
    });
    expect(response.status).toBe(200);
    const modified = await json(response);
    const storeId = defined(storeIdOf(modified));
    expect(storeId).toMatch(/^vs_/);
    expect(storeId).not.toBe(first.id);
    expect(modified).toEqual({
      ...assistant,
      name: 'renamed',
      tool_resources: { file_search: { vector_store_ids: [storeId] } },
    });
    await gateway.tasks.drain(20_000);
    expect((await client.vectorStores.files.list(storeId)).data.map((item) => [item.id, item.status])).toEqual([
      [file, 'completed'],
    ]);
    expect((await client.vectorStores.retrieve(first.id)).id).toBe(first.id);
  });

  it('leaves nothing behind when the assistant is refused: past the workspace’s cap, an unknown file, no embeddings key, both ways of naming a store', async () => {
    const { tenant, client } = await member();
    const file = await text(tenant, 'kept.txt');
    const inline = (fileIds: string[]) => ({
      model: 'fake-model',
      tool_resources: { file_search: { vector_stores: [{ file_ids: fileIds }] } },
    });
    const create = async (body: object, headers: Record<string, string> = {}) =>
      errorOf(await gateway.request('/v1/assistants', { key: tenant.workspaceKey, body, headers }));

    expect(await create(inline([file, 'file-nope']))).toMatchObject({
      status: 404,
      code: 'file_not_found',
      param: 'tool_resources.file_search.vector_stores[0].file_ids[1]',
    });
    expect(
      await create({
        model: 'fake-model',
        tool_resources: { file_search: { vector_store_ids: ['vs_x'], vector_stores: [{}] } },
      }),
    ).toMatchObject({
      status: 400,
      param: 'tool_resources.file_search.vector_stores',
    });
    expect(await create(inline([file]), { 'x-gateway-virtual-key': 'no-such-key' })).toMatchObject({
      status: 401,
      code: 'invalid_virtual_key',
    });
    const keyless = await gateway.tenant();
    const keylessFile = await text(keyless, 'keyless.txt');
    expect(
      await errorOf(
        await gateway.request('/v1/assistants', { key: keyless.workspaceKey, body: inline([keylessFile]) }),
      ),
    ).toMatchObject({
      status: 400,
      code: 'missing_virtual_key',
    });
    expect(await rowsOf(keyless)).toMatchObject({ assistants: 0, stores: 0, storeFiles: 0 });

    // At the cap, the store is refused with the assistant: it is written only if the assistant is.
    for (let i = 0; i < ASSISTANT_CAP; i++) await client.beta.assistants.create({ model: 'fake-model' });
    const before = await rowsOf(tenant);
    expect(before).toMatchObject({ assistants: ASSISTANT_CAP, stores: 0, storeFiles: 0 });
    expect(await create(inline([file]))).toMatchObject({ status: 400, code: 'quota_exceeded' });
    expect(await rowsOf(tenant)).toEqual(before);

    // A modify of another workspace's assistant is a 404 and writes no store either.
    const neighbour = await member();
    const theirs = await neighbour.client.beta.assistants.create({ model: 'fake-model' });
    const modify = await gateway.request(`/v1/assistants/${theirs.id}`, {
      key: tenant.workspaceKey,
      body: inline([file]),
    });
    expect(await errorOf(modify)).toMatchObject({ status: 404, code: 'assistant_not_found' });
    expect(await rowsOf(tenant)).toEqual(before);
    expect(await rowsOf(neighbour.tenant)).toMatchObject({ stores: 0 });
  });
});

describe('tool_resources that name a vector store or a file the workspace does not have', () => {
  /** A tenant with an assistant, a thread, a store and a file of its own, and a neighbour's store and file. */
  async function setting() {
    const own = await member();
    const neighbour = await member();
    const ownStore = await own.client.vectorStores.create({ name: 'own' });
    const ownFile = await text(own.tenant, 'own.csv', 'a,b');
    const theirStore = await neighbour.client.vectorStores.create({ name: 'theirs' });
    const theirFile = await text(neighbour.tenant, 'theirs.csv', 'c,d');
    const deleted = await own.client.vectorStores.create({ name: 'deleted' });
    await own.client.vectorStores.delete(deleted.id);
    const assistant = await own.client.beta.assistants.create({
      model: 'fake-model',
      tool_resources: { file_search: { vector_store_ids: [ownStore.id] } },
    });
    const thread = await own.client.beta.threads.create({
      tool_resources: { code_interpreter: { file_ids: [ownFile] } },
    });
    return {
      ...own,
      ownStore: ownStore.id,
      ownFile,
      theirStore: theirStore.id,
      theirFile,
      deleted: deleted.id,
      assistant,
      thread,
    };
  }

  it('are refused with a 404 naming the field, on every request that takes them, and nothing is written', async () => {
    const { tenant, client, ownStore, ownFile, theirStore, theirFile, deleted, assistant, thread } = await setting();
    const bad = [
      {
        stores: ['vs_nope'],
        files: [],
        param: 'file_search.vector_store_ids[0]',
        code: 'vector_store_not_found',
        id: 'vs_nope',
      },
      {
        stores: [theirStore],
        files: [],
        param: 'file_search.vector_store_ids[0]',
        code: 'vector_store_not_found',
        id: theirStore,
      },
      {
        stores: [deleted],
        files: [],
        param: 'file_search.vector_store_ids[0]',
        code: 'vector_store_not_found',
        id: deleted,
      },
      {
        stores: [ownStore],
        files: [ownFile, 'file-nope'],
        param: 'code_interpreter.file_ids[1]',
        code: 'file_not_found',
        id: 'file-nope',
      },
      {
        stores: [ownStore],
        files: [ownFile, theirFile],
        param: 'code_interpreter.file_ids[1]',
        code: 'file_not_found',
        id: theirFile,
      },
    ];
    const requests = (resources: object) => [
      { path: '/v1/assistants', body: { model: 'fake-model', tool_resources: resources }, param: 'tool_resources' },
      {
        path: `/v1/assistants/${assistant.id}`,
        body: { name: 'changed', tool_resources: resources },
        param: 'tool_resources',
      },
      {
        path: '/v1/threads',
        body: { metadata: { changed: 'yes' }, tool_resources: resources },
        param: 'tool_resources',
      },
      {
        path: `/v1/threads/${thread.id}`,
        body: { metadata: { changed: 'yes' }, tool_resources: resources },
        param: 'tool_resources',
      },
      {
        path: '/v1/threads/runs',
        body: { assistant_id: assistant.id, tool_resources: resources },
        param: 'tool_resources',
      },
      {
        path: '/v1/threads/runs',
        body: { assistant_id: assistant.id, thread: { tool_resources: resources } },
        param: 'thread.tool_resources',
      },
    ];
    const before = await rowsOf(tenant);
    let refused = 0;
    for (const { stores, files, param, code, id } of bad) {
      const resources = { file_search: { vector_store_ids: stores }, code_interpreter: { file_ids: files } };
      for (const request of requests(resources)) {
        const error = await errorOf(
          await gateway.request(request.path, { key: tenant.workspaceKey, body: request.body }),
        );
        expect({ path: request.path, ...error }).toMatchObject({
          path: request.path,
          status: 404,
          code,
          param: `${request.param}.${param}`,
        });
        // Another workspace's store or file is as unknown as one that never was: the message says no more.
        expect(error.message).toBe(
          code === 'file_not_found' ? `No such File object: ${id}` : `No vector store found with id '${id}'.`,
        );
        refused++;
      }
    }
    expect(refused).toBe(bad.length * 6);
    expect(await rowsOf(tenant)).toEqual(before);
    expect(await client.beta.assistants.retrieve(assistant.id)).toEqual(assistant);
    expect(await client.beta.threads.retrieve(thread.id)).toEqual(thread);
  });

  it('reach the official SDK as a NotFoundError with the field as its param', async () => {
    const { client, theirStore, theirFile, assistant } = await setting();
    const failure = async (request: Promise<unknown>) =>
      request.then(
        () => null,
        (error: unknown) => error,
      );
    const store = await failure(
      client.beta.assistants.update(assistant.id, {
        tool_resources: { file_search: { vector_store_ids: [theirStore] } },
      }),
    );
    expect(store).toBeInstanceOf(NotFoundError);
    expect(store).toMatchObject({
      status: 404,
      code: 'vector_store_not_found',
      param: 'tool_resources.file_search.vector_store_ids[0]',
    });
    const file = await failure(
      client.beta.threads.create({ tool_resources: { code_interpreter: { file_ids: [theirFile] } } }),
    );
    expect(file).toBeInstanceOf(NotFoundError);
    expect(file).toMatchObject({
      status: 404,
      code: 'file_not_found',
      param: 'tool_resources.code_interpreter.file_ids[0]',
    });
  });

  it('are accepted when they are the workspace’s own', async () => {
    const { client, ownStore, ownFile, assistant } = await setting();
    const resources = { file_search: { vector_store_ids: [ownStore] }, code_interpreter: { file_ids: [ownFile] } };
    expect((await client.beta.assistants.update(assistant.id, { tool_resources: resources })).tool_resources).toEqual(
      resources,
    );
    expect((await client.beta.threads.create({ tool_resources: resources })).tool_resources).toEqual(resources);
    const run = await client.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        tool_resources: resources,
        thread: { ...fakeThread('hello', { reply: 'hi' }), tool_resources: resources },
      },
      { pollIntervalMs: 20 },
    );
    expect(run).toMatchObject({ status: 'completed', tool_resources: resources });
  });
});
