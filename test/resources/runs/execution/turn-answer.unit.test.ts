import { defined } from '../../../support/defined';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runs } from '../../../../src/db/schema';
import { Outbox } from '../../../../src/resources/runs/execution/outbox';
import { TurnAnswer } from '../../../../src/resources/runs/execution/turn-answer';
import { createFakeUpstream, fakeThread } from '../../../support/fake-upstream';
import { createTestGateway, type TestGateway } from '../../../support/gateway';

/**
 * A turn's answer as it streams, below the engine: what a file search call keeps of its
 * arguments. A model may send megabytes of them; the round reads its queries from them as they
 * come (search-arguments.ts), and keeps nothing else.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
});
afterAll(() => gateway?.close());

describe('TurnAnswer', () => {
  it("keeps a file search's queries as its arguments stream, not the arguments", async () => {
    const tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
    const openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
    const assistant = await openai.beta.assistants.create({ model: 'fake-model', tools: [{ type: 'file_search' }] });
    const created = await openai.beta.threads.createAndRunPoll({
      assistant_id: assistant.id,
      thread: fakeThread('a run to stand for', [{ reply: 'Hi.' }]),
    });
    const run = defined((await gateway.deps.db.select().from(runs).where(eq(runs.id, created.id)))[0]);

    const answer = new TurnAnswer(gateway.deps, new Outbox(undefined), () => run, {
      hosted: new Map([['file_search', 'file_search']]),
      includeContent: false,
    });
    const long = 'a'.repeat(100_000);
    const args = JSON.stringify({ queries: [long, 'refunds'] });
    for (let at = 0; at < args.length; at += 4096) {
      const first = at === 0 ? { id: 'call_1', name: 'file_search' } : {};
      await answer.toolCall({ index: 0, ...first, arguments: args.slice(at, at + 4096) });
    }
    const call = defined(answer.calls()[0]);
    expect(call.hosted?.kind === 'file_search' ? call.hosted.queries.queries() : null).toEqual([
      long.slice(0, 4096),
      'refunds',
    ]);
    expect(call.arguments.short).toBe(true);
    expect(call.arguments.toString()).toBe('');
  });
});
