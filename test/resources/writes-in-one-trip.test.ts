import type { Client } from '@libsql/client';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseProxy } from '../support/database-proxy';
import { createFakeUpstream } from '../support/fake-upstream';
import { json, type TestGateway } from '../support/gateway';
import {
  gatewaysOnSqld,
  revokeElsewhere,
  roundTrips as countedRoundTrips,
  tenantWithRun,
} from '../support/gateways-on-sqld';

/**
 * The writes an application makes around its runs and responses, on a database server
 * (LIBSQL_URL): a thread or a conversation created or modified, a message's or a run's metadata, a
 * conversation's items. Each is one round trip once the key was seen: its transaction is led by the
 * settings' guard (ProvisionalSettings.guard), which fails it, writing nothing, if the settings
 * moved; then the key is looked up again, and the write made once, or refused 401 if the key was
 * revoked. Counted by a proxy in front of a real sqld, as bench:round-trips counts them.
 */

let proxy: DatabaseProxy;
let gateway: TestGateway;
let other: TestGateway;
let elsewhere: Client;
let close: () => Promise<void>;
const upstream = createFakeUpstream();

beforeAll(async () => {
  ({ proxy, gateway, other, elsewhere, close } = await gatewaysOnSqld(upstream));
});
afterAll(() => close());

const roundTrips = (task: () => Promise<unknown>) => countedRoundTrips(gateway, proxy, task);

/**
 * The round trips `task` made up to the one with a statement that starts `written` (`insert into
 * "runs"`), that one included: what a write took before it wrote, whatever work it started after (a
 * store's ingestion).
 */
async function tripsUntil(written: string, task: () => Promise<unknown>): Promise<number> {
  await gateway.tasks.drain(10_000);
  await proxy.quiet();
  const start = proxy.statements.length;
  proxy.keepStatements = true;
  try {
    await task();
  } finally {
    proxy.keepStatements = false;
  }
  const trips = proxy.statements.slice(start);
  return trips.findIndex((trip) => trip.some((sql) => sql.startsWith(written))) + 1;
}

/** A tenant with a completed run on a thread and a conversation; the SDK with its key. */
async function setup() {
  const { tenant, openai, run } = await tenantWithRun(gateway);
  const [message] = (await openai.beta.threads.messages.list(run.thread_id, { order: 'asc' })).data;
  const conversation = await openai.conversations.create({});
  return { tenant, openai, run, message: message?.id ?? '', conversation };
}

/** The writes, each leaving one row that names the call's `n`: in its metadata, or as its text. */
function writes(openai: OpenAI, ids: Awaited<ReturnType<typeof setup>>) {
  const { run, message, conversation } = ids;
  const threadId = run.thread_id;
  return {
    'a thread created': async (n: string) => (await openai.beta.threads.create({ metadata: { n } })).id,
    'a thread modified': (n: string) => openai.beta.threads.update(threadId, { metadata: { n } }),
    'a message modified': (n: string) =>
      openai.beta.threads.messages.update(message, { thread_id: threadId, metadata: { n } }),
    "a run's metadata": (n: string) =>
      openai.beta.threads.runs.update(run.id, { thread_id: threadId, metadata: { n } }),
    'a conversation created': async (n: string) =>
      (
        await openai.conversations.create({
          metadata: { n },
          items: [{ type: 'message', role: 'user', content: 'its first item' }],
        })
      ).id,
    'a conversation updated': (n: string) => openai.conversations.update(conversation.id, { metadata: { n } }),
    "a conversation's text items": (n: string) =>
      openai.conversations.items.create(conversation.id, {
        items: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: n }] }],
      }),
  };
}

/** How many rows of the database hold `n`: in their metadata, or (items) as their text. */
async function rowsNaming(n: string): Promise<number> {
  const tables = ['threads', 'messages', 'runs'];
  let count = 0;
  for (const table of tables) {
    const { rows } = await elsewhere.execute({
      sql: `SELECT count(*) AS n FROM ${table} WHERE json_extract(metadata, '$.n') = ?${table === 'messages' ? ' OR content LIKE ?' : ''}`,
      args: table === 'messages' ? [n, `%${n}%`] : [n],
    });
    count += Number(rows[0]?.n);
  }
  return count;
}

/** Moves the settings' generation, as any change to an assistant, key or policy elsewhere does. */
async function moveGeneration() {
  const someone = await other.tenant();
  await other.request('/v1/assistants', { key: someone.workspaceKey, body: { model: 'fake-model' } });
}

describe('the writes around runs and responses, on a database server', () => {
  it('each take one round trip once the key was seen: the settings are checked by the write itself', async () => {
    const ids = await setup();
    const made = writes(ids.openai, ids);
    const trips: Record<string, number> = {};
    for (const [name, write] of Object.entries(made)) {
      await write(`${name} warm`); // the key seen at the settings' generation
      const n = `${name} counted`;
      trips[name] = await roundTrips(() => write(n));
      expect(await rowsNaming(n), name).toBeGreaterThan(0);
    }
    expect(trips).toEqual(Object.fromEntries(Object.keys(made).map((name) => [name, 1])));

    // Items that are more than text (an output, an item referred to) are checked against the
    // conversation first: its read and their reads together, then the write.
    const [item] = (await ids.openai.conversations.items.list(ids.conversation.id)).data;
    const referred = () =>
      ids.openai.conversations.items.create(ids.conversation.id, {
        items: [{ type: 'item_reference', id: item?.id ?? '' }],
      });
    await referred();
    expect(await roundTrips(referred)).toBe(1); // nothing to write: the generation read with the reads
    const withReference = () =>
      ids.openai.conversations.items.create(ids.conversation.id, {
        items: [
          { type: 'item_reference', id: item?.id ?? '' },
          { type: 'message', role: 'user', content: 'beside a reference' },
        ],
      });
    expect(await roundTrips(withReference)).toBe(2);
  });

  it('writes once when the settings moved elsewhere, and writes nothing, answering 401, once the key is revoked', async () => {
    const ids = await setup();
    const made = writes(ids.openai, ids);
    for (const [name, write] of Object.entries(made)) {
      await write(`${name} warm`);
      await moveGeneration();
      const n = `${name} after a move`;
      await write(n);
      expect(await rowsNaming(n), name).toBe(1);
    }

    await revokeElsewhere(elsewhere, ids.tenant.workspaceKeyId);
    for (const [name, write] of Object.entries(made)) {
      const n = `${name} revoked`;
      await expect(write(n), name).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
      expect(await rowsNaming(n), name).toBe(0);
    }
  });

  it('deletes a thread, a message, a conversation in one round trip, once when the settings moved, nothing once the key is revoked', async () => {
    const { tenant, openai, run } = await setup();
    const threadId = run.thread_id;
    const deletes = {
      'a thread': async () => {
        const { id } = await openai.beta.threads.create();
        return { id, table: 'threads', remove: () => openai.beta.threads.delete(id), code: 'thread_not_found' };
      },
      'a message': async () => {
        const { id } = await openai.beta.threads.messages.create(threadId, { role: 'user', content: 'to delete' });
        const remove = () => openai.beta.threads.messages.delete(id, { thread_id: threadId });
        return { id, table: 'messages', remove, code: 'message_not_found' };
      },
      'a conversation': async () => {
        const { id } = await openai.conversations.create({});
        return { id, table: 'threads', remove: () => openai.conversations.delete(id), code: 'conversation_not_found' };
      },
    };
    const kept = async (table: string, id: string) =>
      Number(
        (await elsewhere.execute({ sql: `SELECT count(*) AS n FROM ${table} WHERE id = ?`, args: [id] })).rows[0]?.n,
      );

    const trips: Record<string, number> = {};
    for (const [name, make] of Object.entries(deletes)) {
      const { id, table, remove, code } = await make();
      trips[name] = await roundTrips(remove);
      expect(await kept(table, id), name).toBe(0);
      // Deleted already: the 404 of what the path names.
      await expect(remove(), name).rejects.toMatchObject({ status: 404, code });
    }
    expect(trips).toEqual({ 'a thread': 1, 'a message': 1, 'a conversation': 1 });

    for (const [name, make] of Object.entries(deletes)) {
      const { id, table, remove } = await make();
      await moveGeneration();
      await remove();
      expect(await kept(table, id), name).toBe(0);
    }

    const targets = await Promise.all(Object.values(deletes).map((make) => make()));
    await revokeElsewhere(elsewhere, tenant.workspaceKeyId);
    for (const { id, table, remove } of targets) {
      await expect(remove(), id).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
      expect(await kept(table, id), id).toBe(1);
    }
  });

  it('reads the key beside the generation when it is not held at it, after a change made here; a revoked key is refused at once', async () => {
    const { tenant, openai } = await setup();
    // An assistant's creation moves the generation: the next request reads it, and the key with it.
    const create = () => openai.beta.assistants.create({ model: 'fake-model' });
    await create();
    expect(await roundTrips(create)).toBe(2); // the generation and the key, then the insert
    // A new key (its creation changes the settings too): its first request reads it (once its hash
    // is made) and keeps it at the generation its own read saw; the next start from it.
    const made = await json(
      await gateway.request('/v1/api-keys', { key: tenant.workspaceKey, body: { name: 'second' } }),
    );
    const list = () => gateway.request('/v1/assistants', { key: made.key });
    expect((await list()).status).toBe(200);
    expect(await roundTrips(async () => expect((await list()).status).toBe(200))).toBe(1);
    // Revoked elsewhere: the very next request is refused.
    await revokeElsewhere(elsewhere, made.id);
    expect((await list()).status).toBe(401);
  });

  it("deletes a conversation's item in two round trips (it and the conversation read beside the generation, then the delete), nothing once the key is revoked", async () => {
    const { tenant, openai, conversation } = await setup();
    const added = async (text: string) => {
      const items = await openai.conversations.items.create(conversation.id, {
        items: [{ type: 'message', role: 'user', content: text }],
      });
      return items.data[0]?.id ?? '';
    };
    const remove = (id: string) => openai.conversations.items.delete(id, { conversation_id: conversation.id });
    const first = await added('an item deleted');
    expect(await roundTrips(() => remove(first))).toBe(2);
    expect(await rowsNaming('an item deleted')).toBe(0);
    await expect(remove(first)).rejects.toMatchObject({ status: 404, code: 'item_not_found' });
    await expect(openai.conversations.items.delete(first, { conversation_id: 'conv_missing' })).rejects.toMatchObject({
      status: 404,
      code: 'conversation_not_found',
    });

    const kept = await added('an item kept');
    await revokeElsewhere(elsewhere, tenant.workspaceKeyId);
    await expect(remove(kept)).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
    expect(await rowsNaming('an item kept')).toBe(1);
  });

  it('creates a vector store, adds files to one, modifies it, in two round trips (what they need read beside the generation, then the write), nothing once the key is revoked', async () => {
    const { tenant, openai } = await setup();
    const file = await openai.files.create({ file: new File(['kept words'], 'kept.txt'), purpose: 'assistants' });
    const stores = async (name: string) =>
      Number(
        (await elsewhere.execute({ sql: 'SELECT count(*) AS n FROM vector_stores WHERE name = ?', args: [name] }))
          .rows[0]?.n,
      );
    await openai.vectorStores.create({ name: 'warm' });
    let created: Awaited<ReturnType<typeof openai.vectorStores.create>> | undefined;
    expect(await roundTrips(async () => (created = await openai.vectorStores.create({ name: 'empty' })))).toBe(2);
    expect(created?.file_counts).toEqual({ in_progress: 0, completed: 0, failed: 0, cancelled: 0, total: 0 });
    // With a file (named twice: queued once): its check is among the reads, and the store and its
    // file written in the second round trip (its ingestion's own follow).
    expect(
      await tripsUntil('insert into "vector_stores"', async () => {
        created = await openai.vectorStores.create({ name: 'with a file', file_ids: [file.id, file.id] });
      }),
    ).toBe(2);
    expect(created?.file_counts).toMatchObject({ in_progress: 1, total: 1 });
    expect(created?.usage_bytes).toBe(0);
    await expect(
      openai.vectorStores.create({ name: 'unknown file', file_ids: ['file-missing'] }),
    ).rejects.toMatchObject({
      status: 404,
      code: 'file_not_found',
      param: 'file_ids[0]',
    });
    expect(await stores('unknown file')).toBe(0);

    // A file added to a store, a batch of files: their store and files read beside the generation,
    // then the write, the file read back in its transaction, a batch's counts known.
    const store = created?.id ?? '';
    const other = await openai.files.create({ file: new File(['more words'], 'more.txt'), purpose: 'assistants' });
    const third = await openai.files.create({ file: new File(['yet more'], 'third.txt'), purpose: 'assistants' });
    let added: Awaited<ReturnType<typeof openai.vectorStores.files.create>> | undefined;
    let batch: Awaited<ReturnType<typeof openai.vectorStores.fileBatches.create>> | undefined;
    expect(
      await tripsUntil(
        'insert into "vector_store_files"',
        async () => (added = await openai.vectorStores.files.create(store, { file_id: other.id })),
      ),
    ).toBe(2);
    expect(added).toMatchObject({ id: other.id, vector_store_id: store, status: 'in_progress' });
    expect(
      await tripsUntil(
        'insert into "vector_store_file_batches"',
        async () => (batch = await openai.vectorStores.fileBatches.create(store, { file_ids: [other.id, third.id] })),
      ),
    ).toBe(2);
    // The file in the store already is not queued again.
    expect(batch?.file_counts).toEqual({ in_progress: 1, completed: 0, failed: 0, cancelled: 0, total: 1 });
    // Cancelled: the store and the batch read beside the generation, then the write, its counts read in it.
    const cancel = () => openai.vectorStores.fileBatches.cancel(batch?.id ?? '', { vector_store_id: store });
    let cancelled: Awaited<ReturnType<typeof cancel>> | undefined;
    expect(await tripsUntil('update "vector_store_file_batches"', async () => (cancelled = await cancel()))).toBe(2);
    expect(cancelled?.status).toBe('cancelled');
    expect(cancelled?.file_counts.total).toBe(1);
    // Modified: the store and its figures read beside the generation, then the write.
    let renamed: Awaited<ReturnType<typeof openai.vectorStores.update>> | undefined;
    const rename = async () => (renamed = await openai.vectorStores.update(store, { name: 'renamed' }));
    expect(await tripsUntil('update "vector_stores"', rename)).toBe(2);
    expect(renamed).toMatchObject({ name: 'renamed', file_counts: { total: 3 } }); // its file, then two more
    await expect(openai.vectorStores.files.create('vs_missing', { file_id: other.id })).rejects.toMatchObject({
      status: 404,
      code: 'vector_store_not_found',
    });

    await moveGeneration();
    await openai.vectorStores.create({ name: 'after a move' });
    expect(await stores('after a move')).toBe(1);

    const fourth = await openai.files.create({ file: new File(['last words'], 'fourth.txt'), purpose: 'assistants' });
    await revokeElsewhere(elsewhere, tenant.workspaceKeyId);
    // The key's 401 before the file's 404: nothing about the workspace is told.
    await expect(openai.vectorStores.create({ name: 'revoked', file_ids: ['file-missing'] })).rejects.toMatchObject({
      status: 401,
      code: 'invalid_api_key',
    });
    expect(await stores('revoked')).toBe(0);
    await expect(openai.vectorStores.files.create(store, { file_id: fourth.id })).rejects.toMatchObject({
      status: 401,
      code: 'invalid_api_key',
    });
    await expect(openai.vectorStores.update(store, { name: 'revoked' })).rejects.toMatchObject({ status: 401 });
    expect(await stores('renamed')).toBe(1);
    const { rows } = await elsewhere.execute({
      sql: 'SELECT count(*) AS n FROM vector_store_files WHERE file_id = ?',
      args: [fourth.id],
    });
    expect(Number(rows[0]?.n)).toBe(0);
  });

  it('answers the 404 of the thing the path names, in its own words, writing nothing', async () => {
    const { openai, run } = await setup();
    const threadId = run.thread_id;
    await openai.beta.threads.retrieve(threadId); // the key seen
    const NOWHERE = 'written nowhere';
    const missing = [
      [() => openai.beta.threads.update('thread_missing', { metadata: { n: NOWHERE } }), 'thread_not_found'],
      [
        () => openai.beta.threads.messages.update('msg_missing', { thread_id: threadId, metadata: { n: NOWHERE } }),
        'message_not_found',
      ],
      [
        () =>
          openai.beta.threads.messages.update('msg_missing', { thread_id: 'thread_missing', metadata: { n: NOWHERE } }),
        'thread_not_found',
      ],
      [
        () => openai.beta.threads.runs.update('run_missing', { thread_id: threadId, metadata: { n: NOWHERE } }),
        'run_not_found',
      ],
      [() => openai.conversations.update('conv_missing', { metadata: { n: NOWHERE } }), 'conversation_not_found'],
      [
        () =>
          openai.conversations.items.create('conv_missing', {
            items: [{ type: 'message', role: 'user', content: NOWHERE }],
          }),
        'conversation_not_found',
      ],
      [
        () =>
          openai.conversations.items.create('conv_missing', {
            items: [{ type: 'function_call_output', call_id: 'call_x', output: NOWHERE }],
          }),
        'conversation_not_found',
      ],
    ] as const;
    for (const [write, code] of missing) {
      await expect(write(), code).rejects.toMatchObject({ status: 404, code });
    }
    expect(await rowsNaming(NOWHERE)).toBe(0);
  });
});
