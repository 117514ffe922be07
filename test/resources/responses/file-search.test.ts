import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, fakeDirective } from '../../support/fake-upstream';
import { createTestGateway, sdkClient, type Tenant, type TestGateway } from '../../support/gateway';
import { componentErrors, responseStreamEventErrors } from '../../support/openapi';
import { seedStore } from '../../support/vector-stores';

/**
 * The file_search tool of a response over the workspace's vector store: the gateway searches for
 * the model, the response's output is a `file_search_call` (its results with
 * `include: ["file_search_call.results"]`) then the answer citing the file, whole and streamed.
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

const searchingThenAnswering = (question: string) =>
  `${question}\n${fakeDirective([
    { tool_calls: [{ name: 'file_search', arguments: { queries: ['refunds'] } }] },
    { reply: 'You have 30 days 【0†policies.md】.' },
  ])}`;

describe('file_search in a response', () => {
  it('searches the vector store, shows the search and its results when included, and cites the file', async () => {
    const store = await seedStore(gateway, tenant, [
      { filename: 'policies.md', chunks: ['Refunds are granted within 30 days of purchase.'] },
    ]);
    const tools = [{ type: 'file_search' as const, vector_store_ids: [store.id] }];
    const response = await openai.responses.create({
      model: 'fake-model',
      input: searchingThenAnswering('How long for refunds?'),
      tools,
      include: ['file_search_call.results'],
    });
    expect(componentErrors('Response', response)).toEqual([]);
    expect(response.output.map((item) => item.type)).toEqual(['file_search_call', 'message']);
    const [search, answer] = response.output;
    expect(search).toMatchObject({ type: 'file_search_call', status: 'completed', queries: ['refunds'] });
    expect(search?.type === 'file_search_call' && search.results).toEqual([
      expect.objectContaining({ file_id: store.fileIds[0], filename: 'policies.md' }),
    ]);
    expect(answer?.type === 'message' && answer.content[0]).toMatchObject({
      type: 'output_text',
      annotations: [{ type: 'file_citation', file_id: store.fileIds[0], filename: 'policies.md' }],
    });

    const stream = openai.responses.stream({
      model: 'fake-model',
      input: searchingThenAnswering('And again?'),
      tools,
    });
    const events: { type: string; data: unknown }[] = [];
    stream.on('event', (event) => events.push({ type: event.type, data: event }));
    const final = await stream.finalResponse();
    for (const event of events) expect(responseStreamEventErrors(event.type, event.data), event.type).toEqual([]);
    expect(events.map((event) => event.type)).toEqual(
      expect.arrayContaining([
        'response.file_search_call.in_progress',
        'response.file_search_call.searching',
        'response.file_search_call.completed',
      ]),
    );
    // Without include, the search shows no results, streamed and kept alike.
    const kept = await openai.responses.retrieve(final.id);
    expect(kept.output[0]).toMatchObject({ type: 'file_search_call', results: null });
    expect(final.output[0]).toMatchObject({ type: 'file_search_call', results: null });
  });
});
