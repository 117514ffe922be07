import type { Client } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseProxy } from '../support/database-proxy';
import { createFakeUpstream } from '../support/fake-upstream';
import { errorOf, json, type TestGateway } from '../support/gateway';
import { createPolicy } from '../support/ratelimit';
import { gatewaysOnSqld, roundTrips as countedRoundTrips, tenantWithRun } from '../support/gateways-on-sqld';

/**
 * The reads an application polls, on a database server (LIBSQL_URL): each in one round trip, the
 * settings' generation read beside the request's own reads, and what is read by the path's ids
 * beside the row that says whose they are (a run's steps beside the run, a thread's runs beside
 * the thread, a response's output beside the response). Counted by a proxy in front of a real
 * sqld, as bench:round-trips counts them.
 */

let proxy: DatabaseProxy;
let gateway: TestGateway;
let elsewhere: Client;
let close: () => Promise<void>;
const upstream = createFakeUpstream();

beforeAll(async () => {
  ({ proxy, gateway, elsewhere, close } = await gatewaysOnSqld(upstream));
});
afterAll(() => close());

const roundTrips = (task: () => Promise<unknown>) => countedRoundTrips(gateway, proxy, task);

/** A tenant with a completed run on a thread, a response and a file; the SDK with its key. */
async function setup() {
  const { tenant, openai, run } = await tenantWithRun(gateway);
  const response = await openai.responses.create({ model: 'fake-model', input: 'hello' });
  const file = await openai.files.create({ file: new File(['hello'], 'hello.txt'), purpose: 'assistants' });
  const conversation = await openai.conversations.create({
    items: [{ type: 'message', role: 'user', content: 'hello' }],
  });
  return { tenant, openai, run, response, file, conversation };
}

describe('the reads an application polls, on a database server', () => {
  it("each take one round trip once the key was seen (runs, pages after a cursor, steps, a step, a response, files, a conversation's item, a page of its items)", async () => {
    const { openai, run, response, file, conversation } = await setup();
    const thread = { thread_id: run.thread_id };
    const [step] = (await openai.beta.threads.runs.steps.list(run.id, thread)).data;
    const [item] = (await openai.conversations.items.list(conversation.id)).data;
    const [message] = (await openai.beta.threads.messages.list(run.thread_id, { order: 'asc' })).data;
    const reads: [string, () => Promise<unknown>][] = [
      ["a thread's runs", () => openai.beta.threads.runs.list(run.thread_id)],
      // A cursor's place is found by the page's query, whether it is the thread's beside it.
      [
        "a thread's messages after a cursor",
        () => openai.beta.threads.messages.list(run.thread_id, { after: message?.id ?? '' }),
      ],
      [
        "a thread's messages before a cursor",
        () => openai.beta.threads.messages.list(run.thread_id, { before: message?.id ?? '' }),
      ],
      ["a run's steps", () => openai.beta.threads.runs.steps.list(run.id, thread)],
      ['a step', () => openai.beta.threads.runs.steps.retrieve(step?.id ?? '', { ...thread, run_id: run.id })],
      ['a response', () => openai.responses.retrieve(response.id)],
      ['a file', () => openai.files.retrieve(file.id)],
      ['the files', () => openai.files.list()],
      ["a file's content", async () => (await openai.files.content(file.id)).text()],
      [
        "a conversation's item",
        () => openai.conversations.items.retrieve(item?.id ?? '', { conversation_id: conversation.id }),
      ],
    ];
    const trips: Record<string, number> = {};
    for (const [name, read] of reads) {
      await read(); // the key seen at the settings' generation, as an application's polling has
      trips[name] = await roundTrips(read);
    }
    expect(trips).toEqual(Object.fromEntries(reads.map(([name]) => [name, 1])));
    // A page of a conversation's items: its rows read beside their order, the first ones, or those
    // from the item it goes on after.
    const items = () => openai.conversations.items.list(conversation.id);
    await items();
    expect(await roundTrips(items)).toBe(1);
    const oldest = () => openai.conversations.items.list(conversation.id, { order: 'asc', limit: 1 });
    expect(await roundTrips(oldest)).toBe(1);
    const three = await openai.conversations.create({
      items: ['one', 'two', 'three'].map((content) => ({ type: 'message' as const, role: 'user' as const, content })),
    });
    const [first, second, third] = (await openai.conversations.items.list(three.id, { order: 'asc' })).data;
    const after = () => openai.conversations.items.list(three.id, { order: 'asc', after: first?.id ?? '' });
    expect((await after()).data.map((item) => item.id)).toEqual([second?.id, third?.id]);
    expect(await roundTrips(after)).toBe(1);
    const before = () => openai.conversations.items.list(three.id, { order: 'desc', after: third?.id ?? '' });
    expect((await before()).data.map((item) => item.id)).toEqual([second?.id, first?.id]);
    expect(await roundTrips(before)).toBe(1);
    // A page whose messages cite files: the files' names are read with the messages.
    const cites = await openai.conversations.create({
      items: [{ type: 'message', role: 'assistant', content: 'See the file.' }],
    });
    const citation = {
      type: 'file_citation',
      text: 'x',
      start_index: 4,
      end_index: 8,
      file_citation: { file_id: file.id },
    };
    await elsewhere.execute({
      sql: `UPDATE messages SET content = json_set(content, '$[0].text.annotations', json(?)) WHERE thread_id = ?`,
      args: [JSON.stringify([citation]), cites.id],
    });
    const cited = () => openai.conversations.items.list(cites.id);
    expect((await cited()).data[0]).toMatchObject({
      content: [{ annotations: [{ type: 'file_citation', file_id: file.id, filename: 'hello.txt', index: 4 }] }],
    });
    expect(await roundTrips(cited)).toBe(1);
  });

  it('reads of what else is stored take one round trip once the key was seen (threads, runs, assistants, a vector store, stored completions, usage, policies, models, a page of stores)', async () => {
    const { tenant, openai, run } = await setup();
    const store = await openai.vectorStores.create({ name: 'kept' });
    const file = await openai.files.create({ file: new File(['batched'], 'batched.txt'), purpose: 'assistants' });
    const batch = await openai.vectorStores.fileBatches.create(store.id, { file_ids: [file.id] });
    const ofStore = { vector_store_id: store.id };
    const completion = await openai.chat.completions.create({
      model: 'fake-model',
      store: true,
      messages: [{ role: 'user', content: 'hello' }],
    });
    const policy = await createPolicy(gateway, tenant, { unit: 'rpd', value: 1_000_000 });
    const get = async (path: string) => {
      const answer = await gateway.request(path, { key: tenant.workspaceKey });
      if (answer.status !== 200) throw new Error(`${path}: ${answer.status} ${await answer.text()}`);
      return answer.json();
    };
    const reads: [string, () => Promise<unknown>][] = [
      ['the threads', () => get('/v1/threads')],
      ["the workspace's runs", () => get('/v1/runs')],
      ["a run's trace", () => get(`/v1/runs/${run.id}/trace`)],
      ['the assistants', () => openai.beta.assistants.list()],
      ['a vector store', () => openai.vectorStores.retrieve(store.id)],
      ["a vector store's files", () => openai.vectorStores.files.list(store.id)],
      // The store, the batch and its counts or its page, side by side (what uploadAndPoll polls).
      ['a file batch', () => openai.vectorStores.fileBatches.retrieve(batch.id, ofStore)],
      ["a file batch's files", () => openai.vectorStores.fileBatches.listFiles(batch.id, ofStore)],
      ['the stored completions', () => openai.chat.completions.list()],
      ['a stored completion', () => openai.chat.completions.retrieve(completion.id)],
      ["a stored completion's messages", () => openai.chat.completions.messages.list(completion.id)],
      ['the usage', () => get('/v1/usage')],
      ['a rate-limit policy', () => get(`/v1/policies/rate-limits/${policy}`)],
      ['the rate-limit policies (a page and its total)', () => get('/v1/policies/rate-limits')],
      // The virtual keys and the key's confirmation, then the providers' lists.
      ['the models', () => openai.models.list()],
    ];
    const trips: Record<string, number> = {};
    for (const [name, read] of reads) {
      await read();
      trips[name] = await roundTrips(read);
    }
    expect(trips).toEqual(Object.fromEntries(reads.map(([name]) => [name, 1])));
    // A page of stores, their file counts and usage read with each.
    const stores = () => openai.vectorStores.list();
    await stores();
    expect(await roundTrips(stores)).toBe(1);
    // Another tenant's store: its 404, not the files read beside it.
    const other = await gateway.request(`/v1/vector_stores/${store.id}/files`, {
      key: (await gateway.tenant()).workspaceKey,
      headers: { 'openai-beta': 'assistants=v2' },
    });
    expect(other.status).toBe(404);
    expect((await errorOf(other)).code).toBe('vector_store_not_found');
  });

  it('answers the 404 of the row the path names first, whatever was read beside it', async () => {
    const { tenant, run } = await setup();
    const other = await setup();
    const get = (path: string) => gateway.request(path, { key: tenant.workspaceKey });
    // Another tenant's thread and run: their 404s, not the pages read beside them.
    const runs = await get(`/v1/threads/${other.run.thread_id}/runs`);
    expect(runs.status).toBe(404);
    expect((await errorOf(runs)).code).toBe('thread_not_found');
    const steps = await get(`/v1/threads/${other.run.thread_id}/runs/${other.run.id}/steps`);
    expect(steps.status).toBe(404);
    expect((await errorOf(steps)).code).toBe('run_not_found');
    // A step of a run that is not the workspace's: the run's 404, not the step's.
    const step = await get(`/v1/threads/${run.thread_id}/runs/run_missing/steps/step_missing`);
    expect((await errorOf(step)).code).toBe('run_not_found');
    const response = await get(`/v1/responses/${other.response.id}`);
    expect(response.status).toBe(404);
    for (const path of ['/items', '/items/msg_missing', '/items?after=msg_missing']) {
      const items = await get(`/v1/conversations/${other.conversation.id}${path}`);
      expect((await errorOf(items)).code).toBe('conversation_not_found');
    }
    // A bad cursor on a run that is not there: still the run's 404.
    const page = await get(`/v1/threads/${run.thread_id}/runs/run_missing/steps?after=step_missing`);
    expect((await errorOf(page)).code).toBe('run_not_found');
    // Another tenant's file batch: through its store, the store's 404; through one of ours, the batch's.
    const theirs = await other.openai.vectorStores.create({ name: 'theirs' });
    const batch = await other.openai.vectorStores.fileBatches.create(theirs.id, { file_ids: [other.file.id] });
    const beta = { 'openai-beta': 'assistants=v2' };
    const ours = await gateway.request('/v1/vector_stores', {
      key: tenant.workspaceKey,
      headers: beta,
      body: { name: 'ours' },
    });
    const oursId = (await json(ours)).id;
    for (const tail of ['', '/files']) {
      const viaTheirs = await gateway.request(`/v1/vector_stores/${theirs.id}/file_batches/${batch.id}${tail}`, {
        key: tenant.workspaceKey,
        headers: beta,
      });
      expect((await errorOf(viaTheirs)).code).toBe('vector_store_not_found');
      const viaOurs = await gateway.request(`/v1/vector_stores/${oursId}/file_batches/${batch.id}${tail}`, {
        key: tenant.workspaceKey,
        headers: beta,
      });
      expect((await errorOf(viaOurs)).code).toBe('file_batch_not_found');
    }
  });

  it("reads a left-behind run's steps again once it settled it: the page shows them settled", async () => {
    const { openai, run } = await setup();
    const thread = { thread_id: run.thread_id };
    // Its executor lost in the middle of its turn, as another gateway's crash would leave it.
    await elsewhere.batch([
      {
        sql: "UPDATE runs SET status = 'in_progress', lease_expires_at = 1, completed_at = NULL WHERE id = ?",
        args: [run.id],
      },
      { sql: "UPDATE run_steps SET status = 'in_progress', completed_at = NULL WHERE run_id = ?", args: [run.id] },
    ]);
    const steps = await openai.beta.threads.runs.steps.list(run.id, thread);
    expect(steps.data.map((step) => step.status)).not.toContain('in_progress');
    expect((await openai.beta.threads.runs.retrieve(run.id, thread)).status).toBe('failed');
  });
});
