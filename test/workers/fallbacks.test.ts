import type OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * A chat completion whose key's provider refuses the connection, passed to its fallback key inside
 * workerd (providers/attempts.ts), where a failed fetch carries no error code: the refusal is a
 * network failure all the same, and the answer names the key that served it.
 */

// Not the runs workspace: chat-completions.test.ts counts that one's chat completions exactly.
const API_KEY = inject('workersTenant').workspaceKey;

let openai: OpenAI;
let backup: string;

beforeAll(async () => {
  const suffix = crypto.randomUUID().slice(0, 8);
  backup = `backup-${suffix}`;
  const main = `refused-${suffix}`;
  await fakeProviderKey(API_KEY, backup);
  // Port 1 on loopback: nothing listens there.
  await fakeProviderKey(API_KEY, main, { base_url: 'http://127.0.0.1:1/v1', fallbacks: [backup] });
  openai = gatewayClient({ 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': main });
});

describe('fallbacks on workerd', () => {
  it('a refused connection passes a streamed completion to the fallback key', async () => {
    const { data: stream, response } = await openai.chat.completions
      .create({
        model: 'fake-model',
        messages: [{ role: 'user', content: `Hi\n#fake ${JSON.stringify({ reply: 'from the backup' })}` }],
        stream: true,
      })
      .withResponse();
    expect(response.headers.get('x-gateway-virtual-key-used')).toBe(backup);
    expect(response.headers.get('x-gateway-attempts')).toBe('2');
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('from the backup');
  });
});
