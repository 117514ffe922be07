import { defined } from '../support/defined';
import { exports } from 'cloudflare:workers';
import OpenAI from 'openai';
import { describe, expect, inject, it } from 'vitest';
import { errorOf, json } from '../support/envelope';

/**
 * Drop-in access inside workerd: the official SDK given only the gateway's URL and a gateway API
 * key (sent as `Authorization: Bearer`), its runs executed by the virtual key whose `models`
 * match, and the 404 of what the gateway does not serve. The SDK's fetch is the Worker's own,
 * which is how a client reaches it here; no header is added.
 */

const API_KEY = inject('workersTenant').runsWorkspaceKey;

const client = () =>
  new OpenAI({ baseURL: 'http://gateway/v1', apiKey: API_KEY, fetch: (url, init) => exports.default.fetch(url, init) });

describe('drop-in access on workerd', () => {
  it('authenticates Bearer and resolves the virtual key from the run’s model', async () => {
    // A model name of this test's own: the key serves it alone, so other tests' runs are untouched.
    const family = `access-${crypto.randomUUID().slice(0, 8)}`;
    const slug = `by-model-${crypto.randomUUID().slice(0, 8)}`;
    const created = await exports.default.fetch('http://gateway/v1/virtual-keys', {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        slug,
        provider: 'openai',
        base_url: inject('upstreamUrl'),
        api_key: 'sk-fake',
        models: [`${family}-*`],
      }),
    });
    expect(await json(created)).toMatchObject({ slug, models: [`${family}-*`], default: false });

    const openai = client();
    const model = `${family}-large`;
    const assistant = await openai.beta.assistants.create({ model, instructions: 'Be brief.' });
    expect(await openai.beta.assistants.retrieve(assistant.id)).toMatchObject({ id: assistant.id, model });
    const run = await openai.beta.threads.createAndRunPoll(
      { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: 'Hello from workerd' }] } },
      { pollIntervalMs: 50 },
    );
    expect(run).toMatchObject({ status: 'completed', model });
    const messages = await openai.beta.threads.messages.list(run.thread_id);
    const answer = defined(messages.data[0]).content[0];
    expect(answer?.type === 'text' && answer.text.value).toBe('You said: Hello from workerd');

    // A model no key of the workspace serves.
    const stray = await openai.beta.assistants.create({ model: `${family}` });
    const refused = await openai.beta.assistants.retrieve(stray.id).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
  });

  it('refuses a provider key sent as Bearer, saying what to send', async () => {
    const response = await exports.default.fetch('http://gateway/v1/assistants', {
      headers: { authorization: 'Bearer sk-proj-a-provider-key' },
    });
    const error = await errorOf(response);
    expect(error).toMatchObject({ status: 401, code: 'invalid_api_key' });
    expect(error.message).toContain('not a gateway API key');
  });

  it('answers a multipart upload to an unserved path with 404 unsupported_endpoint', async () => {
    const form = new FormData();
    form.set('purpose', 'assistants');
    form.set('file', new Blob(['hello']), 'hello.txt');
    const response = await exports.default.fetch('http://gateway/v1/audio/transcriptions', {
      method: 'POST',
      body: form,
    });
    const error = await errorOf(response);
    expect(error).toMatchObject({ status: 404, code: 'unsupported_endpoint', param: null });
    expect(error.message).toContain('POST /v1/audio/transcriptions');
  });
});
