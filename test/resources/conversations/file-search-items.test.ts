import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, fakeThread } from '../../support/fake-upstream';
import { createTestGateway, json, sdkClient, type Tenant, type TestGateway } from '../../support/gateway';
import { componentErrors } from '../../support/openapi';
import { seedStore } from '../../support/vector-stores';

/**
 * A run's file search as a conversation's items: a `file_search_call` (`fs_…`) before the answer,
 * its results only with `include=file_search_call.results`, and the answer's citation as an
 * `output_text` annotation naming the file.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  openai = sdkClient(gateway, tenant);
});
afterAll(() => gateway?.close());

describe('a file search as items', () => {
  it('is a file_search_call before the answer, with its results when included', async () => {
    const store = await seedStore(gateway, tenant, [
      { filename: 'policies.md', chunks: ['Refunds are granted within 30 days of purchase.'] },
    ]);
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'file_search' }],
      tool_resources: { file_search: { vector_store_ids: [store.id] } },
    });
    const run = await openai.beta.threads.createAndRunPoll({
      assistant_id: assistant.id,
      thread: fakeThread('How long for refunds?', [
        { tool_calls: [{ name: 'file_search', arguments: { queries: ['refunds'] } }] },
        { reply: 'You have 30 days 【0†policies.md】.' },
      ]),
    });
    expect(run.status).toBe('completed');

    const path = `/v1/conversations/${run.thread_id}/items?order=asc`;
    const plain = await json(await gateway.request(path, { key: tenant.workspaceKey }));
    const included = await json(
      await gateway.request(`${path}&include[]=file_search_call.results`, { key: tenant.workspaceKey }),
    );
    for (const list of [plain, included]) expect(componentErrors('ConversationItemList', list)).toEqual([]);
    expect(plain.data.map((item: { type: string }) => item.type)).toEqual(['message', 'file_search_call', 'message']);
    expect(plain.data[1]).toEqual({
      type: 'file_search_call',
      id: expect.stringMatching(/^fs_[A-Za-z0-9]+_0$/),
      status: 'completed',
      queries: ['refunds'],
      results: null,
    });
    expect(included.data[1].results).toEqual([
      {
        file_id: store.fileIds[0],
        filename: 'policies.md',
        score: expect.any(Number),
        text: 'Refunds are granted within 30 days of purchase.',
      },
    ]);
    expect(plain.data[2].content).toEqual([
      {
        type: 'output_text',
        text: 'You have 30 days 【0†policies.md】.',
        annotations: [{ type: 'file_citation', file_id: store.fileIds[0], filename: 'policies.md', index: 17 }],
        logprobs: [],
      },
    ]);
    const retrieved = await openai.conversations.items.retrieve(plain.data[1].id, {
      conversation_id: run.thread_id,
      include: ['file_search_call.results'],
    });
    expect(retrieved).toEqual(included.data[1]);
  });
});
