import { exports } from 'cloudflare:workers';
import type OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * A chat completion whose key's provider refuses the connection, passed to its fallback key inside
 * workerd (providers/attempts.ts), where a failed fetch carries no error code: the refusal is a
 * network failure all the same, and the answer names the key that served it. A run that falls
 * back keeps both attempts in its trace there too (runs.trace, written by the executor object's settle).
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

  it('a run that falls back keeps both attempts in its trace, its log line naming the backup', async () => {
    const assistant = await openai.beta.assistants.create({ model: 'fake-model', instructions: 'Be brief.' });
    const run = await openai.beta.threads.createAndRunPoll({
      assistant_id: assistant.id,
      thread: { messages: [{ role: 'user', content: 'hello run' }] },
    });
    expect(run.status).toBe('completed');
    const response = await exports.default.fetch(`http://gateway/v1/runs/${run.id}/trace`, {
      headers: { 'x-gateway-api-key': API_KEY },
    });
    expect(response.status).toBe(200);
    const trace: { log: unknown; attempts: unknown[]; attempts_total: number } = await response.json();
    expect(trace.log).toMatchObject({ run_id: run.id, status: 'completed', virtual_key: backup });
    expect(trace.attempts_total).toBe(2);
    expect(trace.attempts).toMatchObject([
      { virtual_key: expect.stringMatching(/^refused-/), outcome: 'network', status: null },
      { virtual_key: backup, outcome: 'ok', status: 200 },
    ]);
  });
});
