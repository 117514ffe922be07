import { defined } from '../support/defined';
import { createClient } from '@libsql/client';
import fc from 'fast-check';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors';
import { createFakeUpstream, fakeDirective, type FakeUpstream } from '../support/fake-upstream';
import { storeFile } from '../support/files';
import { apiRoutes, createTestGateway, json, type Tenant, type TestGateway } from '../support/gateway';
import { startGatewayProcess, type GatewayProcess } from '../support/processes';
import { recordTally } from '../support/tally';

/**
 * Generated bad input against every route of the app (read from the app itself, so a route added
 * later is fuzzed too): path, query, headers and body, from plausible requests with one thing
 * wrong to plain garbage. Whatever arrives, the answer is a 4xx error envelope (or, where the input
 * happens to be valid, a 2xx object), never a 5xx; a refused request leaves every table as it was.
 *
 * FUZZ_RUNS sets the generated requests per route (npm test: a few dozen; test:reliability: more).
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 40);
const LIMIT = 16 * 1024;

let gateway: TestGateway;
let upstream: FakeUpstream;
let tenant: Tenant;
/** Real ids and slugs of the tenant, so that some generated requests reach deep into a route. */
const real: Record<string, string[]> = {};
const tally = { inputsTried: 0, answered5xx: 0, rowsHalfWritten: 0 };

beforeAll(async () => {
  upstream = createFakeUpstream();
  gateway = await createTestGateway({
    env: { GATEWAY_MAX_BODY_BYTES: String(LIMIT), GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' },
    deps: { fetch: upstream.fetch },
  });
  tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: 'http://upstream.test/v1', slug: 'fuzz' });
  const assistant = await json(
    await gateway.request('/v1/assistants', {
      key: tenant.workspaceKey,
      body: {
        model: 'fake-model',
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
      },
    }),
  );
  const runs = [];
  for (let i = 0; i < 4; i++) {
    // Runs that wait for tool outputs: submit_tool_outputs and cancel have something to act on.
    const run = await json(
      await gateway.request('/v1/threads/runs', {
        key: tenant.workspaceKey,
        headers: { 'x-gateway-virtual-key': slug },
        body: {
          assistant_id: assistant.id,
          thread: { messages: [{ role: 'user', content: `call\n${fakeDirective({ tool_calls: 1 })}` }] },
        },
      }),
    );
    runs.push(run);
  }
  expect(await gateway.tasks.drain(60_000)).toBe(true);
  const policy = await json(
    await gateway.request('/v1/policies/rate-limits', { key: tenant.workspaceKey, body: VALID.policy }),
  );
  const toolCalls = [];
  const messageIds = [];
  for (const run of runs) {
    const listed = await json(
      await gateway.request(`/v1/threads/${run.thread_id}/messages`, { key: tenant.workspaceKey }),
    );
    messageIds.push(...listed.data.map((message: { id: string }) => message.id));
    const current = await json(
      await gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}`, { key: tenant.workspaceKey }),
    );
    expect(current.status).toBe('requires_action');
    toolCalls.push(current.required_action.submit_tool_outputs.tool_calls[0].id);
  }
  const fileIds = [await storeFile(gateway, tenant, { filename: 'fuzz.md', content: '# Fuzz\n\nSome text.' })];
  fileIds.push(await storeFile(gateway, tenant, { filename: 'fuzz2.txt', content: 'more text' }));
  const store = await json(
    await gateway.request('/v1/vector_stores', {
      key: tenant.workspaceKey,
      headers: { 'x-gateway-virtual-key': slug },
      body: { name: 'fuzz' },
    }),
  );
  const batch = await json(
    await gateway.request(`/v1/vector_stores/${store.id}/file_batches`, {
      key: tenant.workspaceKey,
      body: { file_ids: [fileIds[0]] },
    }),
  );
  expect(await gateway.tasks.drain(60_000)).toBe(true);
  const stored = await json(
    await gateway.request('/v1/chat/completions', {
      key: tenant.workspaceKey,
      headers: { 'x-gateway-virtual-key': slug },
      body: { model: 'fake-model', messages: [{ role: 'user', content: 'keep' }], store: true, metadata: { k: 'v' } },
    }),
  );
  Object.assign(real, {
    id: [policy.id],
    vector_store_id: [store.id],
    file_id: fileIds,
    batch_id: [batch.id],
    assistant_id: [assistant.id],
    thread_id: runs.map((run) => run.thread_id),
    // A conversation is a thread; its items' ids are its messages'.
    conversation_id: runs.map((run) => run.thread_id),
    item_id: messageIds,
    run_id: runs.map((run) => run.id),
    slug: [slug],
    model: ['gpt-4o', 'meta-llama/Llama-3.1-8B'],
    tool_call_id: toolCalls,
    message_id: messageIds,
    workspace: [tenant.workspace.id, tenant.workspace.slug],
    completion_id: [stored.id],
  });
});
afterAll(async () => {
  recordTally('fuzz', tally);
  await gateway?.close();
});

// ── What the app serves ──────────────────────────────────────────────────────────────────────

interface Route {
  method: string;
  path: string;
}

function routes(): Route[] {
  // Routes that end things last, so the others still find the fixtures alive.
  const rank = (route: Route) => (route.method === 'DELETE' || route.path.endsWith('/cancel') ? 1 : 0);
  return apiRoutes(gateway.app).sort((a, b) => rank(a) - rank(b));
}

const VALID = {
  policy: {
    conditions: [{ key: 'model', value: 'gpt-4o' }],
    group_by: [{ key: 'api_key' }],
    type: 'requests',
    unit: 'rpm',
    value: 1000,
  },
};

/** A valid body per route, where there is one to start mutating from; `{}` for any other. */
function validBody(route: Route): Record<string, unknown> {
  const id = `${route.method} ${route.path}`;
  switch (id) {
    case 'POST /v1/policies/rate-limits':
      return VALID.policy;
    case 'PUT /v1/policies/rate-limits/:id':
      return { name: 'renamed', value: 5000, unit: 'rph' };
    case 'POST /v1/chat/completions':
      return { model: 'fake-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 10, stream: false };
    case 'POST /v1/completions':
      return { model: 'fake-model', prompt: 'hello', max_tokens: 10, stream: false };
    case 'POST /v1/embeddings':
      return { model: 'fake-embeddings', input: ['hello', 'world'], dimensions: 8, encoding_format: 'float' };
    case 'POST /v1/moderations':
      return { model: 'omni-moderation-latest', input: ['hello'] };
    case 'POST /v1/virtual-keys':
      return { slug: 'vk', provider: 'openai', base_url: 'http://upstream.test/v1', api_key: 'sk-fuzz' };
    case 'POST /v1/assistants':
      return { model: 'fake-model', name: 'a', instructions: 'b', metadata: { k: 'v' }, temperature: 1 };
    case 'POST /v1/threads/runs':
      return {
        assistant_id: defined(real.assistant_id)[0],
        thread: { messages: [{ role: 'user', content: 'hello', metadata: { k: 'v' } }] },
        temperature: 0.5,
        max_completion_tokens: 1000,
        stream: false,
      };
    case 'POST /v1/threads/:thread_id/runs/:run_id/submit_tool_outputs':
      return { tool_outputs: [{ tool_call_id: defined(real.tool_call_id)[0], output: 'ok' }] };
    case 'POST /v1/assistants/:assistant_id':
      return { name: 'renamed', metadata: { k: 'v' }, temperature: 0.5 };
    case 'POST /v1/threads':
      return { messages: [{ role: 'user', content: 'hello' }], metadata: { k: 'v' } };
    case 'POST /v1/conversations':
      return { items: [{ role: 'user', content: 'hello' }], metadata: { k: 'v' } };
    case 'POST /v1/conversations/:conversation_id/items':
      return { items: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] }] };
    case 'POST /v1/threads/:thread_id':
    case 'POST /v1/conversations/:conversation_id':
    case 'POST /v1/threads/:thread_id/messages/:message_id':
    case 'POST /v1/chat/completions/:completion_id':
      return { metadata: { k: 'v' } };
    case 'POST /v1/threads/:thread_id/messages':
      return { role: 'user', content: [{ type: 'text', text: 'hi' }], metadata: { k: 'v' } };
    case 'POST /v1/vector_stores':
      return { name: 'v', metadata: { k: 'v' }, expires_after: { anchor: 'last_active_at', days: 2 } };
    case 'POST /v1/vector_stores/:vector_store_id':
      return { name: 'renamed', metadata: { k: 'v' }, expires_after: null };
    case 'POST /v1/vector_stores/:vector_store_id/files':
      return {
        file_id: defined(real.file_id)[1],
        attributes: { k: 'v', n: 1 },
        chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 200, chunk_overlap_tokens: 50 } },
      };
    case 'POST /v1/vector_stores/:vector_store_id/files/:file_id':
      return { attributes: { k: 'v', b: true } };
    case 'POST /v1/vector_stores/:vector_store_id/file_batches':
      return { files: [{ file_id: defined(real.file_id)[1], attributes: { n: 2 } }] };
    default:
      return {};
  }
}

// ── Generators ───────────────────────────────────────────────────────────────────────────────

/** Text that breaks things: control characters, quotes, escapes, astral and combining characters, lone surrogates. */
const oddText = fc.string({
  unit: fc.oneof(
    { weight: 4, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }) },
    fc.constantFrom(
      '\0',
      '\u0007',
      '\n',
      '"',
      '\\',
      '\ud800',
      '\udfff',
      '\u202e',
      '\ufeff',
      '🔑',
      'é',
      '\u0301',
      '%',
      '{',
      '[',
      '/',
      '..',
    ),
  ),
  maxLength: 40,
});

const nastyNumber = fc.oneof(
  fc.constantFrom(
    -1,
    0,
    -0,
    0.5,
    1e308,
    -1e308,
    2 ** 53,
    2 ** 53 + 2,
    2 ** 63,
    1e-320,
    Number.MAX_SAFE_INTEGER,
    255,
    256,
    65536,
  ),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

/** `depth` levels of arrays or objects around a value. */
const nested = (depth: number, object: boolean, inner: unknown = 1): unknown => {
  let value = inner;
  for (let i = 0; i < depth; i++) value = object ? { a: value } : [value];
  return value;
};

const nastyValue: fc.Arbitrary<unknown> = fc.oneof(
  oddText,
  nastyNumber,
  fc.boolean(),
  fc.constant(null),
  fc.constant([]),
  fc.constant({}),
  fc.integer({ min: 1, max: 2000 }).map((n) => 'x'.repeat(n)),
  fc.tuple(fc.integer({ min: 1, max: 100 }), fc.boolean()).map(([depth, object]) => nested(depth, object)),
  fc.array(oddText, { maxLength: 40 }),
  fc.dictionary(oddText, oddText, { maxKeys: 20 }),
  fc.jsonValue({ maxDepth: 4 }),
);

/** Every path into a JSON value: where a mutation can land. */
function paths(value: unknown, prefix: (string | number)[] = []): (string | number)[][] {
  const out = [prefix];
  if (Array.isArray(value)) value.forEach((item, i) => out.push(...paths(item, [...prefix, i])));
  else if (value && typeof value === 'object')
    for (const [k, v] of Object.entries(value)) out.push(...paths(v, [...prefix, k]));
  return out;
}

function setAt(value: unknown, path: (string | number)[], replacement: unknown, remove: boolean): unknown {
  if (path.length === 0) return replacement;
  const copy: any = Array.isArray(value) ? [...value] : { ...(value as object) };
  const [head, ...rest] = path;
  if (rest.length === 0 && remove) {
    if (Array.isArray(copy)) copy.splice(head as number, 1);
    else delete copy[defined(head)];
  } else if (Array.isArray(copy) && typeof head !== 'number') {
    // A field added to a list is an item more: a list has no named fields (and `length` breaks it).
    copy.push(setAt(undefined, rest, replacement, remove));
  } else copy[defined(head)] = setAt(copy[defined(head)], rest, replacement, remove);
  return copy;
}

/** The valid body with one to three things changed: a value replaced, a field removed, an unknown field added. */
const mutatedBody = (valid: unknown) =>
  fc
    .array(
      fc.tuple(fc.constantFrom(...paths(valid)), nastyValue, fc.constantFrom('replace', 'remove', 'add'), oddText),
      { minLength: 1, maxLength: 3 },
    )
    .map((mutations) => {
      let body = valid;
      for (const [path, value, how, key] of mutations) {
        if (how === 'add') body = setAt(body, [...path, key || 'extra'], value, false);
        else body = setAt(body, path, value, how === 'remove');
      }
      return JSON.stringify(body) ?? 'undefined';
    });

/** Text-level damage that JSON.stringify cannot produce. */
const damagedText = (valid: unknown) => {
  const text = JSON.stringify(valid);
  return fc.oneof(
    // truncated, or cut and spliced with garbage
    fc.nat({ max: text.length - 1 }).map((at) => text.slice(0, at)),
    fc.tuple(fc.nat({ max: text.length }), oddText).map(([at, junk]) => text.slice(0, at) + junk + text.slice(at)),
    // a key twice, __proto__, NUL and lone surrogates as escapes, trailing commas, comments, NaN
    fc.constant(text.replace(/^\{/, '{"a":1,"a":2,')),
    fc.constant(text.replace(/\}$/, `,${text.slice(1, text.indexOf(':'))}:null}`)),
    fc.constant(text.replace(/^\{/, '{"__proto__":{"admin":true},')),
    fc.constant(text.replace(/^\{/, '{"constructor":{"prototype":{"x":1}},')),
    fc
      .constantFrom('\\u0000', '\\ud800', '\\udc00x', 'a\\u0000b')
      .map((escape) => text.replace(/"([^"\\]*)"(?=\s*[,}\]])/, `"$1${escape}"`)),
    fc.constant(text.replace(/\}$/, ',}')),
    fc.constant(`/* c */${text}`),
    fc.constant(text.replace(/:\s*(-?\d+(\.\d+)?)/, ':NaN')),
    fc.constant(text.replace(/:\s*(-?\d+(\.\d+)?)/, ':1e999999')),
    fc.constant(`${text}${text}`),
    fc.constant(`\ufeff${text}`),
  );
};

const deepBody = fc
  .tuple(fc.integer({ min: 60, max: 5000 }), fc.boolean())
  .map(([depth, object]) =>
    object ? '{"a":'.repeat(depth) + '1' + '}'.repeat(depth) : '['.repeat(depth) + ']'.repeat(depth),
  );

const bodyFor = (route: Route) => {
  const valid = validBody(route);
  return fc.oneof(
    { weight: 6, arbitrary: mutatedBody(valid) },
    { weight: 3, arbitrary: damagedText(valid) },
    { weight: 1, arbitrary: fc.constant(JSON.stringify(valid)) },
    { weight: 1, arbitrary: deepBody },
    { weight: 1, arbitrary: fc.jsonValue().map((value) => JSON.stringify(value)) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: LIMIT - 64, max: LIMIT * 2 })
        .map((size) => JSON.stringify({ ...valid, name: 'n'.repeat(size) })),
    },
  );
};

/** A path's parameter, with its pattern if it has one (`:model{.+}`, which may hold slashes). */
const PARAM = /:\w+(\{[^}]*\})?/g;

/** A path segment: a real id of the right kind, another kind's, or anything percent-encoded. */
const segmentFor = (param: string) =>
  fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...(real[param] ?? ['x'])) },
    { weight: 1, arbitrary: fc.constantFrom(...Object.values(real).flat()) },
    { weight: 2, arbitrary: oddText.map((text) => encodeSegment(text)).filter((s) => s.length > 0) },
    {
      weight: 1,
      arbitrary: fc
        .uint8Array({ minLength: 1, maxLength: 12 })
        .map((bytes) => [...bytes].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('')),
    },
    { weight: 1, arbitrary: fc.integer({ min: 200, max: 9000 }).map((n) => 'i'.repeat(n)) },
  );

/** Percent-encodes any string, lone surrogates included (encodeURIComponent throws on those). */
const encodeSegment = (text: string) =>
  [...text]
    .map((ch) =>
      /^[\w-]$/.test(ch) ? ch : [...Buffer.from(ch)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join(''),
    )
    .join('');

const QUERY_KEYS = [
  'limit',
  'order',
  'after',
  'before',
  'run_id',
  'workspace_id',
  'status',
  'type',
  'unit',
  'page_size',
  'current_page',
  'include_revoked',
];
const queryValue = () =>
  fc.oneof(
    fc.constantFrom(
      '1',
      '0',
      '-1',
      '20',
      '100',
      '101',
      '1001',
      '1e3',
      '0x10',
      ' 5',
      'NaN',
      '99999999999999999999',
      'asc',
      'desc',
      'true',
      'false',
      'active',
      'archived',
      'requests',
      'rpm',
      '',
    ),
    oddText.map(encodeSegment),
    fc.constantFrom(...Object.values(real).flat()),
  );
const query = () =>
  fc
    .array(
      fc.tuple(
        fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...QUERY_KEYS) }, oddText.map(encodeSegment)),
        queryValue(),
      ),
      { maxLength: 5 },
    )
    .chain((pairs) => fc.oneof({ weight: 2, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: fc.constant(pairs) }))
    .map((pairs) => (pairs.length === 0 ? '' : `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`));

/** Header values a client can send: Latin-1, no CR, LF or NUL. */
const headerText = fc.string({
  unit: fc
    .integer({ min: 0x20, max: 0xff })
    .filter((c) => c !== 0x7f)
    .map((c) => String.fromCharCode(c)),
  maxLength: 80,
});
/** `arbitrary` once in `every` times, null otherwise. */
const sometimes = <T>(arbitrary: fc.Arbitrary<T>, every: number) =>
  fc.oneof({ weight: every - 1, arbitrary: fc.constant(null) }, { weight: 1, arbitrary });

const headers = () =>
  fc
    .record({
      key: fc.oneof(
        { weight: 16, arbitrary: fc.constant('workspace') },
        { weight: 3, arbitrary: fc.constant('organisation') },
        { weight: 1, arbitrary: headerText },
      ),
      workspace: sometimes(fc.oneof(fc.constantFrom(...defined(real.workspace)), headerText), 3),
      virtualKey: fc.oneof(
        { weight: 8, arbitrary: fc.constant(defined(defined(real.slug)[0])) },
        headerText,
        fc.constant(undefined),
      ),
      beta: sometimes(fc.oneof(fc.constant('assistants=v2'), fc.constant('assistants=v1'), headerText), 6),
      metadata: sometimes(
        fc.oneof(
          headerText,
          fc
            .jsonValue({ maxDepth: 2 })
            .map((v) => JSON.stringify(v))
            .filter((s) => /^[\x20-\x7e]*$/.test(s)),
        ),
        6,
      ),
      contentType: fc.oneof(
        { weight: 30, arbitrary: fc.constant('application/json') },
        fc.constantFrom(
          'text/plain',
          'application/json; charset=latin1',
          'application/vnd.api+json',
          'APPLICATION/JSON',
          'multipart/form-data',
          '',
        ),
        headerText,
      ),
    })
    .map((h) => {
      const out: Record<string, string> = {};
      out['x-gateway-api-key'] =
        h.key === 'workspace' ? tenant.workspaceKey : h.key === 'organisation' ? tenant.orgKey : h.key;
      if (h.workspace !== null) out['x-gateway-workspace-id'] = h.workspace;
      if (h.virtualKey !== undefined) out['x-gateway-virtual-key'] = h.virtualKey;
      if (h.beta !== null) out['openai-beta'] = h.beta;
      if (h.metadata !== null) out['x-gateway-metadata'] = h.metadata;
      if (h.contentType) out['content-type'] = h.contentType;
      return out;
    });

const requestFor = (route: Route) =>
  fc.record({
    path: fc
      .tuple(...(route.path.match(PARAM) ?? []).map((param) => segmentFor(param.slice(1).replace(/\{.*/, ''))))
      .map((values) => {
        let i = 0;
        return route.path.replace(PARAM, () => defined(values[i++]));
      }),
    query: query(),
    headers: headers(),
    // A GET cannot carry a body (fetch refuses); a DELETE may, and usually does not.
    body:
      route.method === 'GET'
        ? fc.constant(null)
        : route.method === 'DELETE'
          ? sometimes(bodyFor(route), 4)
          : fc.oneof({ weight: 12, arbitrary: bodyFor(route) }, { weight: 1, arbitrary: fc.constant(null) }),
  });

// ── Checking an answer ───────────────────────────────────────────────────────────────────────

/** Rows in every table of the database (the list comes from the database, so new tables count). */
async function rowCounts(client = gateway.database.client): Promise<Record<string, number>> {
  const tables = await client.execute(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
  );
  const names = tables.rows.map((row) => String(row[0]));
  // One statement for all of them: a statement per table, twice per request, was most of this file's time.
  const counts = names.map(
    (name) => `SELECT '${name.replaceAll("'", "''")}', count(*) FROM "${name.replaceAll('"', '""')}"`,
  );
  const result = await client.execute(counts.join(' UNION ALL '));
  return Object.fromEntries(result.rows.map((row) => [String(row[0]), Number(row[1])]));
}

interface Sent {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string | null;
}

/** Sends one request and asserts everything the answer must be; returns its status. */
async function sendAndCheck(request: Sent): Promise<number> {
  const before = await rowCounts();
  tally.inputsTried += 1;
  const response = await gateway.app.request(request.path, {
    method: request.method,
    headers: request.headers,
    body: request.body ?? undefined,
  });
  const text = await response.text();
  // What it started in the background (an ingestion, in a process of its own) has ended before the
  // next request counts the rows: on a loaded machine that takes seconds.
  expect(await gateway.tasks.drain(60_000), 'its background work ended').toBe(true);
  const where = `${request.method} ${request.path.slice(0, 300)} -> ${response.status} ${text.slice(0, 300)}`;
  if (response.status >= 500) tally.answered5xx += 1;
  expect(response.status, where).toBeLessThan(500);
  if (response.status >= 400) {
    const body = JSON.parse(text);
    expect(Object.keys(body.error ?? {}).sort(), where).toEqual(['code', 'message', 'param', 'type']);
    // A provider's refusal of a passed-through call keeps the provider's status (errors.ts, upstream_error).
    if (body.error.code !== 'upstream_error') {
      expect(ERROR_CODES[body.error.code as keyof typeof ERROR_CODES]?.status, where).toBe(response.status);
    }
    const after = await rowCounts();
    if (JSON.stringify(after) !== JSON.stringify(before)) tally.rowsHalfWritten += 1;
    expect(after, where).toEqual(before);
  } else if (response.headers.get('content-type')?.startsWith('text/event-stream')) {
    // A run's stream ends with its `done` event; a (chat) completion's is the provider's, ending with [DONE].
    const end = /^\/v1\/(chat\/)?completions/.test(request.path)
      ? /data: \[DONE\]\n\n$/
      : /event: done\ndata: \[DONE\]\n\n$/;
    expect(text, where).toMatch(end);
  } else if (response.headers.get('content-type') === 'application/octet-stream') {
    // A file's bytes (GET /v1/files/{id}/content), as stored: the path as URL parsing resolves it,
    // which the router sees (`/v1/vector_stores/%2e%2e/files/{id}/content` is that path too).
    expect(new URL(request.path, 'http://gateway').pathname, where).toMatch(/^\/v1\/files\/[^/?]+\/content$/);
  } else {
    const body = JSON.parse(text);
    expect(body !== null && typeof body === 'object' && !Array.isArray(body), where).toBe(true);
  }
  return response.status;
}

// ── The properties ───────────────────────────────────────────────────────────────────────────

describe('generated requests to every route', () => {
  it('finds the routes of the app', () => {
    const names = routes().map((route) => `${route.method} ${route.path}`);
    expect(names).toContain('POST /v1/threads/runs');
    expect(names).toContain('PUT /v1/policies/rate-limits/:id');
    expect(names.length).toBeGreaterThanOrEqual(14);
  });

  // The list of routes is only known once the app exists: one test walks them all.
  it(
    `answers ${RUNS} generated requests per route with a 4xx envelope or a valid 2xx, and writes nothing when refusing`,
    async () => {
      const statuses = new Map<number, number>();
      for (const route of routes()) {
        await fc.assert(
          fc.asyncProperty(requestFor(route), async (generated) => {
            const status = await sendAndCheck({
              method: route.method,
              path: generated.path + generated.query,
              headers: generated.headers,
              body: generated.body,
            });
            statuses.set(status, (statuses.get(status) ?? 0) + 1);
          }),
          { numRuns: RUNS },
        );
      }
      // The generators reach past the front door: some requests pass, many are refused for their content.
      expect([...statuses.keys()].some((status) => status < 300)).toBe(true);
      expect(statuses.get(400)).toBeGreaterThan(RUNS);
    },
    Math.max(120_000, RUNS * 14 * 20),
  ); // about 4 ms a request; a margin for slow machines

  it('leaves a consistent database: no dangling references, every run settled or waiting for tools', async () => {
    const client = gateway.database.client;
    expect((await client.execute('PRAGMA foreign_key_check')).rows).toEqual([]);
    expect(defined((await client.execute('PRAGMA integrity_check')).rows[0])[0]).toBe('ok');
    const active = await client.execute(
      "SELECT status FROM runs WHERE status IN ('queued', 'in_progress', 'cancelling')",
    );
    expect(active.rows).toEqual([]);
    expect((await gateway.request('/v1/policies/rate-limits', { key: tenant.workspaceKey })).status).toBe(200);
  });
});

describe('a body the client stops sending', () => {
  it.each([
    ['with a Content-Length', { 'content-length': '100' }],
    ['chunked', { 'transfer-encoding': 'chunked' }],
  ])('%s is a 400 invalid_json, not a logged server error', async (_name, framing) => {
    const logged = gateway.logs.length;
    let sent = false;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent) return controller.error(new Error('aborted')); // what Node reports when the socket closes
        sent = true;
        controller.enqueue(new TextEncoder().encode('{"conditions":'));
      },
    });
    const request = new Request('http://gateway/v1/policies/rate-limits', {
      method: 'POST',
      headers: { 'x-gateway-api-key': tenant.workspaceKey, 'content-type': 'application/json', ...framing },
      body,
      duplex: 'half',
    });
    const response = await gateway.app.request(request);
    expect(response.status).toBe(400);
    expect((await json(response)).error).toMatchObject({
      code: 'invalid_json',
      message: expect.stringMatching(/could not be read/),
    });
    expect(gateway.logs.slice(logged).join('\n')).not.toMatch(/"level":"error"/);
  });
});

// ── Over real HTTP: framing the in-process tests cannot send ─────────────────────────────────

/** One raw HTTP/1.1 exchange; the status line's code, or null when the server closed without one. */
function rawExchange(url: string, pieces: (string | Buffer)[], endEarly: boolean): Promise<number | null> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    let answer = '';
    // A guard against a hung exchange, not a timing assertion: the test fails if it fires.
    const guard = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer and no close within 10 s: ${answer.slice(0, 200)}`));
    }, 10_000);
    socket.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
    socket.on('error', () => undefined); // a reset after the server answered early
    socket.on('close', () => {
      clearTimeout(guard);
      resolve(answer ? Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0) : null);
    });
    socket.on('connect', () => {
      for (const piece of pieces) socket.write(piece);
      if (endEarly) socket.end();
    });
  });
}

const KEY_LINE = /workspace API key\s+(gk_\S+)/;

describe('framing over real HTTP (a gateway process)', () => {
  let process_: GatewayProcess;
  let dataDir: string;
  let key: string;
  let db: ReturnType<typeof createClient>;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'gateway-fuzz-'));
    process_ = await startGatewayProcess({
      DATA_DIR: dataDir,
      GATEWAY_MAX_BODY_BYTES: String(LIMIT),
      LOG_LEVEL: 'warn',
    });
    // The keys are printed just after the listening line.
    for (let i = 0; i < 100 && !KEY_LINE.test(process_.stdout()); i++)
      await new Promise((resolve) => setTimeout(resolve, 50));
    key = defined(defined(KEY_LINE.exec(process_.stdout()))[1]);
    db = createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
  });
  afterAll(async () => {
    db?.close();
    await process_?.stop('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  const head = (extra: string) =>
    `POST /v1/policies/rate-limits HTTP/1.1\r\nhost: gateway\r\nx-gateway-api-key: ${key}\r\ncontent-type: application/json\r\nconnection: close\r\n${extra}\r\n`;
  const chunk = (data: string) => `${Buffer.byteLength(data).toString(16)}\r\n${data}\r\n`;

  it('answers chunked, mis-framed and truncated bodies with a 4xx (413 over the limit), never a 5xx, and stays up', async () => {
    const policy = JSON.stringify({ ...VALID.policy, name: 'chunked' });
    /** Raw pieces to write, whether the client then leaves, and the statuses allowed (null: closed unanswered). */
    interface Exchange {
      name: string;
      pieces: string[];
      endEarly: boolean;
      expect: (number | null)[];
    }
    const framing: fc.Arbitrary<Exchange> = fc.oneof(
      // Chunked with no length, over the limit: whitespace padding keeps it valid JSON.
      fc.array(fc.integer({ min: 1, max: 4096 }), { minLength: 1, maxLength: 12 }).map((sizes) => {
        const padding = Math.max(LIMIT + 1 - policy.length, 0) + sizes.reduce((a, b) => a + b, 0);
        const body = ' '.repeat(padding) + policy;
        const pieces: string[] = [];
        let at = 0;
        for (const size of sizes) (pieces.push(chunk(body.slice(at, at + size))), (at += size));
        if (at < body.length) pieces.push(chunk(body.slice(at)));
        return {
          name: 'chunked over the limit',
          pieces: [head('transfer-encoding: chunked\r\n'), ...pieces, '0\r\n\r\n'],
          endEarly: false,
          expect: [413],
        };
      }),
      // Chunked garbage under the limit.
      fc
        .string({ maxLength: 300 })
        .filter((text) => text.length > 0)
        .map((text) => ({
          name: 'chunked garbage',
          pieces: [head('transfer-encoding: chunked\r\n'), chunk(text), '0\r\n\r\n'],
          endEarly: false,
          expect: [400, 401, 403],
        })),
      // Broken chunk framing: a size that is not hex, a chunk longer than announced.
      fc.constantFrom('zz\r\n{}\r\n0\r\n\r\n', '2\r\n{}}}}\r\n0\r\n\r\n', 'fffffffffffffffff\r\n{}\r\n').map((raw) => ({
        name: 'broken chunk framing',
        pieces: [head('transfer-encoding: chunked\r\n'), raw],
        endEarly: true,
        expect: [400, 413, null],
      })),
      // The body stops before its Content-Length, or before its last chunk, and the client leaves.
      fc.integer({ min: 1, max: LIMIT }).map((missing) => ({
        name: 'truncated body',
        pieces: [head(`content-length: ${policy.length + missing}\r\n`), policy],
        endEarly: true,
        expect: [400, 413, null],
      })),
      fc.constant<Exchange>({
        name: 'unfinished chunks',
        pieces: [head('transfer-encoding: chunked\r\n'), chunk(policy)],
        endEarly: true,
        expect: [400, null],
      }),
      // Both lengths (a smuggling attempt): the HTTP layer refuses it or drops the connection.
      fc.constant<Exchange>({
        name: 'content-length and chunked',
        pieces: [head(`content-length: 4\r\ntransfer-encoding: chunked\r\n`), chunk(policy), '0\r\n\r\n'],
        endEarly: false,
        expect: [400, null],
      }),
      // A Content-Length over the limit is refused from the header, before the body.
      fc.integer({ min: LIMIT + 1, max: 2 ** 40 }).map((length) => ({
        name: 'announced over the limit',
        pieces: [head(`content-length: ${length}\r\n`), '{"a":'],
        endEarly: false,
        expect: [413],
      })),
    );
    const before = await rowCounts(db);
    await fc.assert(
      fc.asyncProperty(framing, async (exchange) => {
        tally.inputsTried += 1;
        const status = await rawExchange(process_.url, exchange.pieces, exchange.endEarly);
        if (status !== null && status >= 500) tally.answered5xx += 1;
        expect({ name: exchange.name, status }).toEqual({
          name: exchange.name,
          status: expect.toBeOneOf(exchange.expect),
        });
      }),
      { numRuns: Math.max(RUNS, 20) },
    );
    const after = await rowCounts(db);
    if (JSON.stringify(after) !== JSON.stringify(before)) tally.rowsHalfWritten += 1;
    expect(after).toEqual(before);
    // Still up, and still serving.
    expect(process_.child.exitCode).toBeNull();
    expect((await fetch(`${process_.url}/health`)).status).toBe(200);
    const created = await fetch(`${process_.url}/v1/policies/rate-limits`, {
      method: 'POST',
      headers: { 'x-gateway-api-key': key, 'content-type': 'application/json' },
      body: policy,
    });
    expect(created.status).toBe(200);
    expect(process_.stderr()).not.toMatch(/"level":"error"/);
  });
});
