import fc from 'fast-check';
import { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, fakeDirective } from '../../support/fake-upstream';
import { storeFile } from '../../support/files';
import { apiRoutes, createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { recordTally } from '../../support/tally';

/**
 * Tenancy, as a matrix: every route of the app, called with the credentials of one tenant on the
 * resources of another (another workspace of the same organisation, another organisation), by id
 * and by naming the other workspace. Each answer is a 404 (the resource is not in the caller's
 * reach), a 403 (the caller named a workspace it has no access to) or a 401 (a virtual key of
 * another workspace); lists answer with the caller's own data only; no answer carries anything of
 * the other tenant; and the other tenant's resources are as they were.
 */

let gateway: TestGateway;
const tally = { inputsTried: 0, answered5xx: 0 };

/** Everything one workspace owns, with a marker in every text field it chose. */
interface Holdings {
  tenant: Tenant;
  marker: string;
  policyId: string;
  virtualKey: string;
  assistantId: string;
  /** A run waiting for tool outputs, and its tool call. */
  threadId: string;
  runId: string;
  toolCallId: string;
  /** A completed run. */
  doneThreadId: string;
  doneRunId: string;
  /** An uploaded image (purpose vision) whose name and bytes carry the marker. */
  fileId: string;
  /** A vector store with a file, added by a batch. */
  storeId: string;
  storeFileId: string;
  batchId: string;
  /** A chat completion stored with `store: true`, its messages and metadata carrying the marker. */
  completionId: string;
  /** A stored response, its input and metadata carrying the marker. */
  responseId: string;
  /** A container named with the marker, holding the file. */
  containerId: string;
}

let a: Holdings; // the caller
let b: Holdings; // another workspace of a's organisation
let c: Holdings; // a workspace of another organisation

async function holdings(tenant: Tenant): Promise<Holdings> {
  const marker = `private-${crypto.randomUUID()}`;
  const key = tenant.workspaceKey;
  const policy = await json(
    await gateway.request('/v1/policies/rate-limits', {
      key,
      body: {
        name: marker,
        conditions: [{ key: 'model', value: marker }],
        group_by: [{ key: 'api_key' }],
        type: 'requests',
        unit: 'rpm',
        value: 1000,
      },
    }),
  );
  const virtualKey = await gateway.virtualKey(tenant, {
    base_url: `http://${marker}.upstream.test/v1`,
    slug: 'shared-slug',
    api_key: `sk-${marker}`,
    // GET /v1/models would list it to anyone who reached this workspace.
    models: [marker],
  });
  const assistant = await json(
    await gateway.request('/v1/assistants', {
      key,
      body: {
        model: 'fake-model',
        name: marker,
        instructions: marker,
        metadata: { owner: marker },
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
      },
    }),
  );
  const run = async (scenario: object) =>
    json(
      await gateway.request('/v1/threads/runs', {
        key,
        headers: { 'x-gateway-virtual-key': virtualKey },
        body: {
          assistant_id: assistant.id,
          metadata: { owner: marker },
          thread: {
            messages: [{ role: 'user', content: `${marker}\n${fakeDirective(scenario)}` }],
            metadata: { owner: marker },
          },
        },
      }),
    );
  const image = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, ...new TextEncoder().encode(marker)]);
  const file = await gateway
    .openai({ 'x-gateway-api-key': key })
    .files.create({ file: await toFile(image, `${marker}.png`), purpose: 'vision' });
  const waiting = await run({ tool_calls: 1 });
  const done = await run({ reply: marker });
  const storeFileId = await storeFile(gateway, tenant, { filename: `${marker}.txt`, content: marker });
  const store = await json(
    await gateway.request('/v1/vector_stores', {
      key,
      headers: { 'x-gateway-virtual-key': virtualKey },
      body: { name: marker, metadata: { owner: marker } },
    }),
  );
  const batch = await json(
    await gateway.request(`/v1/vector_stores/${store.id}/file_batches`, { key, body: { file_ids: [storeFileId] } }),
  );
  const completion = await json(
    await gateway.request('/v1/chat/completions', {
      key,
      headers: { 'x-gateway-virtual-key': virtualKey },
      body: {
        model: 'fake-model',
        messages: [{ role: 'user', content: `${marker}\n${fakeDirective({ reply: marker })}` }],
        store: true,
        metadata: { owner: marker },
      },
    }),
  );
  const container = await json(
    await gateway.request('/v1/containers', { key, body: { name: marker, file_ids: [file.id] } }),
  );
  const response = await json(
    await gateway.request('/v1/responses', {
      key,
      headers: { 'x-gateway-virtual-key': virtualKey },
      body: {
        model: 'fake-model',
        input: `${marker}\n${fakeDirective({ reply: marker })}`,
        metadata: { owner: marker },
      },
    }),
  );
  await gateway.tasks.drain(10_000);
  const current = await json(await gateway.request(`/v1/threads/${waiting.thread_id}/runs/${waiting.id}`, { key }));
  expect(current.status).toBe('requires_action');
  return {
    tenant,
    marker,
    policyId: policy.id,
    virtualKey,
    assistantId: assistant.id,
    threadId: waiting.thread_id,
    runId: waiting.id,
    toolCallId: current.required_action.submit_tool_outputs.tool_calls[0].id,
    doneThreadId: done.thread_id,
    doneRunId: done.id,
    fileId: file.id,
    storeId: store.id,
    storeFileId,
    batchId: batch.id,
    completionId: completion.id,
    responseId: response.id,
    containerId: container.id,
  };
}

/** What the owner itself sees of its holdings: must be the same after the matrix. */
async function ownView(h: Holdings) {
  const key = h.tenant.workspaceKey;
  const get = async (path: string, headers: Record<string, string> = {}) =>
    json(await gateway.request(path, { key, headers }));
  return {
    policy: await get(`/v1/policies/rate-limits/${h.policyId}`),
    policies: await get('/v1/policies/rate-limits'),
    virtualKeys: await get('/v1/virtual-keys'),
    apiKeys: await get('/v1/api-keys'),
    workspaces: await get('/v1/workspaces'),
    assistant: await get(`/v1/assistants/${h.assistantId}`, { 'x-gateway-virtual-key': h.virtualKey }),
    thread: await get(`/v1/threads/${h.threadId}`),
    run: await get(`/v1/threads/${h.threadId}/runs/${h.runId}`),
    doneRun: await get(`/v1/threads/${h.doneThreadId}/runs/${h.doneRunId}`),
    runs: await get(`/v1/threads/${h.doneThreadId}/runs`),
    steps: await get(`/v1/threads/${h.doneThreadId}/runs/${h.doneRunId}/steps`),
    messages: await get(`/v1/threads/${h.doneThreadId}/messages`),
    file: await get(`/v1/files/${h.fileId}`),
    files: await get('/v1/files'),
    content: await (await gateway.request(`/v1/files/${h.fileId}/content`, { key })).text(),
    search: await json(
      await gateway.request(`/v1/vector_stores/${h.storeId}/search`, { key, body: { query: h.marker } }),
    ),
    store: await get(`/v1/vector_stores/${h.storeId}`),
    storeFiles: await get(`/v1/vector_stores/${h.storeId}/files`),
    storeFile: await get(`/v1/vector_stores/${h.storeId}/files/${h.storeFileId}`),
    fileContent: await get(`/v1/vector_stores/${h.storeId}/files/${h.storeFileId}/content`),
    batch: await get(`/v1/vector_stores/${h.storeId}/file_batches/${h.batchId}`),
    completion: await get(`/v1/chat/completions/${h.completionId}`),
    completions: await get('/v1/chat/completions'),
    completionMessages: await get(`/v1/chat/completions/${h.completionId}/messages`),
    response: await get(`/v1/responses/${h.responseId}`),
    responseInput: await get(`/v1/responses/${h.responseId}/input_items`),
  };
}

beforeAll(async () => {
  const upstream = createFakeUpstream();
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  const tenantA = await gateway.tenant();
  a = await holdings(tenantA);
  b = await holdings(await gateway.tenant({ organisationId: tenantA.organisationId }));
  c = await holdings(await gateway.tenant());
});
afterAll(async () => {
  recordTally('isolation', tally);
  await gateway?.close();
});

// ── The matrix ───────────────────────────────────────────────────────────────────────────────

/** Who calls: a key, and the workspace it acts on (its own, or a's through an organisation key). */
interface Caller {
  name: string;
  key: string;
  organisation: boolean;
}

interface Probe {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: Record<string, unknown>;
  /** A list of the caller's own: 200, with nothing of the victim in it. */
  list?: boolean;
  /** The refusals allowed; default 401 (a virtual key of theirs), 403 (their workspace named), 404. */
  refusals?: number[];
}

/** Another tenant's id as a page cursor is as unknown as any other: 400 invalid_value. */
const UNKNOWN_CURSOR = [400];

/** The probes of a call passed through to the caller's own virtual key's provider, naming the victim's workspace. */
const passedThrough =
  (path: string, body: (victim: Holdings) => Record<string, unknown>) =>
  (v: Holdings): Probe[] =>
    [v.tenant.workspace.id, v.tenant.workspace.slug].map((workspace) => ({
      method: 'POST',
      path,
      headers: { 'x-gateway-workspace-id': workspace },
      body: body(v),
    }));

/** A response (or a count of its tokens) that names the victim's response, thread or assistant. */
const responseProbes = (path: string, v: Holdings): Probe[] =>
  [
    { previous_response_id: v.responseId },
    { conversation: v.doneThreadId },
    { conversation: { id: v.threadId } },
    { prompt: { id: v.assistantId } },
  ].map((names) => ({
    method: 'POST',
    path,
    headers: scope(),
    body: { model: 'fake-model', input: 'planted', ...names },
  }));

/**
 * For each route, the requests that try to reach `victim` from `caller` (who acts on workspace a).
 * A route missing here fails the coverage test below: a new route needs its row.
 */
const MATRIX: Record<string, (victim: Holdings, caller: Caller) => Probe[]> = {
  'GET /v1/policies/rate-limits': (v) => [
    { method: 'GET', path: '/v1/policies/rate-limits', list: true },
    { method: 'GET', path: '/v1/policies/rate-limits?status=archived', list: true },
    { method: 'GET', path: `/v1/policies/rate-limits?workspace_id=${v.tenant.workspace.id}` },
    { method: 'GET', path: `/v1/policies/rate-limits?workspace_id=${v.tenant.workspace.slug}` },
  ],
  'POST /v1/policies/rate-limits': (v, caller) => {
    const policy = {
      conditions: [{ key: 'model', value: '*' }],
      group_by: [{ key: 'model' }],
      type: 'requests',
      unit: 'rpm',
      value: 1,
    };
    const own = caller.organisation ? { organisation_id: a.tenant.organisationId } : {};
    const probes: Probe[] = [
      {
        method: 'POST',
        path: '/v1/policies/rate-limits',
        body: { ...policy, ...own, workspace_id: v.tenant.workspace.id },
      },
      {
        method: 'POST',
        path: '/v1/policies/rate-limits',
        body: { ...policy, workspace_id: v.tenant.workspace.id, organisation_id: v.tenant.organisationId },
      },
    ];
    if (v.tenant.organisationId !== a.tenant.organisationId) {
      probes.push({
        method: 'POST',
        path: '/v1/policies/rate-limits',
        body: { ...policy, workspace_id: a.tenant.workspace.id, organisation_id: v.tenant.organisationId },
      });
    }
    return probes;
  },
  'GET /v1/policies/rate-limits/:id': (v) => [{ method: 'GET', path: `/v1/policies/rate-limits/${v.policyId}` }],
  'GET /v1/policies/rate-limits/:id/counters': (v) => [
    { method: 'GET', path: `/v1/policies/rate-limits/${v.policyId}/counters` },
  ],
  'PUT /v1/policies/rate-limits/:id': (v) => [
    { method: 'PUT', path: `/v1/policies/rate-limits/${v.policyId}`, body: { value: 1 } },
  ],
  'DELETE /v1/policies/rate-limits/:id': (v) => [{ method: 'DELETE', path: `/v1/policies/rate-limits/${v.policyId}` }],
  'GET /v1/virtual-keys': (v) => [
    { method: 'GET', path: `/v1/virtual-keys${scopeQuery()}`, list: true },
    { method: 'GET', path: `/v1/virtual-keys?include_revoked=true`, list: true },
    { method: 'GET', path: `/v1/virtual-keys?workspace_id=${v.tenant.workspace.id}` },
  ],
  'POST /v1/virtual-keys': (v) => [
    {
      method: 'POST',
      path: '/v1/virtual-keys',
      body: { slug: 'planted', provider: 'openai', api_key: 'sk-x', workspace_id: v.tenant.workspace.id },
    },
    {
      method: 'POST',
      path: '/v1/virtual-keys',
      body: { slug: 'planted', provider: 'openai', api_key: 'sk-x', workspace_id: v.tenant.workspace.slug },
    },
  ],
  'POST /v1/virtual-keys/:slug': (v) => [
    // The same slug exists in a: naming a's workspace updates a's key, never v's (checked below).
    {
      method: 'POST',
      path: `/v1/virtual-keys/${v.virtualKey}`,
      body: { workspace_id: v.tenant.workspace.id, base_url: 'https://planted.example/v1' },
    },
  ],
  'PATCH /v1/virtual-keys/:slug': (v) => [
    {
      method: 'PATCH',
      path: `/v1/virtual-keys/${v.virtualKey}`,
      body: { workspace_id: v.tenant.workspace.slug, models: ['planted'] },
    },
  ],
  'DELETE /v1/virtual-keys/:slug': (v) => [
    { method: 'DELETE', path: `/v1/virtual-keys/${v.virtualKey}?workspace_id=${v.tenant.workspace.id}` },
    // The same slug exists in a: naming a's workspace revokes a's key, never v's (checked below).
  ],
  'GET /v1/workspaces': () => [{ method: 'GET', path: '/v1/workspaces', list: true }],
  'GET /v1/api-keys': (v) => [
    { method: 'GET', path: '/v1/api-keys', list: true },
    { method: 'GET', path: `/v1/api-keys?workspace_id=${v.tenant.workspace.id}` },
    { method: 'GET', path: `/v1/api-keys?workspace_id=${v.tenant.workspace.slug}` },
  ],
  'POST /v1/api-keys': (v) => [
    { method: 'POST', path: '/v1/api-keys', body: { name: 'planted', workspace_id: v.tenant.workspace.id } },
    { method: 'POST', path: '/v1/api-keys', body: { name: 'planted', workspace_id: v.tenant.workspace.slug } },
  ],
  'DELETE /v1/api-keys/:id': (v) => [
    { method: 'DELETE', path: `/v1/api-keys/${v.tenant.workspaceKeyId}` },
    { method: 'DELETE', path: `/v1/api-keys/${v.tenant.orgKeyId}` },
  ],
  'GET /v1/usage': (v) => [
    { method: 'GET', path: '/v1/usage?group_by=workspace_id,api_key_id,virtual_key,model,kind&limit=31', list: true },
    { method: 'GET', path: `/v1/usage?workspace_id=${v.tenant.workspace.id}` },
    { method: 'GET', path: `/v1/usage?workspace_id=${v.tenant.workspace.slug}&group_by=api_key_id` },
  ],
  'GET /v1/usage/runs': (v) => [
    { method: 'GET', path: '/v1/usage/runs?bucket_width=1h&limit=168', list: true },
    { method: 'GET', path: `/v1/usage/runs?workspace_id=${v.tenant.workspace.id}` },
  ],
  'GET /v1/runs': (v) => [
    { method: 'GET', path: '/v1/runs', headers: scope(), list: true },
    { method: 'GET', path: `/v1/runs?thread_id=${v.doneThreadId}`, headers: scope(), list: true },
    { method: 'GET', path: `/v1/runs?assistant_id=${v.assistantId}`, headers: scope(), list: true },
    { method: 'GET', path: `/v1/runs?after=${v.doneRunId}`, headers: scope(), refusals: UNKNOWN_CURSOR },
    { method: 'GET', path: '/v1/runs', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/runs/:run_id/trace': (v) => [
    { method: 'GET', path: `/v1/runs/${v.doneRunId}/trace`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/runs/${v.doneRunId}/trace`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'GET /v1/threads': (v) => [
    { method: 'GET', path: '/v1/threads', headers: scope(), list: true },
    { method: 'GET', path: `/v1/threads?assistant_id=${v.assistantId}`, headers: scope(), list: true },
    { method: 'GET', path: `/v1/threads?before=${v.doneThreadId}`, headers: scope(), refusals: UNKNOWN_CURSOR },
    { method: 'GET', path: '/v1/threads', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/assistants': (v) => [
    { method: 'GET', path: '/v1/assistants', headers: scope(), list: true },
    { method: 'GET', path: `/v1/assistants?after=${v.assistantId}`, headers: scope(), refusals: UNKNOWN_CURSOR },
    { method: 'GET', path: '/v1/assistants', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'POST /v1/assistants': (v) => [
    {
      method: 'POST',
      path: '/v1/assistants',
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.slug },
      body: { model: 'm' },
    },
  ],
  'GET /v1/assistants/:assistant_id': (v) => [
    {
      method: 'GET',
      path: `/v1/assistants/${v.assistantId}`,
      headers: { ...scope(), 'x-gateway-virtual-key': a.virtualKey },
    },
    {
      method: 'GET',
      path: `/v1/assistants/${a.assistantId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id, 'x-gateway-virtual-key': v.virtualKey },
    },
  ],
  'POST /v1/assistants/:assistant_id': (v) => [
    { method: 'POST', path: `/v1/assistants/${v.assistantId}`, headers: scope(), body: { name: 'planted' } },
    {
      method: 'POST',
      path: `/v1/assistants/${v.assistantId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
      body: { name: 'planted' },
    },
  ],
  'DELETE /v1/assistants/:assistant_id': (v) => [
    { method: 'DELETE', path: `/v1/assistants/${v.assistantId}`, headers: scope() },
    {
      method: 'DELETE',
      path: `/v1/assistants/${v.assistantId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'POST /v1/threads/runs': (v) => {
    const body = (assistant: string) => ({
      assistant_id: assistant,
      thread: { messages: [{ role: 'user', content: 'hi' }] },
    });
    return [
      {
        method: 'POST',
        path: '/v1/threads/runs',
        headers: { ...scope(), 'x-gateway-virtual-key': a.virtualKey },
        body: body(v.assistantId),
      },
      {
        method: 'POST',
        path: '/v1/threads/runs',
        headers: { ...scope(), 'x-gateway-virtual-key': a.virtualKey },
        body: { ...body(v.assistantId), stream: true },
      },
      {
        method: 'POST',
        path: '/v1/threads/runs',
        headers: { 'x-gateway-workspace-id': v.tenant.workspace.id, 'x-gateway-virtual-key': v.virtualKey },
        body: body(v.assistantId),
      },
    ];
  },
  'POST /v1/threads': (v) => [
    {
      method: 'POST',
      path: '/v1/threads',
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
      body: { metadata: { planted: 'yes' } },
    },
    { method: 'POST', path: '/v1/threads', headers: { 'x-gateway-workspace-id': v.tenant.workspace.slug }, body: {} },
  ],
  'POST /v1/threads/:thread_id': (v) => [
    { method: 'POST', path: `/v1/threads/${v.doneThreadId}`, headers: scope(), body: { metadata: { planted: 'yes' } } },
    {
      method: 'POST',
      path: `/v1/threads/${v.doneThreadId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
      body: { metadata: { planted: 'yes' } },
    },
  ],
  'DELETE /v1/threads/:thread_id': (v) => [
    { method: 'DELETE', path: `/v1/threads/${v.doneThreadId}`, headers: scope() },
    { method: 'DELETE', path: `/v1/threads/${v.threadId}`, headers: scope() },
    {
      method: 'DELETE',
      path: `/v1/threads/${v.doneThreadId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'POST /v1/threads/:thread_id/messages': (v) => [
    {
      method: 'POST',
      path: `/v1/threads/${v.doneThreadId}/messages`,
      headers: scope(),
      body: { role: 'user', content: 'planted' },
    },
    // A thread its run holds: not found, rather than held by a run the answer would name.
    {
      method: 'POST',
      path: `/v1/threads/${v.threadId}/messages`,
      headers: scope(),
      body: { role: 'user', content: 'planted' },
    },
    {
      method: 'POST',
      path: `/v1/threads/${v.doneThreadId}/messages`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
      body: { role: 'user', content: 'planted' },
    },
    // The victim's image in the caller's own thread: as unknown as any file id.
    {
      method: 'POST',
      path: `/v1/threads/${a.doneThreadId}/messages`,
      headers: scope(),
      body: { role: 'user', content: [{ type: 'image_file', image_file: { file_id: v.fileId } }] },
      refusals: [400],
    },
  ],
  'GET /v1/threads/:thread_id/messages/:message_id': (v) => [
    { method: 'GET', path: `/v1/threads/${v.doneThreadId}/messages/${firstMessageOf(v)}`, headers: scope() },
    // A thread of the caller's own with the victim's message.
    { method: 'GET', path: `/v1/threads/${a.doneThreadId}/messages/${firstMessageOf(v)}`, headers: scope() },
  ],
  'POST /v1/threads/:thread_id/messages/:message_id': (v) => [
    {
      method: 'POST',
      path: `/v1/threads/${v.doneThreadId}/messages/${firstMessageOf(v)}`,
      headers: scope(),
      body: { metadata: { planted: 'yes' } },
    },
    {
      method: 'POST',
      path: `/v1/threads/${a.doneThreadId}/messages/${firstMessageOf(v)}`,
      headers: scope(),
      body: { metadata: { planted: 'yes' } },
    },
  ],
  'DELETE /v1/threads/:thread_id/messages/:message_id': (v) => [
    { method: 'DELETE', path: `/v1/threads/${v.doneThreadId}/messages/${firstMessageOf(v)}`, headers: scope() },
    { method: 'DELETE', path: `/v1/threads/${a.doneThreadId}/messages/${firstMessageOf(v)}`, headers: scope() },
  ],
  // A conversation is a thread: the victim's threads, under /v1/conversations.
  'POST /v1/conversations': (v) => [
    {
      method: 'POST',
      path: '/v1/conversations',
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
      body: { metadata: { planted: 'yes' } },
    },
    // The victim's image in a new conversation of the caller's: as unknown as any file id.
    {
      method: 'POST',
      path: '/v1/conversations',
      headers: scope(),
      body: { items: [{ role: 'user', content: [{ type: 'input_image', file_id: v.fileId }] }] },
      refusals: [400],
    },
  ],
  'GET /v1/conversations/:conversation_id': (v) => [
    { method: 'GET', path: `/v1/conversations/${v.doneThreadId}`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/conversations/${v.doneThreadId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'POST /v1/conversations/:conversation_id': (v) => [
    {
      method: 'POST',
      path: `/v1/conversations/${v.doneThreadId}`,
      headers: scope(),
      body: { metadata: { planted: 'yes' } },
    },
  ],
  'DELETE /v1/conversations/:conversation_id': (v) => [
    { method: 'DELETE', path: `/v1/conversations/${v.doneThreadId}`, headers: scope() },
    { method: 'DELETE', path: `/v1/conversations/${v.threadId}`, headers: scope() },
  ],
  'POST /v1/conversations/:conversation_id/items': (v) => [
    {
      method: 'POST',
      path: `/v1/conversations/${v.doneThreadId}/items`,
      headers: scope(),
      body: { items: [{ role: 'user', content: 'planted' }] },
    },
    // The victim's call in the caller's own conversation: no such call there.
    {
      method: 'POST',
      path: `/v1/conversations/${a.doneThreadId}/items`,
      headers: scope(),
      body: { items: [{ type: 'function_call_output', call_id: v.toolCallId, output: 'planted' }] },
      refusals: [400],
    },
  ],
  'GET /v1/conversations/:conversation_id/items': (v) => [
    { method: 'GET', path: `/v1/conversations/${v.doneThreadId}/items`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/conversations/${a.doneThreadId}/items?after=${firstMessageOf(v)}`,
      headers: scope(),
      refusals: UNKNOWN_CURSOR,
    },
  ],
  'GET /v1/conversations/:conversation_id/items/:item_id': (v) => [
    { method: 'GET', path: `/v1/conversations/${v.doneThreadId}/items/${firstMessageOf(v)}`, headers: scope() },
    { method: 'GET', path: `/v1/conversations/${a.doneThreadId}/items/${firstMessageOf(v)}`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/conversations/${a.doneThreadId}/items/fc_${firstStepOf(v).replace(/^step_/, '')}_0`,
      headers: scope(),
    },
  ],
  'DELETE /v1/conversations/:conversation_id/items/:item_id': (v) => [
    { method: 'DELETE', path: `/v1/conversations/${v.doneThreadId}/items/${firstMessageOf(v)}`, headers: scope() },
    { method: 'DELETE', path: `/v1/conversations/${a.doneThreadId}/items/${firstMessageOf(v)}`, headers: scope() },
  ],
  'GET /v1/threads/:thread_id': (v) => [
    { method: 'GET', path: `/v1/threads/${v.threadId}`, headers: scope() },
    { method: 'GET', path: `/v1/threads/${v.threadId}`, headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/threads/:thread_id/messages': (v) => [
    { method: 'GET', path: `/v1/threads/${v.doneThreadId}/messages`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/threads/${a.doneThreadId}/messages?run_id=${v.doneRunId}`,
      headers: scope(),
      list: true,
    },
    {
      method: 'GET',
      path: `/v1/threads/${a.doneThreadId}/messages?after=${firstMessageOf(v)}`,
      headers: scope(),
      refusals: UNKNOWN_CURSOR,
    },
  ],
  'GET /v1/threads/:thread_id/runs/:run_id': (v) => [
    { method: 'GET', path: `/v1/threads/${v.doneThreadId}/runs/${v.doneRunId}`, headers: scope() },
    // A thread of the caller's own with the victim's run.
    { method: 'GET', path: `/v1/threads/${a.doneThreadId}/runs/${v.doneRunId}`, headers: scope() },
  ],
  'GET /v1/threads/:thread_id/runs': (v) => [
    { method: 'GET', path: `/v1/threads/${v.doneThreadId}/runs`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/threads/${v.doneThreadId}/runs`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
    {
      method: 'GET',
      path: `/v1/threads/${a.doneThreadId}/runs?after=${v.doneRunId}`,
      headers: scope(),
      refusals: UNKNOWN_CURSOR,
    },
  ],
  'POST /v1/threads/:thread_id/runs': (v) => [
    // The victim's thread with the caller's assistant and key; the caller's thread with the victim's assistant.
    {
      method: 'POST',
      path: `/v1/threads/${v.doneThreadId}/runs`,
      headers: { ...scope(), 'x-gateway-virtual-key': a.virtualKey },
      body: { assistant_id: a.assistantId },
    },
    {
      method: 'POST',
      path: `/v1/threads/${a.doneThreadId}/runs`,
      headers: { ...scope(), 'x-gateway-virtual-key': a.virtualKey },
      body: { assistant_id: v.assistantId, stream: true },
    },
    {
      method: 'POST',
      path: `/v1/threads/${v.doneThreadId}/runs`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id, 'x-gateway-virtual-key': v.virtualKey },
      body: { assistant_id: v.assistantId },
    },
  ],
  'POST /v1/threads/:thread_id/runs/:run_id': (v) => [
    {
      method: 'POST',
      path: `/v1/threads/${v.doneThreadId}/runs/${v.doneRunId}`,
      headers: scope(),
      body: { metadata: { planted: 'yes' } },
    },
    {
      method: 'POST',
      path: `/v1/threads/${a.doneThreadId}/runs/${v.doneRunId}`,
      headers: scope(),
      body: { metadata: { planted: 'yes' } },
    },
  ],
  'GET /v1/threads/:thread_id/runs/:run_id/steps': (v) => [
    { method: 'GET', path: `/v1/threads/${v.doneThreadId}/runs/${v.doneRunId}/steps`, headers: scope() },
    { method: 'GET', path: `/v1/threads/${a.doneThreadId}/runs/${v.doneRunId}/steps`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/threads/${a.doneThreadId}/runs/${a.doneRunId}/steps?after=${firstStepOf(v)}`,
      headers: scope(),
      refusals: UNKNOWN_CURSOR,
    },
  ],
  'GET /v1/threads/:thread_id/runs/:run_id/steps/:step_id': (v) => [
    {
      method: 'GET',
      path: `/v1/threads/${v.doneThreadId}/runs/${v.doneRunId}/steps/${firstStepOf(v)}`,
      headers: scope(),
    },
    // The caller's own run with the victim's step.
    {
      method: 'GET',
      path: `/v1/threads/${a.doneThreadId}/runs/${a.doneRunId}/steps/${firstStepOf(v)}`,
      headers: scope(),
    },
  ],
  'POST /v1/threads/:thread_id/runs/:run_id/submit_tool_outputs': (v) => [
    {
      method: 'POST',
      path: `/v1/threads/${v.threadId}/runs/${v.runId}/submit_tool_outputs`,
      headers: scope(),
      body: { tool_outputs: [{ tool_call_id: v.toolCallId, output: 'planted' }] },
    },
    {
      method: 'POST',
      path: `/v1/threads/${a.threadId}/runs/${v.runId}/submit_tool_outputs`,
      headers: scope(),
      body: { tool_outputs: [{ tool_call_id: v.toolCallId, output: 'planted' }] },
    },
  ],
  'GET /v1/files': (v) => [
    { method: 'GET', path: '/v1/files', headers: scope(), list: true },
    { method: 'GET', path: '/v1/files?purpose=vision', headers: scope(), list: true },
    { method: 'GET', path: `/v1/files?after=${v.fileId}`, headers: scope(), refusals: UNKNOWN_CURSOR },
    { method: 'GET', path: '/v1/files', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  // Its provider is the caller's own virtual key's; naming another workspace is refused before any.
  'POST /v1/chat/completions': (v) =>
    [v.tenant.workspace.id, v.tenant.workspace.slug].map((workspace) => ({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'x-gateway-workspace-id': workspace },
      body: { model: 'fake-model', messages: [{ role: 'user', content: v.marker }] },
    })),
  'GET /v1/chat/completions': (v) => [
    { method: 'GET', path: '/v1/chat/completions', headers: scope(), list: true },
    { method: 'GET', path: `/v1/chat/completions?metadata[owner]=${v.marker}`, headers: scope(), list: true },
    { method: 'GET', path: `/v1/chat/completions?after=${v.completionId}`, headers: scope(), refusals: UNKNOWN_CURSOR },
    { method: 'GET', path: '/v1/chat/completions', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/chat/completions/:completion_id': (v) => [
    { method: 'GET', path: `/v1/chat/completions/${v.completionId}`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/chat/completions/${v.completionId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'POST /v1/chat/completions/:completion_id': (v) => [
    {
      method: 'POST',
      path: `/v1/chat/completions/${v.completionId}`,
      headers: scope(),
      body: { metadata: { owner: 'planted' } },
    },
  ],
  'DELETE /v1/chat/completions/:completion_id': (v) => [
    { method: 'DELETE', path: `/v1/chat/completions/${v.completionId}`, headers: scope() },
  ],
  'GET /v1/chat/completions/:completion_id/messages': (v) => [
    { method: 'GET', path: `/v1/chat/completions/${v.completionId}/messages`, headers: scope() },
    // The caller's own completion with the victim's message as the cursor.
    {
      method: 'GET',
      path: `/v1/chat/completions/${a.completionId}/messages?after=${v.completionId}-0`,
      headers: scope(),
      refusals: UNKNOWN_CURSOR,
    },
  ],
  'GET /v1/models': (v) => [
    { method: 'GET', path: '/v1/models', headers: scope(), list: true },
    { method: 'GET', path: '/v1/models', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/models/:model{.+}': (v) => [
    { method: 'GET', path: `/v1/models/${v.marker}`, headers: scope() },
    { method: 'GET', path: `/v1/models/${v.marker}`, headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  // A response goes on from the victim's response, conversation (a thread) or prompt (an assistant): never.
  'POST /v1/responses': (v) => responseProbes('/v1/responses', v),
  'POST /v1/responses/input_tokens': (v) => responseProbes('/v1/responses/input_tokens', v),
  'GET /v1/responses/:response_id': (v) => [
    { method: 'GET', path: `/v1/responses/${v.responseId}`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/responses/${v.responseId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'DELETE /v1/responses/:response_id': (v) => [
    { method: 'DELETE', path: `/v1/responses/${v.responseId}`, headers: scope() },
  ],
  'POST /v1/responses/:response_id/cancel': (v) => [
    { method: 'POST', path: `/v1/responses/${v.responseId}/cancel`, headers: scope() },
  ],
  'GET /v1/responses/:response_id/input_items': (v) => [
    { method: 'GET', path: `/v1/responses/${v.responseId}/input_items`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/responses/${a.responseId}/input_items?after=${v.responseId}`,
      headers: scope(),
      refusals: UNKNOWN_CURSOR,
    },
  ],
  'POST /v1/completions': passedThrough('/v1/completions', (v) => ({ model: 'fake-model', prompt: v.marker })),
  'POST /v1/embeddings': passedThrough('/v1/embeddings', (v) => ({ model: 'fake-embeddings', input: v.marker })),
  'POST /v1/moderations': passedThrough('/v1/moderations', (v) => ({ input: v.marker })),
  // Read no further than the workspace: the body (not multipart here) is never reached.
  'POST /v1/containers': (v) => [
    { method: 'POST', path: '/v1/containers', body: { name: 'x', file_ids: [v.fileId] }, headers: scope() },
    { method: 'POST', path: '/v1/containers', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/containers': (v) => [
    { method: 'GET', path: '/v1/containers', headers: scope(), list: true },
    { method: 'GET', path: `/v1/containers?after=${v.containerId}`, headers: scope(), refusals: UNKNOWN_CURSOR },
    { method: 'GET', path: '/v1/containers', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/containers/:container_id': (v) => [
    { method: 'GET', path: `/v1/containers/${v.containerId}`, headers: scope() },
  ],
  'DELETE /v1/containers/:container_id': (v) => [
    { method: 'DELETE', path: `/v1/containers/${v.containerId}`, headers: scope() },
  ],
  'POST /v1/containers/:container_id/files': (v) => [
    { method: 'POST', path: `/v1/containers/${v.containerId}/files`, body: { file_id: a.fileId }, headers: scope() },
    { method: 'POST', path: `/v1/containers/${a.containerId}/files`, body: { file_id: v.fileId }, headers: scope() },
  ],
  'GET /v1/containers/:container_id/files': (v) => [
    { method: 'GET', path: `/v1/containers/${v.containerId}/files`, headers: scope() },
  ],
  'GET /v1/containers/:container_id/files/:file_id': (v) => [
    { method: 'GET', path: `/v1/containers/${v.containerId}/files/${v.fileId}`, headers: scope() },
  ],
  'DELETE /v1/containers/:container_id/files/:file_id': (v) => [
    { method: 'DELETE', path: `/v1/containers/${v.containerId}/files/${v.fileId}`, headers: scope() },
  ],
  'GET /v1/containers/:container_id/files/:file_id/content': (v) => [
    { method: 'GET', path: `/v1/containers/${v.containerId}/files/${v.fileId}/content`, headers: scope() },
  ],
  'POST /v1/files': (v) => [
    { method: 'POST', path: '/v1/files', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
    { method: 'POST', path: '/v1/files', headers: { 'x-gateway-workspace-id': v.tenant.workspace.slug } },
  ],
  'GET /v1/files/:file_id': (v) => [
    { method: 'GET', path: `/v1/files/${v.fileId}`, headers: scope() },
    { method: 'GET', path: `/v1/files/${v.fileId}`, headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'DELETE /v1/files/:file_id': (v) => [
    { method: 'DELETE', path: `/v1/files/${v.fileId}`, headers: scope() },
    { method: 'DELETE', path: `/v1/files/${v.fileId}`, headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'GET /v1/files/:file_id/content': (v) => [
    { method: 'GET', path: `/v1/files/${v.fileId}/content`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/files/${v.fileId}/content`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.slug },
    },
  ],
  'POST /v1/vector_stores/:vector_store_id/search': (v) => [
    { method: 'POST', path: `/v1/vector_stores/${v.storeId}/search`, headers: scope(), body: { query: v.marker } },
    {
      method: 'POST',
      path: `/v1/vector_stores/${v.storeId}/search`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
      body: { query: v.marker },
    },
  ],
  'POST /v1/threads/:thread_id/runs/:run_id/cancel': (v) => [
    { method: 'POST', path: `/v1/threads/${v.threadId}/runs/${v.runId}/cancel`, headers: scope() },
    { method: 'POST', path: `/v1/threads/${a.threadId}/runs/${v.runId}/cancel`, headers: scope() },
    {
      method: 'POST',
      path: `/v1/threads/${v.threadId}/runs/${v.runId}/cancel`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.slug },
    },
  ],
  'GET /v1/vector_stores': (v) => [
    { method: 'GET', path: '/v1/vector_stores', headers: scope(), list: true },
    { method: 'GET', path: `/v1/vector_stores?after=${v.storeId}`, headers: scope(), refusals: UNKNOWN_CURSOR },
    { method: 'GET', path: '/v1/vector_stores', headers: { 'x-gateway-workspace-id': v.tenant.workspace.id } },
  ],
  'POST /v1/vector_stores': (v) => [
    {
      method: 'POST',
      path: '/v1/vector_stores',
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.slug },
      body: { name: 'planted' },
    },
    // The caller's own store, with the victim's file or the victim's virtual key.
    {
      method: 'POST',
      path: '/v1/vector_stores',
      headers: { ...scope(), 'x-gateway-virtual-key': a.virtualKey },
      body: { file_ids: [v.storeFileId] },
    },
  ],
  'GET /v1/vector_stores/:vector_store_id': (v) => [
    { method: 'GET', path: `/v1/vector_stores/${v.storeId}`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/vector_stores/${v.storeId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'POST /v1/vector_stores/:vector_store_id': (v) => [
    { method: 'POST', path: `/v1/vector_stores/${v.storeId}`, headers: scope(), body: { name: 'planted' } },
    {
      method: 'POST',
      path: `/v1/vector_stores/${v.storeId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
      body: { name: 'planted' },
    },
  ],
  'DELETE /v1/vector_stores/:vector_store_id': (v) => [
    { method: 'DELETE', path: `/v1/vector_stores/${v.storeId}`, headers: scope() },
    {
      method: 'DELETE',
      path: `/v1/vector_stores/${v.storeId}`,
      headers: { 'x-gateway-workspace-id': v.tenant.workspace.id },
    },
  ],
  'POST /v1/vector_stores/:vector_store_id/files': (v) => [
    {
      method: 'POST',
      path: `/v1/vector_stores/${v.storeId}/files`,
      headers: scope(),
      body: { file_id: a.storeFileId },
    },
    {
      method: 'POST',
      path: `/v1/vector_stores/${a.storeId}/files`,
      headers: scope(),
      body: { file_id: v.storeFileId },
    },
  ],
  'GET /v1/vector_stores/:vector_store_id/files': (v) => [
    { method: 'GET', path: `/v1/vector_stores/${v.storeId}/files`, headers: scope() },
    {
      method: 'GET',
      path: `/v1/vector_stores/${a.storeId}/files?after=${v.storeFileId}`,
      headers: scope(),
      refusals: UNKNOWN_CURSOR,
    },
  ],
  'GET /v1/vector_stores/:vector_store_id/files/:file_id': (v) => [
    { method: 'GET', path: `/v1/vector_stores/${v.storeId}/files/${v.storeFileId}`, headers: scope() },
    { method: 'GET', path: `/v1/vector_stores/${a.storeId}/files/${v.storeFileId}`, headers: scope() },
  ],
  'POST /v1/vector_stores/:vector_store_id/files/:file_id': (v) => [
    {
      method: 'POST',
      path: `/v1/vector_stores/${v.storeId}/files/${v.storeFileId}`,
      headers: scope(),
      body: { attributes: { planted: true } },
    },
    {
      method: 'POST',
      path: `/v1/vector_stores/${a.storeId}/files/${v.storeFileId}`,
      headers: scope(),
      body: { attributes: { planted: true } },
    },
  ],
  'DELETE /v1/vector_stores/:vector_store_id/files/:file_id': (v) => [
    { method: 'DELETE', path: `/v1/vector_stores/${v.storeId}/files/${v.storeFileId}`, headers: scope() },
    { method: 'DELETE', path: `/v1/vector_stores/${a.storeId}/files/${v.storeFileId}`, headers: scope() },
  ],
  'GET /v1/vector_stores/:vector_store_id/files/:file_id/content': (v) => [
    { method: 'GET', path: `/v1/vector_stores/${v.storeId}/files/${v.storeFileId}/content`, headers: scope() },
    { method: 'GET', path: `/v1/vector_stores/${a.storeId}/files/${v.storeFileId}/content`, headers: scope() },
  ],
  'POST /v1/vector_stores/:vector_store_id/file_batches': (v) => [
    {
      method: 'POST',
      path: `/v1/vector_stores/${v.storeId}/file_batches`,
      headers: scope(),
      body: { file_ids: [a.storeFileId] },
    },
    {
      method: 'POST',
      path: `/v1/vector_stores/${a.storeId}/file_batches`,
      headers: scope(),
      body: { files: [{ file_id: v.storeFileId }] },
    },
  ],
  'GET /v1/vector_stores/:vector_store_id/file_batches/:batch_id': (v) => [
    { method: 'GET', path: `/v1/vector_stores/${v.storeId}/file_batches/${v.batchId}`, headers: scope() },
    { method: 'GET', path: `/v1/vector_stores/${a.storeId}/file_batches/${v.batchId}`, headers: scope() },
  ],
  'POST /v1/vector_stores/:vector_store_id/file_batches/:batch_id/cancel': (v) => [
    { method: 'POST', path: `/v1/vector_stores/${v.storeId}/file_batches/${v.batchId}/cancel`, headers: scope() },
    { method: 'POST', path: `/v1/vector_stores/${a.storeId}/file_batches/${v.batchId}/cancel`, headers: scope() },
  ],
  'GET /v1/vector_stores/:vector_store_id/file_batches/:batch_id/files': (v) => [
    { method: 'GET', path: `/v1/vector_stores/${v.storeId}/file_batches/${v.batchId}/files`, headers: scope() },
    { method: 'GET', path: `/v1/vector_stores/${a.storeId}/file_batches/${v.batchId}/files`, headers: scope() },
  ],
};

/** An organisation key names the workspace it acts on (a's); a workspace key may too. */
const scope = () => ({ 'x-gateway-workspace-id': a.tenant.workspace.id });
const scopeQuery = () => `?workspace_id=${a.tenant.workspace.id}`;

const victimMessages = new Map<string, string>();
const firstMessageOf = (v: Holdings) => victimMessages.get(v.marker) ?? 'msg_unknown';
const victimSteps = new Map<string, string>();
const firstStepOf = (v: Holdings) => victimSteps.get(v.marker) ?? 'step_unknown';

function appRoutes(): string[] {
  return apiRoutes(gateway.app).map((route) => `${route.method} ${route.path}`);
}

/** Everything of the victim that must not leave: its marker and the ids the caller did not send. */
function leaks(text: string, victim: Holdings, sent: string): string[] {
  const secrets = [
    victim.marker,
    victim.tenant.workspaceKey,
    victim.tenant.orgKey,
    victim.tenant.workspaceKeyId,
    victim.tenant.orgKeyId,
    victim.policyId,
    victim.assistantId,
    victim.threadId,
    victim.runId,
    victim.toolCallId,
    victim.doneThreadId,
    victim.doneRunId,
    victim.fileId,
    victim.storeId,
    victim.storeFileId,
    victim.batchId,
    victim.completionId,
    victim.tenant.workspace.id,
    victim.tenant.workspace.slug,
    victim.tenant.organisationId,
  ];
  // b shares a's organisation: its id is the caller's own.
  const own = a.tenant.organisationId;
  return secrets.filter((secret) => secret !== own && text.includes(secret) && !sent.includes(secret));
}

describe('the isolation matrix', () => {
  it('has a row for every route of the app', () => {
    expect(Object.keys(MATRIX).sort()).toEqual(appRoutes());
  });

  it('keeps every route of every caller away from other workspaces and organisations', async () => {
    for (const victim of [b, c]) {
      const messages = await json(
        await gateway.request(`/v1/threads/${victim.doneThreadId}/messages`, { key: victim.tenant.workspaceKey }),
      );
      victimMessages.set(victim.marker, messages.data[0].id);
      const steps = await json(
        await gateway.request(`/v1/threads/${victim.doneThreadId}/runs/${victim.doneRunId}/steps`, {
          key: victim.tenant.workspaceKey,
        }),
      );
      victimSteps.set(victim.marker, steps.data[0].id);
    }
    const before = { b: await ownView(b), c: await ownView(c) };
    const callers: [Caller, Holdings[]][] = [
      [{ name: "a's workspace key", key: a.tenant.workspaceKey, organisation: false }, [b, c]],
      // An organisation key reaches every workspace of its organisation by design: its victims are outside it.
      [{ name: "a's organisation key", key: a.tenant.orgKey, organisation: true }, [c]],
    ];
    const seen: string[] = [];
    for (const [caller, victims] of callers) {
      for (const victim of victims) {
        for (const [route, probes] of Object.entries(MATRIX)) {
          for (const probe of probes(victim, caller)) {
            const headers: Record<string, string> = { ...probe.headers };
            if (
              caller.organisation &&
              !headers['x-gateway-workspace-id'] &&
              !probe.path.startsWith('/v1/policies') &&
              !probe.path.startsWith('/v1/virtual-keys')
            ) {
              headers['x-gateway-workspace-id'] = a.tenant.workspace.id;
            }
            const response = await gateway.request(probe.path, {
              method: probe.method,
              key: caller.key,
              headers,
              body: probe.body,
            });
            tally.inputsTried += 1;
            const text = await response.text();
            const where = `${caller.name} -> ${victim === b ? 'same organisation' : 'other organisation'}: ${probe.method} ${probe.path} (${route})`;
            if (response.status >= 500) tally.answered5xx += 1;
            if (probe.list) {
              expect(response.status, `${where}: ${text}`).toBe(200);
            } else {
              expect(response.status, `${where}: ${text}`).toBeGreaterThanOrEqual(400);
              const error = await errorOf(new Response(text, { status: response.status }));
              expect(probe.refusals ?? [401, 403, 404], `${where}: ${text}`).toContain(error.status);
              if (error.status === 401) expect(error.code, where).toBe('invalid_virtual_key');
            }
            const sent = `${probe.path} ${JSON.stringify(probe.body ?? {})} ${JSON.stringify(headers)}`;
            expect(leaks(text, victim, sent), `${where}: ${text}`).toEqual([]);
            seen.push(route);
          }
        }
      }
    }
    await gateway.tasks.drain(10_000);
    expect(new Set(seen)).toEqual(new Set(appRoutes()));
    // Nothing of theirs moved: no policy edited or archived, no key revoked, no run cancelled or fed.
    expect({ b: await ownView(b), c: await ownView(c) }).toEqual(before);
  });

  it("revokes only the caller's own key when two workspaces share a slug", async () => {
    const response = await gateway.request(`/v1/virtual-keys/${a.virtualKey}`, {
      method: 'DELETE',
      key: a.tenant.workspaceKey,
    });
    expect(response.status).toBe(200);
    expect((await json(response)).workspace_id).toBe(a.tenant.workspace.id);
    for (const other of [b, c]) {
      const keys = await json(await gateway.request('/v1/virtual-keys', { key: other.tenant.workspaceKey }));
      expect(keys.data.map((key: { slug: string }) => key.slug)).toContain('shared-slug');
    }
  });
});

// ── Keys are compared through their hashes ───────────────────────────────────────────────────

describe('API keys', () => {
  it('are stored only as hashes: no table holds a key in plain text', async () => {
    const client = gateway.database.client;
    const tables = await client.execute("SELECT name FROM sqlite_master WHERE type = 'table'");
    const plaintexts = [a, b, c].flatMap((h) => [h.tenant.workspaceKey, h.tenant.orgKey, `sk-${h.marker}`]);
    for (const row of tables.rows) {
      const dump = JSON.stringify((await client.execute(`SELECT * FROM "${String(row[0])}"`)).rows);
      for (const plaintext of plaintexts) expect(dump, String(row[0])).not.toContain(plaintext);
    }
  });

  it('refuse a key with any one character changed, added or removed, with one 401', async () => {
    const key = a.tenant.workspaceKey;
    const alphabet = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'];
    const variant = fc.oneof(
      fc
        .tuple(fc.nat({ max: key.length - 1 }), fc.constantFrom(...alphabet))
        .map(([at, ch]) => key.slice(0, at) + ch + key.slice(at + 1)),
      fc
        .tuple(fc.nat({ max: key.length }), fc.constantFrom(...alphabet))
        .map(([at, ch]) => key.slice(0, at) + ch + key.slice(at)),
      fc.nat({ max: key.length - 1 }).map((at) => key.slice(0, at) + key.slice(at + 1)),
      fc.constantFrom(key.toUpperCase(), key.toLowerCase(), ` ${key}`, `${key} `, `${key}\t`, key.slice(0, 10)),
    );
    const messages = new Set<string>();
    await fc.assert(
      fc.asyncProperty(
        variant.filter((v) => v !== key && v.trim() !== key),
        async (presented) => {
          tally.inputsTried += 1;
          const error = await errorOf(await gateway.request('/v1/policies/rate-limits', { key: presented }));
          expect(error).toMatchObject({ status: 401, code: 'invalid_api_key' });
          // Without the public prefix gk_, the answer says what a gateway key looks like instead.
          if (presented.startsWith('gk_')) messages.add(error.message);
          else expect(error.message).toContain("is not a gateway API key (those start with 'gk_')");
        },
      ),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 100) },
    );
    // One answer for every wrong key of the right shape: nothing tells how close a guess came.
    expect(messages.size).toBe(1);
    expect((await gateway.request('/v1/policies/rate-limits', { key })).status).toBe(200);
  });
});
