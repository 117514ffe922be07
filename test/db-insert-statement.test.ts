import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchRaw, batchRawResults, insertStatement, rowOf, updateStatement } from '../src/db/client';
import { endTurn } from '../src/services/runs';
import { messages, runs, runSteps, threads } from '../src/db/schema';
import { createFakeUpstream } from './support/fake-upstream';
import { createTestGateway, type TestGateway } from './support/gateway';
import { member, startRun, waitForRun } from './support/threads';

/**
 * insertStatement (src/db/client.ts), the raw insert of a run's rows on its hot path, against
 * Drizzle's builder: the rows a real run stored (a thread, messages, a run that called a tool and
 * then answered, its steps), with every kind of column (JSON, timestamps, nulls), give the same
 * SQL arguments, and written back through batchRaw they read back identical.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
});
afterAll(() => gateway?.close());

describe('insertStatement', () => {
  it('makes the arguments Drizzle makes for stored rows, and writes rows that read back the same', async () => {
    const who = await member(gateway);
    const { threadId, runId } = await startRun(who, { reply: 'Forty-two.' });
    expect((await waitForRun(who, threadId, runId, ['completed'])).status).toBe('completed');
    const db = gateway.database.db;
    const stored = {
      thread: await db.select().from(threads).where(eq(threads.id, threadId)),
      messages: await db.select().from(messages).where(eq(messages.threadId, threadId)),
      run: await db.select().from(runs).where(eq(runs.id, runId)),
      steps: await db.select().from(runSteps).where(eq(runSteps.runId, runId)),
    };
    expect(stored.messages).toHaveLength(2);
    expect(stored.steps.length).toBeGreaterThan(0);

    const pairs = [
      ...stored.thread.map((row) => [threads, row] as const),
      ...stored.messages.map((row) => [messages, row] as const),
      ...stored.run.map((row) => [runs, row] as const),
      ...stored.steps.map((row) => [runSteps, row] as const),
    ];
    for (const [table, row] of pairs) {
      const raw = insertStatement(table, row);
      const built = db.insert(table).values(row).toSQL();
      expect(raw.args).toEqual(built.params);
      expect(raw.sql).toBe(built.sql);
    }

    // Written again through batchRaw (the thread's rows deleted first), they read back identical.
    await db.batch([
      db.delete(runSteps).where(eq(runSteps.runId, runId)),
      db.delete(runs).where(eq(runs.id, runId)),
      db.delete(messages).where(eq(messages.threadId, threadId)),
      db.delete(threads).where(eq(threads.id, threadId)),
    ]);
    await batchRaw(db, pairs.map(([table, row]) => insertStatement(table, row)));
    expect({
      thread: await db.select().from(threads).where(eq(threads.id, threadId)),
      messages: await db.select().from(messages).where(eq(messages.threadId, threadId)),
      run: await db.select().from(runs).where(eq(runs.id, runId)),
      steps: await db.select().from(runSteps).where(eq(runSteps.runId, runId)),
    }).toEqual(stored);
  });

  it('updates as Drizzle does, reads the returned row as Drizzle does, and ends only a turn in progress', async () => {
    const who = await member(gateway);
    const { threadId, runId } = await startRun(who, { reply: 'Done.' });
    expect((await waitForRun(who, threadId, runId, ['completed'])).status).toBe('completed');
    const db = gateway.database.db;
    const patch = {
      status: 'incomplete' as const,
      incompleteDetails: { reason: 'max_completion_tokens' as const },
      usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
      completedAt: 7_000,
      leaseExpiresAt: null,
    };
    const raw = updateStatement(runs, patch, { sql: '"id" = ?', args: [runId] }, true);
    // The same arguments (Drizzle orders the set clause by the table's columns, this by the patch's fields).
    const sorted = (args: unknown[]) => args.map((arg) => JSON.stringify(arg)).sort();
    expect(sorted(raw.args)).toEqual(sorted(db.update(runs).set(patch).where(eq(runs.id, runId)).toSQL().params));
    const [result] = await batchRawResults(db, [raw]);
    const [stored] = await db.select().from(runs).where(eq(runs.id, runId));
    expect(stored).toMatchObject(patch);
    expect(rowOf(runs, result!.rows[0]!)).toEqual(stored);
    // The run is not in progress: endTurn changes nothing and says so.
    expect(await endTurn(db, runId, { status: 'completed', completedAt: 9_000 }, [])).toBeNull();
    expect((await db.select().from(runs).where(eq(runs.id, runId)))[0]).toEqual(stored);
  });

  it('leaves out what a row leaves undefined, so that the column’s default applies', () => {
    const statement = insertStatement(threads, { id: 'thread_x', workspaceId: 'w', metadata: {}, createdAt: 5 });
    expect(statement.sql).toBe('insert into "threads" ("id", "workspace_id", "metadata", "created_at") values (?, ?, ?, ?)');
    expect(statement.args).toEqual(['thread_x', 'w', '{}', 5]);
  });
});
