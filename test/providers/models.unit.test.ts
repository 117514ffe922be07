import { describe, expect, it } from 'vitest';
import { ADAPTERS } from '../../src/providers/adapters';
import {
  listProviderModels,
  MAX_LIST_BYTES,
  MAX_MODELS,
  ModelLists,
  MODEL_LIST_TTL_MS,
} from '../../src/providers/models';
import { UpstreamError, type UpstreamFetch, type UpstreamRequest } from '../../src/providers/types';
import { createFakeUpstream, FAKE_MODELS } from '../support/fake-upstream';

/** A provider's models list as untrusted input: what is read of it, what is kept, how it fails. */

const SECRET = 'sk-test-models-list-0001';

const call = (fetch: UpstreamFetch) => ({
  fetch,
  adapter: ADAPTERS.openai,
  baseUrl: 'http://fake.test/v1',
  options: {},
  secret: SECRET,
  timeoutMs: 2_000,
});

/** A fetch that answers every call with `body` (a JSON value, or raw text), recording what it was sent. */
function answering(body: unknown, status = 200, headers: Record<string, string> = {}) {
  const sent: UpstreamRequest[] = [];
  const fetch: UpstreamFetch = async (_url, init) => {
    sent.push(init);
    return new Response(typeof body === 'string' ? body : JSON.stringify(body), {
      status,
      headers: { 'content-type': 'application/json', ...headers },
    });
  };
  return { fetch, sent };
}

const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (error: unknown) => error,
  );

describe('listProviderModels', () => {
  it("reads the fake provider's list with the key's secret, by GET, without following redirects", async () => {
    const fake = createFakeUpstream({ apiKey: SECRET });
    const models = await listProviderModels(call(fake.fetch));
    expect(models.map((model) => model.id)).toEqual([...FAKE_MODELS]);
    expect(fake.requests[0]).toMatchObject({ method: 'GET', path: '/v1/models' });
    const { fetch, sent } = answering({ data: [] });
    await listProviderModels(call(fetch));
    expect(sent[0]).toMatchObject({
      method: 'GET',
      redirect: 'manual',
      headers: { authorization: `Bearer ${SECRET}` },
    });
    expect(sent[0]?.body).toBeUndefined();
  });

  it('keeps at most MAX_MODELS, and only ids that are strings of a sane length', async () => {
    const data = [
      { id: 'good', created: 12 },
      { id: 42 },
      { id: '' },
      { id: 'x'.repeat(300) },
      'not an object',
      null,
      { id: 'no-date', created: -1 },
      ...Array.from({ length: MAX_MODELS + 50 }, (_, i) => ({ id: `m-${i}` })),
    ];
    const models = await listProviderModels(call(answering({ object: 'list', data }).fetch));
    expect(models.slice(0, 2)).toEqual([
      { id: 'good', created: 12 },
      { id: 'no-date', created: null },
    ]);
    expect(models.length).toBeLessThanOrEqual(MAX_MODELS);
  });

  it('refuses an answer over MAX_LIST_BYTES, or not a list, as a protocol failure', async () => {
    const huge = JSON.stringify({ data: [{ id: 'a', pad: 'p'.repeat(MAX_LIST_BYTES) }] });
    for (const body of [huge, 'not json', { data: 'nope' }, [1, 2]]) {
      const error = await failure(listProviderModels(call(answering(body).fetch)));
      expect(error, String(body).slice(0, 40)).toBeInstanceOf(UpstreamError);
      expect(error).toMatchObject({ kind: 'protocol' });
    }
  });

  it("fails on the provider's refusal and on a redirect, never echoing the secret", async () => {
    const refused = await failure(
      listProviderModels(call(answering({ error: { message: `bad key ${SECRET}` } }, 401).fetch)),
    );
    expect(refused).toMatchObject({ kind: 'http', status: 401 });
    expect((refused as Error).message).not.toContain(SECRET);
    const moved = await failure(
      listProviderModels(call(answering('', 302, { location: 'http://169.254.169.254/' }).fetch)),
    );
    expect(moved).toMatchObject({ kind: 'http', status: 302 });
  });

  it('gives up on a provider silent past the time limit', async () => {
    const silent: UpstreamFetch = (_url, init) =>
      new Promise((_resolve, reject) => init.signal?.addEventListener('abort', () => reject(init.signal?.reason)));
    const error = await failure(listProviderModels({ ...call(silent), timeoutMs: 50 }));
    expect(error).toMatchObject({ kind: 'timeout' });
  });
});

describe('ModelLists', () => {
  it('keeps a list for MODEL_LIST_TTL_MS, then loads it again', async () => {
    const lists = new ModelLists();
    let loads = 0;
    const load = async () => ({ models: [{ id: `load-${++loads}`, created: null }] });
    expect(lists.get('k', 0, load).fresh).toBe(true);
    expect(lists.get('k', MODEL_LIST_TTL_MS - 1, load).fresh).toBe(false);
    expect(await lists.get('k', MODEL_LIST_TTL_MS - 1, load).result).toEqual({
      models: [{ id: 'load-1', created: null }],
    });
    expect(lists.get('k', MODEL_LIST_TTL_MS, load).fresh).toBe(true);
    expect(loads).toBe(2);
    expect(lists.get('other', 0, load).fresh).toBe(true);
  });
});
