import { defined } from '../../support/defined';
import { count, eq, inArray } from 'drizzle-orm';
import { NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { messages, runs, runSteps, threads } from '../../../src/db/schema';
import { createFakeUpstream } from '../../support/fake-upstream';
import { storeFile } from '../../support/files';
import { createTestGateway, errorOf, json, type TestGateway } from '../../support/gateway';
import { heldThread, member, startRun, waitForRun, type Member } from '../../support/threads';

/**
 * Threads: create (empty, with messages, metadata and tool_resources), retrieve, modify, delete
 * (with everything in them, in one batch; refused while a run holds the thread), their bounds and
 * errors, and organisation keys naming the workspace.
 */

let gateway: TestGateway;
let alice: Member;

beforeAll(async () => {
  const upstream = createFakeUpstream();
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  alice = await member(gateway);
});
afterAll(() => gateway.close());

const rowsOf = async (threadId: string) => {
  const db = gateway.database.db;
  const runIds = (await db.select({ id: runs.id }).from(runs).where(eq(runs.threadId, threadId))).map((run) => run.id);
  const [thread] = await db.select({ n: count() }).from(threads).where(eq(threads.id, threadId));
  const [message] = await db.select({ n: count() }).from(messages).where(eq(messages.threadId, threadId));
  const [step] = runIds.length
    ? await db.select({ n: count() }).from(runSteps).where(inArray(runSteps.runId, runIds))
    : [{ n: 0 }];
  return { threads: defined(thread).n, messages: defined(message).n, runs: runIds.length, steps: defined(step).n };
};

describe('creating a thread', () => {
  it('creates an empty thread with the SDK, and retrieve answers the same object', async () => {
    const thread = await alice.openai.beta.threads.create();
    expect(thread).toEqual({
      id: expect.stringMatching(/^thread_[A-Za-z0-9]{24}$/),
      object: 'thread',
      created_at: expect.any(Number),
      metadata: {},
      tool_resources: {},
    });
    expect(Math.abs(thread.created_at - gateway.clock.now() / 1000)).toBeLessThanOrEqual(1);
    expect(await alice.openai.beta.threads.retrieve(thread.id)).toEqual(thread);
  });

  it('creates an empty thread from an empty body, as OpenAI’s example sends it, and from no body at all', async () => {
    const key = { 'x-gateway-api-key': alice.tenant.workspaceKey };
    for (const init of [{ headers: { ...key, 'content-type': 'application/json' }, body: '' }, { headers: key }]) {
      const response = await gateway.app.request('/v1/threads', { method: 'POST', ...init });
      expect(response.status).toBe(200);
      expect(await json(response)).toMatchObject({ object: 'thread', metadata: {}, tool_resources: {} });
    }
  });

  it('creates a thread with its messages in order, its metadata and its tool_resources', async () => {
    const file = await storeFile(gateway, alice.tenant, { filename: 'data.csv', content: 'a,b' });
    const thread = await alice.openai.beta.threads.create({
      messages: [
        { role: 'user', content: 'Hello, what is AI?', metadata: { n: '1' } },
        { role: 'assistant', content: 'A field of computer science.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'And this?' },
            { type: 'image_url', image_url: { url: 'https://example.com/ai.png', detail: 'high' } },
          ],
        },
      ],
      metadata: { user: 'abc123' },
      tool_resources: { code_interpreter: { file_ids: [file] } },
    });
    expect(thread).toMatchObject({
      metadata: { user: 'abc123' },
      tool_resources: { code_interpreter: { file_ids: [file] } },
    });
    const listed = await alice.openai.beta.threads.messages.list(thread.id, { order: 'asc' });
    expect(
      listed.data.map(({ role, content, metadata, run_id, assistant_id, thread_id }) => ({
        role,
        content,
        metadata,
        run_id,
        assistant_id,
        thread_id,
      })),
    ).toEqual([
      {
        role: 'user',
        content: [{ type: 'text', text: { value: 'Hello, what is AI?', annotations: [] } }],
        metadata: { n: '1' },
        run_id: null,
        assistant_id: null,
        thread_id: thread.id,
      },
      {
        role: 'assistant',
        content: [{ type: 'text', text: { value: 'A field of computer science.', annotations: [] } }],
        metadata: {},
        run_id: null,
        assistant_id: null,
        thread_id: thread.id,
      },
      {
        role: 'user',
        content: [
          { type: 'text', text: { value: 'And this?', annotations: [] } },
          { type: 'image_url', image_url: { url: 'https://example.com/ai.png', detail: 'high' } },
        ],
        metadata: {},
        run_id: null,
        assistant_id: null,
        thread_id: thread.id,
      },
    ]);
  });

  it.each([
    [
      'a bad message role',
      {
        messages: [
          { role: 'user', content: 'ok' },
          { role: 'tool', content: 'x' },
        ],
      },
      'invalid_value',
      'messages[1].role',
    ],
    [
      'a message without content',
      { messages: [{ role: 'user' }] },
      'missing_required_parameter',
      'messages[0].content',
    ],
    [
      'image_file content of no file',
      {
        messages: [
          { role: 'user', content: 'ok' },
          { role: 'user', content: [{ type: 'image_file', image_file: { file_id: 'file-1' } }] },
        ],
      },
      'invalid_value',
      'messages[1].content[0].image_file.file_id',
    ],
    [
      '1001 messages',
      { messages: Array.from({ length: 1001 }, () => ({ role: 'user', content: 'x' })) },
      'array_above_max_length',
      'messages',
    ],
    [
      'two vector stores',
      { tool_resources: { file_search: { vector_store_ids: ['vs_1', 'vs_2'] } } },
      'array_above_max_length',
      'tool_resources.file_search.vector_store_ids',
    ],
    [
      '21 code interpreter files',
      { tool_resources: { code_interpreter: { file_ids: Array.from({ length: 21 }, (_, i) => `file-${i}`) } } },
      'array_above_max_length',
      'tool_resources.code_interpreter.file_ids',
    ],
    ['a metadata key of 65', { metadata: { ['k'.repeat(65)]: 'v' } }, 'string_above_max_length', 'metadata'],
    ['an unknown field', { name: 'x' }, 'unknown_parameter', 'name'],
    ['a body that is not an object', [], 'invalid_type', null],
  ])('refuses %s with a 400 naming the field, and writes nothing', async (_, body, code, param) => {
    const [before] = await gateway.database.db
      .select({ n: count() })
      .from(threads)
      .where(eq(threads.workspaceId, alice.tenant.workspace.id));
    const error = await errorOf(await alice.request('/v1/threads', { body }));
    expect(error).toMatchObject({ status: 400, code, param });
    const [after] = await gateway.database.db
      .select({ n: count() })
      .from(threads)
      .where(eq(threads.workspaceId, alice.tenant.workspace.id));
    expect(defined(after).n).toBe(defined(before).n);
  });

  it('creates the thread in the workspace an organisation key names, and only there', async () => {
    const created = await gateway.request('/v1/threads', {
      key: alice.tenant.orgKey,
      headers: { 'x-gateway-workspace-id': alice.tenant.workspace.slug },
      body: { metadata: { by: 'org' } },
    });
    expect(created.status).toBe(200);
    const thread = await json(created);
    expect(await alice.openai.beta.threads.retrieve(thread.id)).toMatchObject({ metadata: { by: 'org' } });
    const withoutWorkspace = await gateway.request('/v1/threads', { key: alice.tenant.orgKey, body: {} });
    expect(await errorOf(withoutWorkspace)).toMatchObject({ status: 400, param: 'x-gateway-workspace-id' });
  });
});

describe('modifying a thread', () => {
  it('replaces metadata and tool_resources when sent, keeps them when not, and clears them with null', async () => {
    const store = await alice.openai.vectorStores.create({ name: 'notes' });
    const file = await storeFile(gateway, alice.tenant, { filename: 'data.csv', content: 'a,b' });
    const thread = await alice.openai.beta.threads.create({
      metadata: { a: '1' },
      tool_resources: { file_search: { vector_store_ids: [store.id] } },
    });
    const renamed = await alice.openai.beta.threads.update(thread.id, {
      metadata: { modified: 'true', user: 'abc123' },
    });
    expect(renamed).toEqual({ ...thread, metadata: { modified: 'true', user: 'abc123' } });
    const moved = await alice.openai.beta.threads.update(thread.id, {
      tool_resources: { code_interpreter: { file_ids: [file] } },
    });
    expect(moved).toEqual({ ...renamed, tool_resources: { code_interpreter: { file_ids: [file] } } });
    expect(await alice.openai.beta.threads.update(thread.id, {})).toEqual(moved);
    const cleared = await json(
      await alice.request(`/v1/threads/${thread.id}`, { body: { metadata: null, tool_resources: null } }),
    );
    expect(cleared).toEqual({ ...thread, metadata: {}, tool_resources: {} });
    expect(await alice.openai.beta.threads.retrieve(thread.id)).toEqual(cleared);
  });

  it('refuses messages and bad fields, changing nothing', async () => {
    const thread = await alice.openai.beta.threads.create({ metadata: { keep: 'me' } });
    for (const [body, code, param] of [
      [{ messages: [{ role: 'user', content: 'x' }] }, 'unknown_parameter', 'messages'],
      [
        { metadata: { keep: 'changed' }, tool_resources: { file_search: { vector_store_ids: ['a', 'b'] } } },
        'array_above_max_length',
        'tool_resources.file_search.vector_store_ids',
      ],
      [{ metadata: 'x' }, 'invalid_type', 'metadata'],
    ] as const) {
      const error = await errorOf(await alice.request(`/v1/threads/${thread.id}`, { body }));
      expect(error).toMatchObject({ status: 400, code, param });
    }
    expect(await alice.openai.beta.threads.retrieve(thread.id)).toEqual(thread);
  });

  it('404s an unknown thread and another workspace’s', async () => {
    const bob = await member(gateway);
    const theirs = await bob.openai.beta.threads.create({ metadata: { owner: 'bob' } });
    for (const id of ['thread_unknown', theirs.id]) {
      const error = await errorOf(await alice.request(`/v1/threads/${id}`, { body: { metadata: { planted: 'yes' } } }));
      expect(error).toMatchObject({
        status: 404,
        code: 'thread_not_found',
        message: `No thread found with id '${id}'.`,
        param: null,
      });
    }
    expect(await bob.openai.beta.threads.retrieve(theirs.id)).toEqual(theirs);
  });
});

describe('deleting a thread', () => {
  it('deletes the thread with its messages, runs and run steps; then every path to them 404s', async () => {
    const started = await startRun(alice, [{ tool_calls: 1 }, { reply: 'Done.' }]);
    const waiting = await waitForRun(alice, started.threadId, started.runId, ['requires_action']);
    await alice.openai.beta.threads.runs.submitToolOutputs(started.runId, {
      thread_id: started.threadId,
      tool_outputs: [{ tool_call_id: waiting.required_action.submit_tool_outputs.tool_calls[0].id, output: '42' }],
    });
    await waitForRun(alice, started.threadId, started.runId, ['completed']);
    await alice.openai.beta.threads.messages.create(started.threadId, { role: 'user', content: 'Thanks' });
    const before = await rowsOf(started.threadId);
    expect(before).toEqual({ threads: 1, messages: 3, runs: 1, steps: 2 });
    const other = await alice.openai.beta.threads.create({ messages: [{ role: 'user', content: 'keep me' }] });

    expect(await alice.openai.beta.threads.delete(started.threadId)).toEqual({
      id: started.threadId,
      object: 'thread.deleted',
      deleted: true,
    });
    expect(await rowsOf(started.threadId)).toEqual({ threads: 0, messages: 0, runs: 0, steps: 0 });
    const gone = `/v1/threads/${started.threadId}`;
    for (const [method, path, body] of [
      ['GET', gone, undefined],
      ['POST', gone, {}],
      ['DELETE', gone, undefined],
      ['GET', `${gone}/messages`, undefined],
      ['POST', `${gone}/messages`, { role: 'user', content: 'x' }],
    ] as const) {
      expect(await errorOf(await alice.request(path, { method, body }))).toMatchObject({
        status: 404,
        code: 'thread_not_found',
      });
    }
    expect(await errorOf(await alice.request(`/v1/threads/${started.threadId}/runs/${started.runId}`))).toMatchObject({
      status: 404,
      code: 'run_not_found',
    });
    await expect(alice.openai.beta.threads.retrieve(started.threadId)).rejects.toBeInstanceOf(NotFoundError);
    // Another thread is untouched.
    expect((await alice.openai.beta.threads.messages.list(other.id)).data).toHaveLength(1);
  });

  it('refuses while a run holds the thread, naming it; deletes once the run is cancelled', async () => {
    const held = await heldThread(alice);
    const refused = await errorOf(await alice.request(`/v1/threads/${held.threadId}`, { method: 'DELETE' }));
    expect(refused).toEqual({
      status: 400,
      code: 'thread_has_active_run',
      param: null,
      type: 'invalid_request_error',
      message:
        `Can't delete ${held.threadId} while a run ${held.runId} is active.` +
        ` To free the thread, submit its tool outputs (POST /v1/threads/${held.threadId}/runs/${held.runId}/submit_tool_outputs), cancel it (POST /v1/threads/${held.threadId}/runs/${held.runId}/cancel) or wait for it to end.`,
    });
    expect(await rowsOf(held.threadId)).toMatchObject({ threads: 1, runs: 1 });
    await alice.openai.beta.threads.runs.cancel(held.runId, { thread_id: held.threadId });
    expect((await alice.request(`/v1/threads/${held.threadId}`, { method: 'DELETE' })).status).toBe(200);
    expect(await rowsOf(held.threadId)).toEqual({ threads: 0, messages: 0, runs: 0, steps: 0 });
  });

  it('settles a run left waiting past its expiry, then deletes the thread', async () => {
    const held = await heldThread(alice);
    const wait = gateway.deps.config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000 + 1000;
    gateway.clock.advance(wait);
    try {
      expect((await alice.request(`/v1/threads/${held.threadId}`, { method: 'DELETE' })).status).toBe(200);
      expect(await rowsOf(held.threadId)).toEqual({ threads: 0, messages: 0, runs: 0, steps: 0 });
    } finally {
      gateway.clock.advance(-wait);
    }
  });

  it('404s an unknown thread and another workspace’s, deleting nothing of theirs', async () => {
    const bob = await member(gateway);
    const theirs = await bob.openai.beta.threads.create({ messages: [{ role: 'user', content: 'mine' }] });
    for (const id of ['thread_unknown', theirs.id]) {
      const error = await errorOf(await alice.request(`/v1/threads/${id}`, { method: 'DELETE' }));
      expect(error).toMatchObject({
        status: 404,
        code: 'thread_not_found',
        message: `No thread found with id '${id}'.`,
      });
    }
    expect(await rowsOf(theirs.id)).toEqual({ threads: 1, messages: 1, runs: 0, steps: 0 });
  });
});
