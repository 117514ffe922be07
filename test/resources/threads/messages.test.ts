import { defined } from '../../support/defined';
import { asc, eq } from 'drizzle-orm';
import { BadRequestError, NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { messages, runs } from '../../../src/db/schema';
import { newId } from '../../../src/lib/ids';
import { insertThreadAndRun } from '../../../src/resources/runs/queries';
import { createFakeUpstream } from '../../support/fake-upstream';
import { freshGate } from '../../support/gates';
import { createTestGateway, errorOf, json, type TestGateway } from '../../support/gateway';
import { heldThread, member, startRun, waitForRun, type Member } from '../../support/threads';

/**
 * Messages: create (text and image_url parts; image_file parts: test/resources/threads/image-files.test.ts),
 * retrieve, modify, delete, the list paginated both ways, the bounds and errors of each, and the
 * active-run rule: a message is refused while a run holds its thread, in one statement that no
 * run's admission can slip between, and a run left behind does not hold its thread for ever.
 */

let gateway: TestGateway;
let alice: Member;
const upstream = createFakeUpstream();

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  alice = await member(gateway);
});
afterAll(() => gateway.close());

const nowSeconds = () => Math.floor(gateway.clock.now() / 1000);
const emptyThread = async (who = alice) => (await who.openai.beta.threads.create()).id;
const postMessage = (threadId: string, body: unknown, who = alice) =>
  who.request(`/v1/threads/${threadId}/messages`, { body });
const listedIds = async (threadId: string, query = '') =>
  (await json(await alice.request(`/v1/threads/${threadId}/messages${query}`))).data.map((m: { id: string }) => m.id);

describe('creating a message', () => {
  it('answers OpenAI’s message object for string content, and retrieve answers the same', async () => {
    const threadId = await emptyThread();
    const created = await alice.openai.beta.threads.messages.create(threadId, {
      role: 'user',
      content: 'How does AI work?',
      metadata: { topic: 'ai' },
    });
    expect(created).toEqual({
      id: expect.stringMatching(/^msg_[A-Za-z0-9]{24}$/),
      object: 'thread.message',
      created_at: expect.any(Number),
      assistant_id: null,
      thread_id: threadId,
      run_id: null,
      status: 'completed',
      incomplete_details: null,
      incomplete_at: null,
      completed_at: created.created_at,
      role: 'user',
      content: [{ type: 'text', text: { value: 'How does AI work?', annotations: [] } }],
      attachments: [],
      metadata: { topic: 'ai' },
    });
    expect(Math.abs(created.created_at - nowSeconds())).toBeLessThanOrEqual(1);
    expect(await alice.openai.beta.threads.messages.retrieve(created.id, { thread_id: threadId })).toEqual(created);
  });

  it('keeps text and image_url parts in order, the detail defaulting to auto, and takes assistant messages', async () => {
    const threadId = await emptyThread();
    const created = await alice.openai.beta.threads.messages.create(threadId, {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Look:' },
        { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
        { type: 'image_url', image_url: { url: 'https://example.com/b.png', detail: 'low' } },
      ],
    });
    expect(created.role).toBe('assistant');
    expect(created.content).toEqual([
      { type: 'text', text: { value: 'Look:', annotations: [] } },
      { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'auto' } },
      { type: 'image_url', image_url: { url: 'https://example.com/b.png', detail: 'low' } },
    ]);
  });

  it('takes content and metadata at their bounds', async () => {
    const threadId = await emptyThread();
    const metadata = Object.fromEntries(
      Array.from({ length: 16 }, (_, i) => [`${String(i).padStart(2, '0')}${'k'.repeat(62)}`, 'v'.repeat(512)]),
    );
    const parts = Array.from({ length: 100 }, (_, i) => ({ type: 'text', text: `part ${i}` }));
    const response = await postMessage(threadId, { role: 'user', content: parts, metadata });
    expect(response.status).toBe(200);
    const created = await json(response);
    expect(created.content).toHaveLength(100);
    expect(created.metadata).toEqual(metadata);
    const long = await postMessage(threadId, { role: 'user', content: 'x'.repeat(256_000) });
    expect(long.status).toBe(200);
  });

  it.each([
    ['no role', { content: 'hi' }, 'missing_required_parameter', 'role'],
    ['no content', { role: 'user' }, 'missing_required_parameter', 'content'],
    ['role system', { role: 'system', content: 'hi' }, 'invalid_value', 'role'],
    ['empty parts', { role: 'user', content: [] }, 'array_below_min_length', 'content'],
    [
      '101 parts',
      { role: 'user', content: Array.from({ length: 101 }, () => ({ type: 'text', text: 'x' })) },
      'array_above_max_length',
      'content',
    ],
    ['text too long', { role: 'user', content: 'x'.repeat(256_001) }, 'string_above_max_length', 'content'],
    [
      'a part of an unknown type',
      { role: 'user', content: [{ type: 'video', video: {} }] },
      'invalid_value',
      'content[0].type',
    ],
    [
      'an image_url without url',
      { role: 'user', content: [{ type: 'image_url', image_url: {} }] },
      'missing_required_parameter',
      'content[0].image_url.url',
    ],
    [
      'a bad detail',
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x.test/a.png', detail: 'max' } }] },
      'invalid_value',
      'content[0].image_url.detail',
    ],
    [
      '17 metadata pairs',
      {
        role: 'user',
        content: 'hi',
        metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])),
      },
      'invalid_value',
      'metadata',
    ],
    [
      'a metadata value of 513',
      { role: 'user', content: 'hi', metadata: { k: 'v'.repeat(513) } },
      'string_above_max_length',
      'metadata.k',
    ],
    ['an unknown field', { role: 'user', content: 'hi', file_ids: [] }, 'unknown_parameter', 'file_ids'],
    [
      'image_file content of no file',
      {
        role: 'user',
        content: [
          { type: 'text', text: 'see' },
          { type: 'image_file', image_file: { file_id: 'file-1' } },
        ],
      },
      'invalid_value',
      'content[1].image_file.file_id',
    ],
  ])('refuses %s with a 400 naming the field, and writes nothing', async (_, body, code, param) => {
    const threadId = await emptyThread();
    const error = await errorOf(await postMessage(threadId, body));
    expect(error).toMatchObject({ status: 400, code, param, type: 'invalid_request_error' });
    expect(await listedIds(threadId)).toEqual([]);
  });

  it('404s an unknown thread, and a thread of another workspace', async () => {
    const bob = await member(gateway);
    const theirs = await emptyThread(bob);
    for (const threadId of ['thread_unknown', theirs]) {
      const error = await errorOf(await postMessage(threadId, { role: 'user', content: 'hi' }));
      expect(error).toMatchObject({
        status: 404,
        code: 'thread_not_found',
        message: `No thread found with id '${threadId}'.`,
      });
    }
    expect(await bob.openai.beta.threads.messages.list(theirs).then((page) => page.data)).toEqual([]);
  });
});

describe('retrieving, modifying and deleting a message', () => {
  it('modifies only the metadata, replacing it; null clears it; an empty body changes nothing', async () => {
    const threadId = await emptyThread();
    const created = await alice.openai.beta.threads.messages.create(threadId, {
      role: 'user',
      content: 'Hi',
      metadata: { a: '1', b: '2' },
    });
    const modified = await alice.openai.beta.threads.messages.update(created.id, {
      thread_id: threadId,
      metadata: { c: '3' },
    });
    expect(modified).toEqual({ ...created, metadata: { c: '3' } });
    expect(await alice.openai.beta.threads.messages.retrieve(created.id, { thread_id: threadId })).toEqual(modified);
    const unchanged = await alice.request(`/v1/threads/${threadId}/messages/${created.id}`, {
      method: 'POST',
      body: '',
      headers: { 'content-type': 'application/json' },
    });
    expect(await json(unchanged)).toEqual(modified);
    const cleared = await json(
      await alice.request(`/v1/threads/${threadId}/messages/${created.id}`, { body: { metadata: null } }),
    );
    expect(cleared.metadata).toEqual({});
  });

  it('refuses anything but metadata in a modification', async () => {
    const threadId = await emptyThread();
    const created = await alice.openai.beta.threads.messages.create(threadId, { role: 'user', content: 'Hi' });
    for (const [body, code, param] of [
      [{ content: 'changed' }, 'unknown_parameter', 'content'],
      [{ metadata: { k: 1 } }, 'invalid_type', 'metadata.k'],
    ] as const) {
      const error = await errorOf(await alice.request(`/v1/threads/${threadId}/messages/${created.id}`, { body }));
      expect(error).toMatchObject({ status: 400, code, param });
    }
    expect(await alice.openai.beta.threads.messages.retrieve(created.id, { thread_id: threadId })).toEqual(created);
  });

  it('deletes a message: OpenAI’s deletion object, then 404s; the other messages stay', async () => {
    const threadId = (
      await alice.openai.beta.threads.create({
        messages: [
          { role: 'user', content: 'one' },
          { role: 'user', content: 'two' },
        ],
      })
    ).id;
    const [second, first] = await listedIds(threadId);
    expect(await alice.openai.beta.threads.messages.delete(first, { thread_id: threadId })).toEqual({
      id: first,
      object: 'thread.message.deleted',
      deleted: true,
    });
    expect(await listedIds(threadId)).toEqual([second]);
    for (const method of ['GET', 'POST', 'DELETE']) {
      const response = await alice.request(`/v1/threads/${threadId}/messages/${first}`, {
        method,
        body: method === 'POST' ? {} : undefined,
      });
      expect(await errorOf(response)).toMatchObject({
        status: 404,
        code: 'message_not_found',
        message: `No message found with id '${first}'.`,
        param: null,
      });
    }
    await expect(alice.openai.beta.threads.messages.retrieve(first, { thread_id: threadId })).rejects.toBeInstanceOf(
      NotFoundError,
    );
  });

  it('finds a message only through its own thread, in its own workspace', async () => {
    const threadId = (await alice.openai.beta.threads.create({ messages: [{ role: 'user', content: 'mine' }] })).id;
    const [messageId] = await listedIds(threadId);
    const otherThread = await emptyThread();
    const bob = await member(gateway);
    for (const method of ['GET', 'POST', 'DELETE']) {
      const body = method === 'POST' ? { metadata: { planted: 'yes' } } : undefined;
      const viaOtherThread = await alice.request(`/v1/threads/${otherThread}/messages/${messageId}`, { method, body });
      expect(await errorOf(viaOtherThread)).toMatchObject({ status: 404, code: 'message_not_found' });
      const viaUnknownThread = await alice.request(`/v1/threads/thread_nope/messages/${messageId}`, { method, body });
      expect(await errorOf(viaUnknownThread)).toMatchObject({ status: 404, code: 'thread_not_found' });
      const byAnotherWorkspace = await bob.request(`/v1/threads/${threadId}/messages/${messageId}`, { method, body });
      expect(await errorOf(byAnotherWorkspace)).toMatchObject({ status: 404, code: 'thread_not_found' });
    }
    expect(await alice.openai.beta.threads.messages.retrieve(messageId, { thread_id: threadId })).toMatchObject({
      metadata: {},
    });
  });
});

describe('listing messages', () => {
  let threadId: string;
  let ids: string[]; // oldest first

  beforeAll(async () => {
    threadId = await emptyThread();
    ids = [];
    for (let i = 0; i < 7; i++)
      ids.push((await alice.openai.beta.threads.messages.create(threadId, { role: 'user', content: `m${i}` })).id);
  });

  /** Every page of the list, following `after` from the start, then `before` back from the end. */
  async function walk(order: 'asc' | 'desc', limit: number) {
    const forward: string[][] = [];
    let page = await json(await alice.request(`/v1/threads/${threadId}/messages?order=${order}&limit=${limit}`));
    forward.push(page.data.map((m: { id: string }) => m.id));
    while (page.has_more) {
      expect(page.last_id).toBe(defined(forward.at(-1)).at(-1));
      page = await json(
        await alice.request(`/v1/threads/${threadId}/messages?order=${order}&limit=${limit}&after=${page.last_id}`),
      );
      forward.push(page.data.map((m: { id: string }) => m.id));
    }
    const backward: string[][] = [defined(forward.at(-1))];
    let first = page.first_id;
    for (;;) {
      const back = await json(
        await alice.request(`/v1/threads/${threadId}/messages?order=${order}&limit=${limit}&before=${first}`),
      );
      if (back.data.length === 0) {
        expect(back).toMatchObject({ first_id: null, last_id: null, has_more: false });
        break;
      }
      backward.unshift(back.data.map((m: { id: string }) => m.id));
      first = back.first_id;
    }
    return { forward, backward };
  }

  it.each([
    ['asc', 3],
    ['desc', 3],
    ['asc', 7],
    ['desc', 1],
  ] as const)('pages in order %s, %i at a time, both ways', async (order, limit) => {
    const expected = order === 'asc' ? ids : [...ids].reverse();
    const { forward, backward } = await walk(order, limit);
    expect(forward.flat()).toEqual(expected);
    expect(forward.every((page) => page.length <= limit)).toBe(true);
    // Walking back with `before` from the last page gives the same items (pages may be cut differently).
    expect(backward.flat()).toEqual(expected);
  });

  it('defaults to 20, newest first, and says when there is more', async () => {
    const page = await json(await alice.request(`/v1/threads/${threadId}/messages`));
    expect(page).toMatchObject({ object: 'list', first_id: ids.at(-1), last_id: ids[0], has_more: false });
    expect(page.data.map((m: { id: string }) => m.id)).toEqual([...ids].reverse());
    const two = await json(await alice.request(`/v1/threads/${threadId}/messages?limit=2&after=${ids[4]}`));
    expect(two).toMatchObject({ first_id: ids[3], last_id: ids[2], has_more: true });
  });

  it('pages with the SDK’s auto-pagination', async () => {
    const seen: string[] = [];
    for await (const message of alice.openai.beta.threads.messages.list(threadId, { limit: 2, order: 'asc' }))
      seen.push(message.id);
    expect(seen).toEqual(ids);
  });

  it.each([
    ['limit=0', 'value_below_minimum', 'limit'],
    ['limit=101', 'value_above_maximum', 'limit'],
    ['limit=abc', 'invalid_value', 'limit'],
    ['order=up', 'invalid_value', 'order'],
    ['after=msg_unknown', 'invalid_value', 'after'],
    ['before=msg_unknown', 'invalid_value', 'before'],
    ['page=2', 'unknown_parameter', 'page'],
  ])('refuses ?%s naming the parameter', async (query, code, param) => {
    const error = await errorOf(await alice.request(`/v1/threads/${threadId}/messages?${query}`));
    expect(error).toMatchObject({ status: 400, code, param });
  });

  it('keeps one run’s messages with run_id, paged both ways too', async () => {
    const started = await startRun(alice, { reply: 'Answer.' });
    await waitForRun(alice, started.threadId, started.runId, ['completed']);
    const own = await json(await alice.request(`/v1/threads/${started.threadId}/messages?run_id=${started.runId}`));
    expect(own.data).toHaveLength(1);
    expect(own.data[0]).toMatchObject({
      role: 'assistant',
      run_id: started.runId,
      content: [{ text: { value: 'Answer.' } }],
    });
    const all = await json(await alice.request(`/v1/threads/${started.threadId}/messages?order=asc`));
    expect(all.data.map((m: { role: string }) => m.role)).toEqual(['user', 'assistant']);
    const before = await json(
      await alice.request(`/v1/threads/${started.threadId}/messages?run_id=${started.runId}&before=${all.data[0].id}`),
    );
    expect(before).toMatchObject({ data: [{ id: own.data[0].id }], has_more: false });
  });
});

describe('the active-run rule', () => {
  /** The refusal, saying what frees the thread from a run in `status`. */
  const refusal = (
    threadId: string,
    runId: string,
    status: 'queued' | 'in_progress' | 'requires_action' | 'cancelling' = 'requires_action',
  ) => {
    const submit = `submit its tool outputs (POST /v1/threads/${threadId}/runs/${runId}/submit_tool_outputs), `;
    const cancel = `cancel it (POST /v1/threads/${threadId}/runs/${runId}/cancel) or wait for it to end`;
    return {
      status: 400,
      code: 'thread_has_active_run',
      param: null,
      type: 'invalid_request_error',
      message:
        `Can't add messages to ${threadId} while a run ${runId} is active. To free the thread, ` +
        `${status === 'cancelling' ? 'wait for its cancellation to end' : `${status === 'requires_action' ? submit : ''}${cancel}`}.`,
    };
  };

  it('refuses a message while a run waits for tool outputs, naming the run, and takes it once the run ends', async () => {
    const held = await heldThread(alice);
    const before = await listedIds(held.threadId);
    expect(await errorOf(await postMessage(held.threadId, { role: 'user', content: 'Are you there?' }))).toEqual(
      refusal(held.threadId, held.runId),
    );
    await expect(
      alice.openai.beta.threads.messages.create(held.threadId, { role: 'user', content: 'Hello?' }),
    ).rejects.toBeInstanceOf(BadRequestError);
    expect(await listedIds(held.threadId)).toEqual(before);
    await alice.openai.beta.threads.runs.submitToolOutputs(held.runId, {
      thread_id: held.threadId,
      tool_outputs: [{ tool_call_id: held.toolCallId, output: '42' }],
    });
    expect((await waitForRun(alice, held.threadId, held.runId, ['completed'])).status).toBe('completed');
    const created = await alice.openai.beta.threads.messages.create(held.threadId, { role: 'user', content: 'Thanks' });
    expect((await listedIds(held.threadId))[0]).toBe(created.id);
  });

  it('refuses a message while a run is executing', async () => {
    // Executing for as long as its provider holds the answer.
    const gate = freshGate('executing');
    const started = await startRun(alice, { reply: 'Slowly.', hold: gate });
    expect(await errorOf(await postMessage(started.threadId, { role: 'user', content: 'Wait' }))).toEqual(
      refusal(started.threadId, started.runId, 'in_progress'),
    );
    upstream.openGate(gate);
    expect((await waitForRun(alice, started.threadId, started.runId, ['completed'])).status).toBe('completed');
    expect((await postMessage(started.threadId, { role: 'user', content: 'Next' })).status).toBe(200);
  });

  it.each([
    ['queued', false],
    ['in_progress', false],
    ['requires_action', false],
    ['cancelling', false],
    ['completed', true],
    ['failed', true],
    ['cancelled', true],
    ['expired', true],
    ['incomplete', true],
  ] as const)(
    'with the thread’s run %s, a message is admitted: %s (else told what frees the thread)',
    async (status, admitted) => {
      const held = await heldThread(alice);
      // A run in each status, its lease and expiry far ahead: set in the database, as another
      // process executing it would have.
      const future = gateway.clock.now() + 3_600_000;
      await gateway.database.db
        .update(runs)
        .set({ status, leaseExpiresAt: future, expiresAt: future })
        .where(eq(runs.id, held.runId));
      const response = await postMessage(held.threadId, { role: 'user', content: 'Now?' });
      if (admitted) expect(response.status).toBe(200);
      else expect(await errorOf(response)).toEqual(refusal(held.threadId, held.runId, status));
      await gateway.database.db
        .update(runs)
        .set({ status: 'cancelled', leaseExpiresAt: null })
        .where(eq(runs.id, held.runId));
    },
  );

  it('settles a run left waiting for tool outputs past its expiry, then takes the message', async () => {
    const held = await heldThread(alice);
    gateway.clock.advance(gateway.deps.config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000 + 1000);
    try {
      const response = await postMessage(held.threadId, { role: 'user', content: 'Still there?' });
      expect(response.status).toBe(200);
      expect(await json(await alice.request(`/v1/threads/${held.threadId}/runs/${held.runId}`))).toMatchObject({
        status: 'expired',
      });
    } finally {
      gateway.clock.advance(-(gateway.deps.config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000 + 1000));
    }
  });

  it('settles a run whose executor is gone (its lease ran out), then takes the message', async () => {
    const held = await heldThread(alice);
    // As after a crash mid-turn: in progress, its lease in the past, no process renewing it.
    await gateway.database.db
      .update(runs)
      .set({ status: 'in_progress', leaseExpiresAt: gateway.clock.now() - 1000 })
      .where(eq(runs.id, held.runId));
    const response = await postMessage(held.threadId, { role: 'user', content: 'Anyone?' });
    expect(response.status).toBe(200);
    expect(await json(await alice.request(`/v1/threads/${held.threadId}/runs/${held.runId}`))).toMatchObject({
      status: 'failed',
      last_error: { code: 'server_error', message: expect.stringMatching(/stopped before the run finished/) },
    });
  });

  it('is atomic: no message lands after a run admitted at the same time, and none is refused before it', async () => {
    const threadId = await emptyThread();
    // The run admitted on the thread, as a run creation writes it: the run and its own message in
    // one batch. Its message's place in the thread is when the run became active.
    const template = await heldThread(alice);
    const [row] = await gateway.database.db.select().from(runs).where(eq(runs.id, template.runId));
    const { seq: _seq, ...templateRun } = defined(row);
    const run = {
      ...templateRun,
      id: newId('run'),
      threadId,
      status: 'requires_action' as const,
      expiresAt: gateway.clock.now() + 3_600_000,
      leaseExpiresAt: null,
    };
    const at = gateway.clock.now();
    const runMessage = {
      id: newId('msg'),
      threadId,
      workspaceId: alice.tenant.workspace.id,
      createdAt: at,
      role: 'user' as const,
      content: [{ type: 'text' as const, text: { value: 'the run’s own', annotations: [] } }],
      status: 'completed' as const,
      assistantId: null,
      runId: null,
      attachments: [],
      metadata: {},
      incompleteDetails: null,
      completedAt: at,
      incompleteAt: null,
    };
    const first = await postMessage(threadId, { role: 'user', content: 'before everything' });
    expect(first.status).toBe(200);
    const racing: Promise<Response>[] = [];
    let admission: Promise<void> | undefined;
    for (let i = 0; i < 40; i++) {
      if (i === 20) admission = insertThreadAndRun(gateway.database.db, null, [runMessage], run);
      racing.push(postMessage(threadId, { role: 'user', content: `racing ${i}` }));
      await new Promise((resolve) => setImmediate(resolve));
    }
    await admission;
    const last = await postMessage(threadId, { role: 'user', content: 'after everything' });
    expect(await errorOf(last)).toEqual(refusal(threadId, run.id));

    const answers = await Promise.all(racing);
    const rows = await gateway.database.db
      .select({ id: messages.id, seq: messages.seq })
      .from(messages)
      .where(eq(messages.threadId, threadId))
      .orderBy(asc(messages.seq));
    const runSeq = defined(rows.find((message) => message.id === runMessage.id)).seq;
    for (const answer of answers) {
      if (answer.status === 200) {
        const created = await json(answer);
        expect(defined(rows.find((message) => message.id === created.id)).seq).toBeLessThan(runSeq);
      } else {
        expect(await errorOf(answer)).toEqual(refusal(threadId, run.id));
      }
    }
    // Every message written is an answered one (nothing refused was written), and the first came before the run.
    const admitted = answers.filter((answer) => answer.status === 200).length;
    expect(rows).toHaveLength(admitted + 2);
    expect(defined(rows[0]).seq).toBeLessThan(runSeq);
    await gateway.database.db.update(runs).set({ status: 'cancelled' }).where(eq(runs.id, run.id));
  });

  it('admits concurrent messages on an idle thread, every one of them', async () => {
    const threadId = await emptyThread();
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => postMessage(threadId, { role: 'user', content: `m${i}` })),
    );
    expect(answers.map((answer) => answer.status)).toEqual(Array(20).fill(200));
    expect(await listedIds(threadId)).toHaveLength(20);
  });
});
