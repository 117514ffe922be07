import { defined } from '../../support/defined';
import { NotFoundError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, type FakeUpstream } from '../../support/fake-upstream';
import { storeFile } from '../../support/files';
import { createTestGateway, errorOf, json, type TestGateway } from '../../support/gateway';
import { LOOKUP_TOOL, member, startRun, waitForRun, type Member } from '../../support/threads';

/**
 * Modifying an assistant (POST /v1/assistants/{assistant_id}): any field of create, each optional,
 * with create's bounds; what is not sent is kept, null clears; refusals change nothing; another
 * workspace's or a deleted assistant is a 404; the next run uses what was changed.
 */

let gateway: TestGateway;
let upstream: FakeUpstream;
let alice: Member;

beforeAll(async () => {
  upstream = createFakeUpstream();
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  alice = await member(gateway);
});
afterAll(() => gateway.close());

const modify = (id: string, body: unknown, who = alice) => who.request(`/v1/assistants/${id}`, { body });
const retrieve = async (id: string, who = alice) => json(await who.request(`/v1/assistants/${id}`));
const newAssistant = (fields: Record<string, unknown> = {}) =>
  alice.openai.beta.assistants.create({
    model: 'gpt-4o',
    name: 'Math Tutor',
    instructions: 'You tutor math.',
    ...fields,
  });

describe('modifying an assistant', () => {
  it('changes what the SDK sends and keeps the rest, as retrieve shows', async () => {
    const created = await newAssistant({ description: 'Helps', metadata: { team: 'a' }, temperature: 0.5 });
    const store = await alice.openai.vectorStores.create({ name: 'hr' });
    const modified = await alice.openai.beta.assistants.update(created.id, {
      instructions: 'You are an HR bot.',
      name: 'HR Helper',
      tools: [{ type: 'file_search' }, LOOKUP_TOOL],
      tool_resources: { file_search: { vector_store_ids: [store.id] } },
      model: 'gpt-4o-mini',
      response_format: { type: 'json_object' },
      top_p: 0.9,
    });
    expect(modified).toEqual({
      ...created,
      instructions: 'You are an HR bot.',
      name: 'HR Helper',
      tools: [{ type: 'file_search' }, LOOKUP_TOOL],
      tool_resources: { file_search: { vector_store_ids: [store.id] } },
      model: 'gpt-4o-mini',
      response_format: { type: 'json_object' },
      top_p: 0.9,
    });
    expect(modified).toMatchObject({
      id: created.id,
      created_at: created.created_at,
      description: 'Helps',
      metadata: { team: 'a' },
      temperature: 0.5,
    });
    expect(await retrieve(created.id)).toEqual(modified);
  });

  it('clears a field sent as null, to its documented default; metadata is replaced, not merged', async () => {
    const created = await newAssistant({
      description: 'Helps',
      metadata: { a: '1', b: '2' },
      temperature: 0.2,
      top_p: 0.3,
      response_format: { type: 'json_object' },
      tool_resources: {
        code_interpreter: {
          file_ids: [await storeFile(gateway, alice.tenant, { filename: 'data.csv', content: 'a,b' })],
        },
      },
    });
    const replaced = await json(await modify(created.id, { metadata: { c: '3' } }));
    expect(replaced.metadata).toEqual({ c: '3' });
    const cleared = await json(
      await modify(created.id, {
        name: null,
        description: null,
        instructions: null,
        metadata: null,
        temperature: null,
        top_p: null,
        response_format: null,
        tool_resources: null,
        tools: [],
      }),
    );
    expect(cleared).toEqual({
      ...created,
      name: null,
      description: null,
      instructions: null,
      metadata: {},
      temperature: 1,
      top_p: 1,
      response_format: 'auto',
      tool_resources: {},
      tools: [],
    });
  });

  it('takes an empty body, changing nothing', async () => {
    const created = await newAssistant();
    for (const body of [{}, '']) {
      const response = await alice.request(`/v1/assistants/${created.id}`, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json' },
      });
      expect(await json(response)).toEqual(created);
    }
  });

  it('takes every field at its bound', async () => {
    const created = await newAssistant();
    const tools = Array.from({ length: 128 }, (_, i) => ({ type: 'function' as const, function: { name: `fn_${i}` } }));
    const metadata = Object.fromEntries(
      Array.from({ length: 16 }, (_, i) => [`${String(i).padStart(2, '0')}${'k'.repeat(62)}`, 'v'.repeat(512)]),
    );
    const body = {
      model: 'm'.repeat(256),
      name: 'n'.repeat(256),
      description: 'd'.repeat(512),
      instructions: 'i'.repeat(256_000),
      tools,
      metadata,
      temperature: 2,
      top_p: 0,
    };
    const response = await modify(created.id, body);
    expect(response.status).toBe(200);
    expect(await json(response)).toMatchObject(body);
  });

  const invalid: [string, Record<string, unknown>, string, string | null][] = [
    ['model null', { model: null }, 'invalid_type', 'model'],
    ['model empty', { model: '' }, 'string_below_min_length', 'model'],
    ['model too long', { model: 'm'.repeat(257) }, 'string_above_max_length', 'model'],
    ['name too long', { name: 'n'.repeat(257) }, 'string_above_max_length', 'name'],
    ['description too long', { description: 'd'.repeat(513) }, 'string_above_max_length', 'description'],
    ['instructions too long', { instructions: 'i'.repeat(256_001) }, 'string_above_max_length', 'instructions'],
    [
      'tools over 128',
      { tools: Array.from({ length: 129 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } })) },
      'array_above_max_length',
      'tools',
    ],
    ['tools null', { tools: null }, 'invalid_type', 'tools'],
    [
      'a function defined twice',
      { tools: [LOOKUP_TOOL, { type: 'code_interpreter' }, LOOKUP_TOOL] },
      'invalid_value',
      'tools[2].function.name',
    ],
    ['a tool of an unknown type', { tools: [{ type: 'web_search' }] }, 'invalid_value', 'tools[0].type'],
    [
      'two vector stores',
      { tool_resources: { file_search: { vector_store_ids: ['a', 'b'] } } },
      'array_above_max_length',
      'tool_resources.file_search.vector_store_ids',
    ],
    [
      '17 metadata pairs',
      { metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) },
      'invalid_value',
      'metadata',
    ],
    ['temperature above 2', { temperature: 2.5 }, 'value_above_maximum', 'temperature'],
    ['top_p below 0', { top_p: -0.1 }, 'value_below_minimum', 'top_p'],
    ['an unknown response format', { response_format: { type: 'xml' } }, 'invalid_value', 'response_format.type'],
    ['an unknown field', { file_ids: [] }, 'unknown_parameter', 'file_ids'],
    ['a body that is not an object', [] as unknown as Record<string, unknown>, 'invalid_type', null],
  ];
  it.each(invalid)('refuses %s with a 400 naming the field, and changes nothing', async (_, body, code, param) => {
    const created = await newAssistant({ metadata: { keep: 'me' } });
    // A valid change sent beside the invalid one is not applied either.
    const sent = Array.isArray(body) ? body : { name: 'Changed', ...body };
    const error = await errorOf(await modify(created.id, sent));
    expect(error).toMatchObject({ status: 400, code, param, type: 'invalid_request_error' });
    expect(await retrieve(created.id)).toEqual(created);
  });

  it('404s an unknown id, a deleted assistant and another workspace’s, changing nothing of theirs', async () => {
    const bob = await member(gateway);
    const deleted = await newAssistant();
    await alice.openai.beta.assistants.delete(deleted.id);
    for (const id of ['asst_unknown', deleted.id, bob.assistantId]) {
      const error = await errorOf(await modify(id, { name: 'planted' }));
      expect(error).toEqual({
        status: 404,
        code: 'assistant_not_found',
        message: `No assistant found with id '${id}'.`,
        param: null,
        type: 'invalid_request_error',
      });
    }
    await expect(alice.openai.beta.assistants.update(deleted.id, { name: 'x' })).rejects.toBeInstanceOf(NotFoundError);
    expect(await retrieve(bob.assistantId, bob)).toMatchObject({ name: null, instructions: 'Be brief.' });
    expect((await alice.openai.beta.assistants.list()).data.map((a) => a.id)).not.toContain(deleted.id);
  });

  it('is what the next run uses: its model, instructions and tools', async () => {
    const created = await newAssistant({ model: 'fake-model', tools: [LOOKUP_TOOL] });
    await alice.openai.beta.assistants.update(created.id, {
      model: 'fake-model-2',
      instructions: 'Answer in French.',
      tools: [{ type: 'function', function: { name: 'translate', parameters: { type: 'object', properties: {} } } }],
    });
    const asker: Member = { ...alice, assistantId: created.id };
    const started = await startRun(asker, { reply: 'Bonjour.' });
    expect(await waitForRun(asker, started.threadId, started.runId, ['completed'])).toMatchObject({
      status: 'completed',
      model: 'fake-model-2',
      instructions: 'Answer in French.',
    });
    const sent = defined(defined(upstream.requests.at(-1)).body);
    expect(sent.model).toBe('fake-model-2');
    expect(sent.messages[0]).toEqual({ role: 'system', content: 'Answer in French.' });
    expect(sent.tools.map((tool: { function: { name: string } }) => tool.function.name)).toEqual(['translate']);
  });
});
