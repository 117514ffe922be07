import { defined } from '../support/defined';
import { describe, expect, it } from 'vitest';
import { ADAPTERS } from '../../src/providers/adapters';
import { createEmbeddings, MAX_DIMENSIONS, retryable } from '../../src/providers/embeddings';
import { UpstreamError } from '../../src/providers/types';
import { createFakeUpstream, FAKE_EMBEDDINGS_STATUS, fakeEmbedding } from '../support/fake-upstream';

/** The embeddings client against the fake provider, and against answers no provider should send. */

const call = (fetch: typeof globalThis.fetch, secret = 'sk-test-embeddings-0001') => ({
  fetch,
  adapter: ADAPTERS.openai,
  baseUrl: 'http://fake.test/v1',
  options: {},
  secret,
  timeoutMs: 5_000,
});

const cosine = (a: Float32Array, b: Float32Array) => a.reduce((sum, value, i) => sum + value * defined(b[i]), 0);

/** A fetch that answers every call with `body` (a JSON value, or raw text). */
const answering =
  (body: unknown, status = 200): typeof fetch =>
  async () =>
    new Response(typeof body === 'string' ? body : JSON.stringify(body), {
      status,
      headers: { 'content-type': 'application/json' },
    });

describe('createEmbeddings', () => {
  it('answers one vector per text, in order, with the dimensions asked, and the usage', async () => {
    const fake = createFakeUpstream();
    const texts = ['refund policy for damaged goods', 'the refund policy', 'penguins live in Antarctica'];
    const out = await createEmbeddings(
      { model: 'text-embedding-3-small', input: texts, dimensions: 64 },
      call(fake.fetch),
    );
    expect(out.vectors).toHaveLength(3);
    expect(out.vectors.every((vector) => vector.length === 64)).toBe(true);
    expect(Array.from(defined(out.vectors[2]))).toEqual(fakeEmbedding(defined(texts[2]), 64).map(Math.fround));
    expect(cosine(defined(out.vectors[0]), defined(out.vectors[1]))).toBeGreaterThan(
      cosine(defined(out.vectors[0]), defined(out.vectors[2])),
    );
    expect(out.promptTokens).toBe(5 + 3 + 4);
    const sent = defined(fake.requests[0]);
    expect(sent.path).toBe('/v1/embeddings');
    expect(sent.headers.authorization).toBe('Bearer sk-test-embeddings-0001');
    expect(sent.body).toEqual({
      model: 'text-embedding-3-small',
      input: texts,
      encoding_format: 'float',
      dimensions: 64,
    });
  });

  it('puts vectors back in order by their index', async () => {
    const data = [
      { index: 1, embedding: [0, 1] },
      { index: 0, embedding: [1, 0] },
    ];
    const out = await createEmbeddings({ model: 'm', input: ['a', 'b'] }, call(answering({ data })));
    expect(out.vectors.map((vector) => Array.from(vector))).toEqual([
      [1, 0],
      [0, 1],
    ]);
    expect(out.promptTokens).toBe(0);
  });

  it('sends Azure its deployment path and api-key header', async () => {
    const fake = createFakeUpstream();
    await createEmbeddings(
      { model: 'text-embedding-3-small', input: ['x'] },
      {
        ...call(fake.fetch),
        adapter: ADAPTERS['azure-openai'],
        baseUrl: 'https://r.openai.azure.test',
        options: { deployment: 'emb', api_version: '2024-10-21' },
      },
    );
    expect(defined(fake.requests[0]).path).toBe('/openai/deployments/emb/embeddings');
    expect(defined(fake.requests[0]).query).toEqual({ 'api-version': '2024-10-21' });
    expect(defined(fake.requests[0]).headers['api-key']).toBe('sk-test-embeddings-0001');
  });

  it('fails with the status on an error answer, retryable on 429 and 5xx only, without the key', async () => {
    const fake = createFakeUpstream();
    for (const status of [429, 500, 503, 400, 401]) {
      const error = await createEmbeddings(
        { model: 'm', input: [`${FAKE_EMBEDDINGS_STATUS} ${status}`] },
        call(fake.fetch),
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(UpstreamError);
      expect((error as UpstreamError).status).toBe(status);
      expect(retryable(error)).toBe(status === 429 || status >= 500);
    }
    const echoed = await createEmbeddings(
      { model: 'm', input: ['x'] },
      call(answering({ error: { message: 'bad key sk-test-embeddings-0001' } }, 401)),
    ).catch((e: unknown) => e);
    expect((echoed as Error).message).not.toContain('sk-test-embeddings-0001');
    expect((echoed as Error).message).toContain('[redacted]');
  });

  it.each([
    ['not JSON', 'nope'],
    ['no data', { object: 'list' }],
    ['too few vectors', { data: [{ index: 0, embedding: [1] }] }],
    [
      'an index twice',
      {
        data: [
          { index: 0, embedding: [1] },
          { index: 0, embedding: [1] },
        ],
      },
    ],
    [
      'an index out of range',
      {
        data: [
          { index: 0, embedding: [1] },
          { index: 7, embedding: [1] },
        ],
      },
    ],
    [
      'a negative index',
      {
        data: [
          { index: -1, embedding: [1] },
          { index: 0, embedding: [1] },
        ],
      },
    ],
    [
      'a string index',
      {
        data: [
          { index: '1', embedding: [1] },
          { index: 0, embedding: [1] },
        ],
      },
    ],
    [
      'mixed dimensions',
      {
        data: [
          { index: 0, embedding: [1, 0] },
          { index: 1, embedding: [1] },
        ],
      },
    ],
    [
      'an empty vector',
      {
        data: [
          { index: 0, embedding: [] },
          { index: 1, embedding: [] },
        ],
      },
    ],
    [
      'a string in a vector',
      {
        data: [
          { index: 0, embedding: ['1'] },
          { index: 1, embedding: [1] },
        ],
      },
    ],
    [
      'too many dimensions',
      { data: [0, 1].map((index) => ({ index, embedding: new Array(MAX_DIMENSIONS + 1).fill(0) })) },
    ],
  ])('refuses an answer with %s', async (_, body) => {
    const error = await createEmbeddings({ model: 'm', input: ['a', 'b'] }, call(answering(body))).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).kind).toBe('protocol');
    expect(retryable(error)).toBe(false);
  });

  it('stops reading an answer larger than its texts could need', async () => {
    let pulled = 0;
    const endless: typeof fetch = async () =>
      new Response(
        new ReadableStream({
          pull(controller) {
            pulled += 1;
            controller.enqueue(new TextEncoder().encode(`{"data":[${'0,'.repeat(32 * 1024)}`));
          },
        }),
      );
    const error = await createEmbeddings({ model: 'm', input: ['a'] }, call(endless)).catch((e: unknown) => e);
    expect((error as UpstreamError).kind).toBe('protocol');
    // One text may be answered in 4096 × 32 bytes and an envelope: a few MiB, not the endless stream.
    expect(pulled).toBeLessThan(100);
  });

  it('fails a call that outlives its timeout as a timeout', async () => {
    const stalled: typeof fetch = (_, init) =>
      new Promise((_, reject) =>
        init?.signal?.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError'))),
      );
    const error = await createEmbeddings({ model: 'm', input: ['a'] }, { ...call(stalled), timeoutMs: 50 }).catch(
      (e: unknown) => e,
    );
    expect((error as UpstreamError).kind).toBe('timeout');
    expect(retryable(error)).toBe(true);
  });
});
