import { defined } from '../support/defined';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { eq, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/libsql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  batchRaw,
  batchRawResults,
  insertStatement,
  insertWhere,
  rowOf,
  sqlOf,
  updateStatement,
} from '../../src/db/client';
import { TextBuilder, TextParts } from '../../src/lib/text';
import { endTurn, messageUpdate, turnRowsInsert } from '../../src/resources/runs/executor-writes';
import { newId } from '../../src/lib/ids';
import { migrateDatabase, openDatabase } from '../../src/db/node';
import { initialise } from '../../src/resources/identities/organisations';
import { insertMessageWhileIdle } from '../../src/resources/threads/queries';
import * as schema from '../../src/db/schema';
import { apiKeys, messages, organisations, runs, runSteps, threads, workspaces } from '../../src/db/schema';
import { createFakeUpstream } from '../support/fake-upstream';
import { createTestGateway, type TestGateway } from '../support/gateway';
import { member, startRun, waitForRun } from '../support/threads';

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

/** A run of a new member's that answered and completed: its thread and run ids. */
async function completedRun(): Promise<{ threadId: string; runId: string }> {
  const who = await member(gateway);
  const { threadId, runId } = await startRun(who, { reply: 'Forty-two.' });
  expect((await waitForRun(who, threadId, runId, ['completed'])).status).toBe('completed');
  return { threadId, runId };
}

describe('insertStatement', () => {
  it('makes the arguments Drizzle makes for stored rows, and writes rows that read back the same', async () => {
    const { threadId, runId } = await completedRun();
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
    await batchRaw(
      db,
      pairs.map(([table, row]) => insertStatement(table, row)),
    );
    expect({
      thread: await db.select().from(threads).where(eq(threads.id, threadId)),
      messages: await db.select().from(messages).where(eq(messages.threadId, threadId)),
      run: await db.select().from(runs).where(eq(runs.id, runId)),
      steps: await db.select().from(runSteps).where(eq(runSteps.runId, runId)),
    }).toEqual(stored);
  });

  it('refuses a field its table has no column for, in an insert and in an update alike', () => {
    const stray = { id: 'thread_stray', nonsense: 1 } as unknown as typeof threads.$inferInsert;
    expect(() => insertStatement(threads, stray)).toThrow('threads has no column nonsense');
    expect(() => updateStatement(threads, stray, { sql: '"id" = ?', args: ['thread_stray'] })).toThrow(
      'threads has no column nonsense',
    );
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
    const raw = updateStatement(runs, patch, { sql: '"id" = ?', args: [runId] }, { returning: true });
    // The same arguments (Drizzle orders the set clause by the table's columns, this by the patch's fields).
    const sorted = (args: unknown[]) => args.map((arg) => JSON.stringify(arg)).sort();
    expect(sorted(raw.args)).toEqual(sorted(db.update(runs).set(patch).where(eq(runs.id, runId)).toSQL().params));
    const [result] = await batchRawResults(db, [raw]);
    const [stored] = await db.select().from(runs).where(eq(runs.id, runId));
    expect(stored).toMatchObject(patch);
    expect(rowOf(runs, defined(defined(result).rows[0]))).toEqual(stored);
    // The run is not in progress: endTurn changes nothing, the turn's rows included, and says so.
    const [message] = await db.select().from(messages).where(eq(messages.runId, runId));
    const [step] = await db.select().from(runSteps).where(eq(runSteps.runId, runId));
    const late = { ...defined(message), id: newId('msg'), seq: undefined };
    const turn = [
      messageUpdate(runId, defined(message).id, { status: 'incomplete', incompleteAt: 9_000 }),
      ...turnRowsInsert(runId, { steps: [{ ...defined(step), id: newId('step'), seq: undefined }], message: late }),
    ];
    expect(await endTurn(db, runId, { status: 'completed', completedAt: 9_000 }, turn)).toBeNull();
    expect((await db.select().from(runs).where(eq(runs.id, runId)))[0]).toEqual(stored);
    expect(await db.select().from(messages).where(eq(messages.runId, runId))).toEqual([message]);
    expect(await db.select().from(runSteps).where(eq(runSteps.runId, runId))).toEqual([step]);
  });

  it('leaves out what a row leaves undefined, so that the column’s default applies', () => {
    const statement = insertStatement(threads, { id: 'thread_x', workspaceId: 'w', metadata: {}, createdAt: 5 });
    expect(statement.sql).toBe(
      'insert into "threads" ("id", "workspace_id", "metadata", "created_at") values (?, ?, ?, ?)',
    );
    expect(statement.args).toEqual(['thread_x', 'w', '{}', 5]);
  });
});

describe('insertMessageWhileIdle (insertWhereStatement)', () => {
  it('writes the row Drizzle’s conditional insert writes, and nothing while a run holds the thread or when it is gone', async () => {
    const { threadId, runId } = await completedRun();
    const db = gateway.database.db;
    const [stored] = await db
      .select()
      .from(messages)
      .where(eq(messages.threadId, threadId))
      .orderBy(messages.seq)
      .limit(1);
    const { seq: _seq, ...row } = defined(stored);
    const attachments = [{ file_id: 'file-abc', tools: [{ type: 'file_search' as const }] }];
    // One with every column set as a client's message sets them, one with nulls, each written too
    // by Drizzle's conditional insert (insertWhere, its condition true): the rows read back the same
    // but for ids.
    for (const variant of [
      {
        ...row,
        metadata: { k: 'v' },
        attachments,
        incompleteDetails: { reason: 'max_tokens' as const },
        completedAt: 1_700_000_000_000,
      },
      { ...row, assistantId: null, runId: null, attachments: [], incompleteDetails: null, completedAt: null },
    ]) {
      const raw = await insertMessageWhileIdle(db, { ...variant, id: 'msg_raw_variant' });
      await insertWhere(db, messages, { ...variant, id: 'msg_built_variant' }, sql`1 = 1`);
      expect(raw).not.toBeNull();
      const [rawRow] = await db.select().from(messages).where(eq(messages.id, 'msg_raw_variant'));
      const [builtRow] = await db.select().from(messages).where(eq(messages.id, 'msg_built_variant'));
      expect({ ...rawRow, id: '', seq: 0 }).toEqual({ ...builtRow, id: '', seq: 0 });
      expect({ ...raw, seq: 0 }).toEqual({ ...rawRow, seq: 0 });
      await db.delete(messages).where(eq(messages.threadId, threadId));
    }
    // A run holding the thread: nothing written.
    await db.update(runs).set({ status: 'in_progress' }).where(eq(runs.id, runId));
    expect(await insertMessageWhileIdle(db, { ...row, id: 'msg_while_held' })).toBeNull();
    await db.update(runs).set({ status: 'completed' }).where(eq(runs.id, runId));
    // The thread gone: nothing written either.
    expect(await insertMessageWhileIdle(db, { ...row, id: 'msg_no_thread', threadId: 'thread_missing' })).toBeNull();
    expect(await db.select().from(messages).where(eq(messages.threadId, threadId))).toEqual([]);
    expect(await db.select().from(messages).where(eq(messages.id, 'msg_no_thread'))).toEqual([]);
  });
});

describe('a message answer written in parts (TextParts)', () => {
  // A surrogate pair cut between two pieces, quotes, a newline, a control character, and more
  // than the 64 KiB from which the embedded client hands the parts over unjoined.
  const pieces = ['He said "hi"\n', 'caf\u00e9 \u0001 \ud83d', '\ude00 and ', 'x'.repeat(70_000), '\ud83d'];
  const builder = (given: string[]) => {
    const value = new TextBuilder();
    for (const piece of given) value.push(piece);
    return value;
  };
  const annotations = [
    { type: 'file_citation', text: '【0†a】', start_index: 0, end_index: 5, file_citation: { file_id: 'file_1' } },
  ];

  it('is the JSON Drizzle would write for the content, character for character', () => {
    const statement = messageUpdate(
      'run_x',
      'msg_x',
      { status: 'completed', completedAt: 5 },
      { value: builder(pieces), annotations },
    );
    const content = statement.args.find((arg) => arg instanceof TextParts);
    expect(content).toBeInstanceOf(TextParts);
    expect(String(content)).toBe(
      messages.content.mapToDriverValue([{ type: 'text', text: { value: pieces.join(''), annotations } }]),
    );
  });

  it('reads back as the content, through the embedded client and through a plain libSQL client', async () => {
    const who = await member(gateway);
    const { threadId, runId } = await startRun(who, { reply: 'Short.' });
    expect((await waitForRun(who, threadId, runId, ['completed'])).status).toBe('completed');
    const db = gateway.database.db;
    const [message] = await db.select().from(messages).where(eq(messages.runId, runId));
    const expected = [{ type: 'text', text: { value: pieces.join(''), annotations } }];
    // Written by an executor, while its run is in progress.
    await db.update(runs).set({ status: 'in_progress' }).where(eq(runs.id, runId));
    await batchRaw(db, [
      messageUpdate(runId, defined(message).id, { status: 'completed' }, { value: builder(pieces), annotations }),
    ]);
    expect(
      defined(
        (
          await db
            .select()
            .from(messages)
            .where(eq(messages.id, defined(message).id))
        )[0],
      ).content,
    ).toEqual(expected);

    // A client without batchWithParts (a libSQL server, Workers) is given the text joined.
    const plain = createClient({ url: `file:${gateway.database.location}` });
    try {
      const other = drizzle(plain, { schema });
      expect('batchWithParts' in other.$client).toBe(false);
      const reversed = [...pieces].reverse();
      await batchRaw(other, [
        messageUpdate(
          runId,
          defined(message).id,
          { status: 'completed' },
          { value: builder(reversed), annotations: [] },
        ),
      ]);
      const [row] = await db
        .select()
        .from(messages)
        .where(eq(messages.id, defined(message).id));
      expect(defined(row).content).toEqual([{ type: 'text', text: { value: reversed.join(''), annotations: [] } }]);
    } finally {
      plain.close();
    }
  });

  it('inserted with a turn that ends before its rows were written (turnRowsInsert), reads back as the content, the rest of the row as given', async () => {
    const who = await member(gateway);
    const { threadId, runId } = await startRun(who, { reply: 'Short.' });
    expect((await waitForRun(who, threadId, runId, ['completed'])).status).toBe('completed');
    const db = gateway.database.db;
    const withoutSeq = <T extends { seq: number }>({ seq, ...row }: T) => (expect(seq).toBeGreaterThan(0), row);
    const [stored] = await db.select().from(messages).where(eq(messages.runId, runId));
    const [storedStep] = await db.select().from(runSteps).where(eq(runSteps.runId, runId));
    const row = { ...withoutSeq(defined(stored)), id: newId('msg') };
    const step = {
      ...withoutSeq(defined(storedStep)),
      id: newId('step'),
      stepDetails: { type: 'message_creation' as const, message_creation: { message_id: row.id } },
    };
    await db.update(runs).set({ status: 'in_progress' }).where(eq(runs.id, runId));
    await batchRaw(
      db,
      turnRowsInsert(runId, { steps: [step], message: row, answer: { value: builder(pieces), annotations } }),
    );
    const [written] = await db.select().from(messages).where(eq(messages.id, row.id));
    expect(withoutSeq(defined(written))).toEqual({
      ...row,
      content: [{ type: 'text', text: { value: pieces.join(''), annotations } }],
    });
    const [writtenStep] = await db.select().from(runSteps).where(eq(runSteps.id, step.id));
    expect(withoutSeq(defined(writtenStep))).toEqual(step);
  });
});

describe('sqlOf (a raw condition in a builder)', () => {
  it('binds each mark to its argument: the builder selects what the raw condition selects', async () => {
    const { threadId, runId } = await completedRun();
    const db = gateway.database.db;
    const condition = {
      sql: '"runs"."thread_id" = ? AND "runs"."status" = ? AND "runs"."id" <> ?',
      args: [threadId, 'completed', 'run_none'],
    };
    const built = await db.select({ id: runs.id }).from(runs).where(sqlOf(condition));
    const raw = await batchRawResults(db, [
      { sql: `select "id" from "runs" where ${condition.sql}`, args: condition.args },
    ]);
    expect(built).toEqual([{ id: runId }]);
    expect(defined(raw[0]).rows.map((row) => row.id)).toEqual([runId]);
    // An argument is bound, not spliced into the text: a quote in it is a value like any other.
    expect(
      await db
        .select({ id: runs.id })
        .from(runs)
        .where(sqlOf({ sql: '"runs"."thread_id" = ?', args: [`${threadId}' OR '1' = '1`] })),
    ).toEqual([]);
  });

  it('refuses a condition whose marks and arguments differ in number', () => {
    expect(() => sqlOf({ sql: '"id" = ? AND "status" = ?', args: ['x'] })).toThrow(
      'a raw condition with 2 marks and 1 arguments',
    );
  });
});

describe('insertWhere (the builder form), in first-run set-up', () => {
  it('of set-ups racing on one empty database, exactly one creates, and nothing of the others is written', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gateway-initialise-'));
    const databases = [await openDatabase({ DATA_DIR: dataDir }), await openDatabase({ DATA_DIR: dataDir })];
    try {
      await migrateDatabase(defined(databases[0]).db);
      const results = await Promise.all(databases.flatMap(({ db }) => [initialise(db, 1), initialise(db, 2)]));
      const created = results.filter((result) => result !== null);
      expect(created).toHaveLength(1);
      const db = defined(databases[0]).db;
      expect(await db.select({ id: organisations.id }).from(organisations)).toEqual([
        { id: defined(created[0]).organisation_id },
      ]);
      expect(await db.select({ id: workspaces.id }).from(workspaces)).toEqual([
        { id: defined(created[0]).workspace_id },
      ]);
      const keys = await db.select({ organisationId: apiKeys.organisationId, kind: apiKeys.kind }).from(apiKeys);
      expect(keys.sort((a, b) => a.kind.localeCompare(b.kind))).toEqual([
        { organisationId: defined(created[0]).organisation_id, kind: 'organisation' },
        { organisationId: defined(created[0]).organisation_id, kind: 'workspace' },
      ]);
    } finally {
      for (const database of databases) database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
