import { defined } from '../support/defined';
import { createClient } from '@libsql/client/web';
import { createExecutionContext, createScheduledController } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import worker from '../../src/worker';
import { json } from '../support/envelope';

/**
 * Search inside workerd: the Worker entry against sqld, a vector store written by
 * test/support/workers-global-setup.ts (its vectors the fake provider's), the query embedded by the fake provider
 * through a virtual key of the workspace; and a file_search run, executed in its Durable Object.
 * The store's vector index (past GATEWAY_VECTOR_INDEX_MIN_CHUNKS, 3 here) is built by the cron
 * trigger's handler, as on Cloudflare.
 */

const { workspaceKey, vectorStoreId, fileIds } = inject('searchTenant');
const REFUND_CHUNK = 'Refunds are granted within 30 days of purchase.';

let openai: OpenAI;

beforeAll(async () => {
  const created = await exports.default.fetch('http://gateway/v1/virtual-keys', {
    method: 'POST',
    headers: { 'x-gateway-api-key': workspaceKey, 'content-type': 'application/json' },
    body: JSON.stringify({
      slug: 'fake',
      provider: 'openai',
      base_url: inject('upstreamUrl'),
      api_key: 'sk-fake',
      default: true,
    }),
  });
  expect((await json(created)).slug).toBe('fake');
  openai = new OpenAI({
    baseURL: 'http://gateway/v1',
    apiKey: workspaceKey,
    fetch: (url, init) => exports.default.fetch(url, init),
  });
});

describe('file search on workerd', () => {
  it('finds the right chunk first with vectorStores.search', async () => {
    const page = await openai.vectorStores.search(vectorStoreId, { query: 'How many days for refunds?' });
    expect(page.data[0]).toMatchObject({
      file_id: fileIds[0],
      filename: 'policies.md',
      score: 1,
      content: [{ type: 'text', text: REFUND_CHUNK }],
    });
  });

  it('runs a file_search run to a cited answer', async () => {
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'file_search' }],
      tool_resources: { file_search: { vector_store_ids: [vectorStoreId] } },
    });
    const scenario = [
      { tool_calls: [{ name: 'file_search', arguments: { queries: ['refunds'] } }] },
      { reply: '30 days 【0†policies.md】' },
    ];
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        thread: { messages: [{ role: 'user', content: `Refunds?\n#fake ${JSON.stringify(scenario)}` }] },
      },
      { pollIntervalMs: 50 },
    );
    expect(run.status).toBe('completed');
    const steps = await openai.beta.threads.runs.steps.list(run.id, {
      thread_id: run.thread_id,
      order: 'asc',
      include: ['step_details.tool_calls[*].file_search.results[*].content'],
    });
    expect(defined(steps.data[0]).step_details).toMatchObject({
      tool_calls: [
        { type: 'file_search', file_search: { results: [{ file_id: fileIds[0], content: [{ text: REFUND_CHUNK }] }] } },
      ],
    });
    const messages = await openai.beta.threads.messages.list(run.thread_id);
    expect(defined(messages.data[0]).content[0]).toMatchObject({
      text: { annotations: [{ type: 'file_citation', file_citation: { file_id: fileIds[0] } }] },
    });
  });

  it('builds the store’s vector index on the cron trigger, and still finds the right chunk', async () => {
    await worker.scheduled(createScheduledController(), env, createExecutionContext());
    const client = createClient({ url: inject('sqldUrl') });
    const { rows } = await client.execute({
      sql: 'SELECT ready_at FROM vector_store_indexes WHERE vector_store_id = ?',
      args: [vectorStoreId],
    });
    const table = `vector_store_ann_${vectorStoreId.slice('vs_'.length)}`;
    const indexed = await client.execute(`SELECT count(*) AS chunks FROM ${table}`);
    client.close();
    expect(rows[0]?.ready_at).toEqual(expect.any(Number));
    expect(indexed.rows[0]?.chunks).toBe(3);
    const page = await openai.vectorStores.search(vectorStoreId, { query: 'How many days for refunds?' });
    expect(page.data[0]).toMatchObject({ file_id: fileIds[0], content: [{ type: 'text', text: REFUND_CHUNK }] });
  });
});
