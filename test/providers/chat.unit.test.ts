import { describe, expect, it } from 'vitest';
import { ADAPTERS } from '../../src/providers/adapters';
import { streamChatCompletion } from '../../src/providers/chat';
import type { UpstreamFetch } from '../../src/providers/types';
import { UNSLICED } from '../../src/lib/slices';
import { fakeDirective, startFakeUpstream } from '../support/fake-upstream';
import { upstreamFetch } from '../../src/runtime/node/upstream-fetch';
import { defined } from '../support/defined';

/** A streamed Chat Completions call stopped by its caller, against the fake provider. */

describe('streamChatCompletion, aborted by its caller', () => {
  it('reports the caller’s reason, while the fetch itself is aborted without one (workerd logs one as uncaught)', async () => {
    // Over loopback, with Node's upstream client: the fetch's abort is what ends the read.
    const fake = await startFakeUpstream();
    const client = upstreamFetch({ rules: () => ({ allowPrivate: true }) });
    const signals: AbortSignal[] = [];
    const fetch: UpstreamFetch = (url, init) => {
      if (init.signal) signals.push(init.signal);
      return client(url, init);
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
        baseUrl: fake.baseURL,
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

    try {
      await expect(read).rejects.toBe(reason);
    } finally {
      await fake.close();
    }
    const sent = defined(signals[0]);
    expect(sent.aborted).toBe(true);
    expect(sent.reason).not.toBe(reason);
    expect(sent.reason).toMatchObject({ name: 'AbortError' });
  });
});
