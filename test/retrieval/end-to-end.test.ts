import { defined } from '../support/defined';
import type OpenAI from 'openai';
import { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, fakeThread, type FakeScenario } from '../support/fake-upstream';
import { createTestGateway, type Tenant, type TestGateway } from '../support/gateway';

/**
 * Retrieval end to end, every piece through the API with the official SDK, nothing seeded: a file
 * uploaded (multipart), a vector store filled by a batch and ingested in the background (extract,
 * chunk, embed with the fake's embeddings, write), searched, then an assistant with file_search
 * answering a thread, polled and streamed, its step showing the search and the answer citing the
 * file.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;

const POLICY = [
  '# Returns',
  '',
  'Refunds are granted within 30 days of purchase, with the receipt.',
  '',
  '# Shipping',
  '',
  'Parcels leave the warehouse in Lyon every weekday and arrive within five business days.',
].join('\n');
const INCLUDE = ['step_details.tool_calls[*].file_search.results[*].content' as const];
const ANSWER = 'Within 30 days 【0†returns.md】.';
const searchThenAnswer = (query: string): FakeScenario[] => [
  { tool_calls: [{ name: 'file_search', arguments: { queries: [query] } }] },
  { reply: ANSWER },
];

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  tenant = await gateway.tenant();
  // One default key: it runs the chat model and embeds (text-embedding-3-small) alike.
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
});
afterAll(() => gateway?.close());

describe('retrieval, end to end', () => {
  let storeId: string;
  let fileId: string;

  it('uploads a file, fills a store with it by a batch, and finds the right chunk first', async () => {
    const file = await openai.files.create({
      file: await toFile(Buffer.from(POLICY), 'returns.md'),
      purpose: 'assistants',
    });
    fileId = file.id;
    const other = await openai.files.create({
      file: await toFile(
        Buffer.from('Our office is in Paris, near the river. Visitors sign in at the desk.'),
        'office.txt',
      ),
      purpose: 'assistants',
    });
    const store = await openai.vectorStores.create({
      name: 'Handbook',
      chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 100, chunk_overlap_tokens: 0 } },
    });
    storeId = store.id;
    const batch = await openai.vectorStores.fileBatches.createAndPoll(
      store.id,
      { file_ids: [file.id, other.id] },
      { pollIntervalMs: 20 },
    );
    expect(batch).toMatchObject({
      status: 'completed',
      file_counts: { completed: 2, failed: 0, in_progress: 0, total: 2 },
    });
    expect(await openai.vectorStores.retrieve(store.id)).toMatchObject({
      status: 'completed',
      file_counts: { completed: 2 },
    });

    // The file's content as the store holds it: its text, chunked.
    const content = await openai.vectorStores.files.content(file.id, { vector_store_id: store.id });
    const text = content.data.map((part) => part.text).join('');
    expect(text).toContain('Refunds are granted within 30 days');

    const results = await openai.vectorStores.search(store.id, {
      query: 'refunds granted within days of purchase',
      max_num_results: 3,
    });
    expect(results.data[0]).toMatchObject({ file_id: file.id, filename: 'returns.md' });
    expect(defined(defined(results.data[0]).content[0]).text).toContain('Refunds are granted within 30 days');
    expect(results.data.map((result) => result.file_id)).not.toEqual([other.id]);
  });

  it('answers a thread with file_search, polled: the step shows the search, the answer cites the file', async () => {
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      instructions: 'Answer from the handbook.',
      tools: [{ type: 'file_search' }],
      tool_resources: { file_search: { vector_store_ids: [storeId] } },
    });
    const thread = await openai.beta.threads.create(
      fakeThread('How long do I have for a refund?', searchThenAnswer('refunds granted within days')),
    );
    const run = await openai.beta.threads.runs.createAndPoll(
      thread.id,
      { assistant_id: assistant.id },
      { pollIntervalMs: 20 },
    );
    expect(run.status).toBe('completed');

    const steps = await openai.beta.threads.runs.steps.list(run.id, {
      thread_id: thread.id,
      order: 'asc',
      include: INCLUDE,
    });
    expect(steps.data.map((step) => step.type)).toEqual(['tool_calls', 'message_creation']);
    const details = defined(steps.data[0]).step_details;
    const call = details.type === 'tool_calls' ? details.tool_calls[0] : undefined;
    expect(call?.type).toBe('file_search');
    const results = call?.type === 'file_search' ? defined(call.file_search.results) : [];
    expect(results[0]).toMatchObject({ file_id: fileId, file_name: 'returns.md' });
    expect(defined(defined(defined(results[0]).content)[0]).text).toContain('Refunds are granted within 30 days');

    const [answer] = (await openai.beta.threads.messages.list(thread.id, { limit: 1 })).data;
    const part = defined(defined(answer).content[0]);
    expect(part.type).toBe('text');
    if (part.type !== 'text') return;
    expect(part.text.value).toBe(ANSWER);
    expect(part.text.annotations).toEqual([
      expect.objectContaining({ type: 'file_citation', text: '【0†returns.md】', file_citation: { file_id: fileId } }),
    ]);
  });

  it('answers the same way streamed, with the SDK’s stream helpers', async () => {
    const assistant = await openai.beta.assistants.create({ model: 'fake-model', tools: [{ type: 'file_search' }] });
    const thread = await openai.beta.threads.create({
      ...fakeThread('Refund window?', searchThenAnswer('refunds within days')),
      tool_resources: { file_search: { vector_store_ids: [storeId] } },
    });
    const stream = openai.beta.threads.runs.stream(thread.id, { assistant_id: assistant.id });
    const toolCalls: string[] = [];
    stream.on('toolCallCreated', (call) => toolCalls.push(call.type));
    const run = await stream.finalRun();
    expect(run.status).toBe('completed');
    expect(toolCalls).toEqual(['file_search']);
    const [message] = await stream.finalMessages();
    const part = defined(defined(message).content[0]);
    expect(part.type === 'text' && part.text.annotations).toEqual([
      expect.objectContaining({ type: 'file_citation', file_citation: { file_id: fileId } }),
    ]);
  });
});
