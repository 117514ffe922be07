import type OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { fakeProviderKey, gatewayClient } from './gateway-client';
import { waitFor } from '../support/wait';

/**
 * A streamed chat completion with `store: true` inside workerd, as on Cloudflare: kept once its
 * stream has ended (the write kept alive by the request's waitUntil), then listed, read and deleted
 * through the Worker entry with the official SDK.
 */

// Not the runs workspace, whose chat completions test/workers/chat-completions.test.ts counts exactly.
const API_KEY = inject('workersTenant').workspaceKey;

let openai: OpenAI;

beforeAll(async () => {
  const slug = `stored-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, slug);
  openai = gatewayClient({ 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': slug });
});

describe('stored chat completions on workerd', () => {
  it('keeps a streamed completion once its stream has ended, and lists, reads and deletes it', async () => {
    // The workspace is shared with other test files: this test's completions carry a mark of their own.
    const metadata = { test: crypto.randomUUID() };
    const stream = await openai.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: `Count\n#fake ${JSON.stringify({ reply: 'one two three' })}` }],
      stream: true,
      store: true,
      metadata,
    });
    let id = '';
    for await (const chunk of stream) id = chunk.id;
    const listed = await waitFor(
      () => openai.chat.completions.list({ metadata }),
      (page) => page.data.length > 0,
    );
    expect(listed.data.map((completion) => completion.id)).toEqual([id]);
    const stored = await openai.chat.completions.retrieve(id);
    expect(stored.choices[0]?.message.content).toBe('one two three');
    expect(stored.usage?.completion_tokens).toBeGreaterThan(0);
    expect((await openai.chat.completions.messages.list(id)).data.map((message) => message.role)).toEqual(['user']);
    expect(await openai.chat.completions.delete(id)).toEqual({ id, object: 'chat.completion.deleted', deleted: true });
    await expect(openai.chat.completions.retrieve(id)).rejects.toMatchObject({ status: 404 });
  });
});
