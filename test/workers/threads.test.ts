import { defined } from '../support/defined';
import { exports } from 'cloudflare:workers';
import OpenAI, { BadRequestError, NotFoundError } from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { errorOf, json } from '../support/envelope';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * Threads, messages and assistant updates inside workerd, on the libSQL server: the official SDK
 * (running in workerd too, its fetch the Worker's own) through a thread's whole life, and the
 * active-run rule with a run waiting for tool outputs in its Durable Object.
 */

const API_KEY = inject('workersTenant').runsWorkspaceKey;

let openai: OpenAI;
let virtualKey: string;

function call(path: string, init: { method?: string; body?: unknown } = {}) {
  const headers: Record<string, string> = { 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': virtualKey };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  return exports.default.fetch(`http://gateway${path}`, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
}

beforeAll(async () => {
  virtualKey = `threads-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, virtualKey);
  openai = gatewayClient({ 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': virtualKey });
});

describe('threads and messages on workerd', () => {
  it('creates a thread, adds a message, lists, modifies and deletes them, then the thread', async () => {
    const thread = await openai.beta.threads.create({
      messages: [{ role: 'user', content: 'Hello, what is AI?' }],
      metadata: { user: 'abc123' },
    });
    expect(thread).toMatchObject({ object: 'thread', metadata: { user: 'abc123' }, tool_resources: {} });

    const message = await openai.beta.threads.messages.create(thread.id, {
      role: 'user',
      content: [
        { type: 'text', text: 'And this picture?' },
        { type: 'image_url', image_url: { url: 'https://example.com/ai.png' } },
      ],
    });
    expect(message).toMatchObject({
      object: 'thread.message',
      thread_id: thread.id,
      role: 'user',
      status: 'completed',
      content: [
        { type: 'text', text: { value: 'And this picture?', annotations: [] } },
        { type: 'image_url', image_url: { url: 'https://example.com/ai.png', detail: 'auto' } },
      ],
    });

    const first = await openai.beta.threads.messages.list(thread.id, { limit: 1 });
    expect(first.data.map((m) => m.id)).toEqual([message.id]);
    expect(first.has_more).toBe(true);
    const rest = await openai.beta.threads.messages.list(thread.id, { limit: 1, after: message.id });
    expect(defined(rest.data[0]).content[0]).toMatchObject({ text: { value: 'Hello, what is AI?' } });
    const back = await openai.beta.threads.messages.list(thread.id, { limit: 1, before: defined(rest.data[0]).id });
    expect(back.data.map((m) => m.id)).toEqual([message.id]);

    expect(await openai.beta.threads.update(thread.id, { metadata: { modified: 'true' } })).toEqual({
      ...thread,
      metadata: { modified: 'true' },
    });
    const tagged = await openai.beta.threads.messages.update(message.id, {
      thread_id: thread.id,
      metadata: { seen: 'yes' },
    });
    expect(tagged).toEqual({ ...message, metadata: { seen: 'yes' } });
    expect(await openai.beta.threads.messages.retrieve(message.id, { thread_id: thread.id })).toEqual(tagged);

    expect(await openai.beta.threads.messages.delete(message.id, { thread_id: thread.id })).toEqual({
      id: message.id,
      object: 'thread.message.deleted',
      deleted: true,
    });
    expect((await openai.beta.threads.messages.list(thread.id)).data).toHaveLength(1);
    expect(await openai.beta.threads.delete(thread.id)).toEqual({
      id: thread.id,
      object: 'thread.deleted',
      deleted: true,
    });
    await expect(openai.beta.threads.retrieve(thread.id)).rejects.toBeInstanceOf(NotFoundError);
    expect(await errorOf(await call(`/v1/threads/${thread.id}/messages`))).toMatchObject({
      status: 404,
      code: 'thread_not_found',
    });
  });

  it('refuses a message and the deletion while a run waits for tool outputs, naming the run', async () => {
    const assistant = await openai.beta.assistants.create({
      model: 'fake-model',
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
    });
    // The assistant changed as the SDK does it: the run takes the new instructions.
    expect(await openai.beta.assistants.update(assistant.id, { instructions: 'Use the tool.' })).toMatchObject({
      instructions: 'Use the tool.',
    });
    const run = await openai.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        thread: { messages: [{ role: 'user', content: `Look\n#fake ${JSON.stringify({ tool_calls: 1 })}` }] },
      },
      { pollIntervalMs: 50 },
    );
    expect(run).toMatchObject({ status: 'requires_action', instructions: 'Use the tool.' });
    const refused = await errorOf(
      await call(`/v1/threads/${run.thread_id}/messages`, { body: { role: 'user', content: 'Hello?' } }),
    );
    expect(refused).toEqual({
      status: 400,
      code: 'thread_has_active_run',
      param: null,
      type: 'invalid_request_error',
      message:
        `Can't add messages to ${run.thread_id} while a run ${run.id} is active.` +
        ` To free the thread, submit its tool outputs (POST /v1/threads/${run.thread_id}/runs/${run.id}/submit_tool_outputs), cancel it (POST /v1/threads/${run.thread_id}/runs/${run.id}/cancel) or wait for it to end.`,
    });
    await expect(openai.beta.threads.delete(run.thread_id)).rejects.toBeInstanceOf(BadRequestError);

    await openai.beta.threads.runs.cancel(run.id, { thread_id: run.thread_id });
    const after = await openai.beta.threads.messages.create(run.thread_id, { role: 'user', content: 'Never mind' });
    expect(after.role).toBe('user');
    expect(await json(await call(`/v1/threads/${run.thread_id}`, { method: 'DELETE' }))).toMatchObject({
      deleted: true,
    });
  });
});
