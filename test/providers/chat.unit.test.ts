import { describe, expect, it } from 'vitest';
import { ADAPTERS } from '../../src/providers/adapters';
import { streamChatCompletion } from '../../src/providers/chat';
import type { UpstreamFetch } from '../../src/providers/types';
import { UNSLICED } from '../../src/lib/slices';
import { createFakeUpstream, fakeDirective } from '../support/fake-upstream';
import { defined } from '../support/defined';

/** A streamed Chat Completions call stopped by its caller, against the fake provider. */

describe('streamChatCompletion, aborted by its caller', () => {
  it('reports the caller’s reason, while the fetch itself is aborted without one (workerd logs one as uncaught)', async () => {
    const fake = createFakeUpstream();
    const signals: AbortSignal[] = [];
    const fetch: UpstreamFetch = (url, init) => {
      if (init.signal) signals.push(init.signal);
      return fake.fetch(url, init);
    };
    const caller = new AbortController();
    const reason = new Error('the run was cancelled');
    const body = new TextEncoder().encode(
      JSON.stringify({
        model: 'gpt-4o',
        stream: true,
        messages: [
          { role: 'user', content: fakeDirective({ stream_bytes: Number.MAX_SAFE_INTEGER, chunk_delay_ms: 5 }) },
        ],
      }),
    );
    const events = streamChatCompletion(
      { model: 'gpt-4o', body },
      {
        fetch,
        adapter: ADAPTERS.openai,
        baseUrl: 'http://fake.test/v1',
        options: {},
        secret: 'sk-test-chat-0001',
        firstByteTimeoutMs: 5_000,
        idleTimeoutMs: 5_000,
        signal: caller.signal,
        slices: UNSLICED,
      },
    );
    const read = (async () => {
      for await (const batch of events) if (batch.length > 0) caller.abort(reason);
    })();

    await expect(read).rejects.toBe(reason);
    const sent = defined(signals[0]);
    expect(sent.aborted).toBe(true);
    expect(sent.reason).not.toBe(reason);
    expect(sent.reason).toMatchObject({ name: 'AbortError' });
  });
});
