import { exports } from 'cloudflare:workers';
import type OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { fakeProviderKey, gatewayClient } from './gateway-client';
import { json } from '../support/envelope';
import { waitFor } from '../support/wait';

/**
 * POST /v1/chat/completions inside workerd, as on Cloudflare: the Worker entry relays the fake
 * provider's stream (test/support/workers-global-setup.ts) to the official SDK, and the call's usage,
 * written once the stream has ended (kept alive by the request's waitUntil), reaches /v1/usage.
 */

const API_KEY = inject('workersTenant').runsWorkspaceKey;

let openai: OpenAI;
let headers: Record<string, string>;

beforeAll(async () => {
  const slug = `chat-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, slug);
  headers = { 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': slug };
  openai = gatewayClient(headers);
});

/** This workspace's chat completions counted this hour: requests and completion tokens. */
async function counted(): Promise<{ requests: number; completionTokens: number }> {
  const response = await exports.default.fetch('http://gateway/v1/usage?bucket_width=1h&limit=1&group_by=kind', {
    headers,
  });
  expect(response.status).toBe(200);
  const results: { kind: string; num_requests: number; output_tokens: number }[] =
    (await json(response)).data[0]?.results ?? [];
  const chat = results.find((result) => result.kind === 'chat_completions');
  return { requests: chat?.num_requests ?? 0, completionTokens: chat?.output_tokens ?? 0 };
}

describe('chat completions on workerd', () => {
  it('relays a streamed completion to the SDK and counts its usage once the stream has ended', async () => {
    const before = await counted();
    const stream = await openai.chat.completions.create({
      model: 'fake-model',
      messages: [{ role: 'user', content: `Count\n#fake ${JSON.stringify({ reply: 'one two three' })}` }],
      stream: true,
    });
    let text = '';
    let usageChunks = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usageChunks++;
    }
    expect(text).toBe('one two three');
    // The client did not ask for usage: the chunk the gateway asked for is not passed on.
    expect(usageChunks).toBe(0);
    const after = await waitFor(counted, (now) => now.requests === before.requests + 1);
    expect(after.requests).toBe(before.requests + 1);
    expect(after.completionTokens).toBeGreaterThan(before.completionTokens);
  });

  it('relays a stream whose provider sends [DONE] and keeps its body open, to its end', async () => {
    // The Worker's reads wait for MIN_READ_BYTES: `data: [DONE]` is shorter, and no end follows it.
    const stream = await openai.chat.completions.create({
      model: 'fake-model',
      messages: [
        { role: 'user', content: `Count\n#fake ${JSON.stringify({ reply: 'one two', stall_after_done: true })}` },
      ],
      stream: true,
    });
    let text = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish ??= chunk.choices[0]?.finish_reason;
    }
    expect(text).toBe('one two');
    expect(finish).toBe('stop');
  });
});
