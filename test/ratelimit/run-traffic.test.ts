import { defined } from '../support/defined';
import type { Client } from '@libsql/client';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { PolicyCache, type PolicyLoader } from '../../src/ratelimit/policy-cache';
import { readPolicyPage } from '../../src/ratelimit/policy-reads';
import {
  completionTokens,
  fakeThread,
  promptTokens,
  startFakeUpstream,
  type FakeUpstreamServer,
} from '../support/fake-upstream';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../support/gateway';
import * as ratelimit from '../support/ratelimit';

/**
 * Rate limiting over real run traffic: POST /v1/threads/runs and submit_tool_outputs through the
 * real app in-process (several gateway processes: test/reliability/processes.test.ts), executing
 * against the fake provider over HTTP, with the official SDK where a client is involved. Each test moves the
 * gateway's clock to the start of a fresh UTC minute, so that no window ends during it.
 */

let gateway: TestGateway;
let fake: FakeUpstreamServer;

beforeAll(async () => {
  fake = await startFakeUpstream();
  gateway = await createTestGateway();
});
afterAll(async () => {
  await gateway.close();
  await fake.close();
});
beforeEach(() => fake.reset());
// Runs execute in the background: let each test's runs end before the next test looks.
afterEach(() => settled());

const { POLICIES } = ratelimit;

interface Caller {
  tenant: Tenant;
  /** The workspace key and the OpenAI virtual key. */
  headers: Record<string, string>;
  openai: OpenAI;
  assistantId: string;
  /** The slug of the virtual key in `headers` (provider `openai`). */
  slug: string;
  /** The slug of an `azure-openai` virtual key on the fake. */
  azureSlug: string;
}

/**
 * A new workspace with two virtual keys on the fake (OpenAI, used by default, and Azure OpenAI)
 * and an assistant on `fake-model` with one function tool.
 */
async function caller(): Promise<Caller> {
  const tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: fake.baseURL });
  const azureSlug = await gateway.virtualKey(tenant, {
    provider: 'azure-openai',
    base_url: fake.url,
    api_version: '2024-10-21',
    deployment: 'fake-deployment',
  } as never);
  const headers = { 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug };
  const openai = gateway.openai(headers);
  const assistant = await openai.beta.assistants.create({
    model: 'fake-model',
    instructions: 'Be brief.',
    tools: [WEATHER_TOOL],
  });
  return { tenant, headers, openai, assistantId: assistant.id, slug, azureSlug };
}

const WEATHER_TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

const freshMinute = () => ratelimit.freshMinute(gateway.clock);

const settled = async () => {
  expect(await gateway.tasks.drain(20_000)).toBe(true);
};

const createPolicy = (tenant: Tenant, body: Record<string, unknown>) => ratelimit.createPolicy(gateway, tenant, body);

/** POST /v1/threads/runs as `who`, non-streamed unless the body says otherwise. */
function createRun(who: Caller, body: Record<string, unknown> = {}, headers: Record<string, string> = {}) {
  return gateway.request('/v1/threads/runs', {
    headers: { ...who.headers, ...headers },
    body: { assistant_id: who.assistantId, thread: fakeThread('Hello'), ...body },
  });
}

const { expectRefused, rowsOf } = ratelimit;
const countersOf = (policyId: string) => ratelimit.countersOf(gateway.database.client, policyId);
const usedBy = (policyId: string, client: Client = gateway.database.client) => ratelimit.usedBy(client, policyId);

const chatRequests = () => fake.requests.filter((request) => request.path.endsWith('/chat/completions'));

/** Tokens the fake counted for each chat request it answered with `replies` (in order). */
function fakeTotals(replies: { reply?: string; toolArguments?: string[] }[]): number[] {
  return chatRequests().map((request, i) => {
    const { reply = '', toolArguments = [] } = defined(replies[i]);
    return (
      promptTokens(defined(request.body).messages) +
      completionTokens(
        reply,
        toolArguments.map((args) => ({ arguments: args })),
      )
    );
  });
}

const reservedBy = (runId: string) => ratelimit.reservedBy(gateway.database.client, runId);

describe('exactness over run traffic', () => {
  it('admits exactly 50 of 200 concurrent runs under 50 rpm, and only those 50 exist and call the provider', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { value: 50 });
    const before = await rowsOf(gateway.database.client, who.tenant.workspace.id);

    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, i) => createRun(who, { thread: fakeThread(`Run ${i}`) })),
    );
    const admitted = responses.filter((response) => response.status === 200);
    const refused = responses.filter((response) => response.status !== 200);
    expect(admitted).toHaveLength(50);
    expect(refused).toHaveLength(150);
    for (const response of refused) await expectRefused(response, 'requests');
    // Each admission saw the count the one before it left: remaining counts 49 down to 0, once each.
    const remaining = admitted.map((response) => Number(response.headers.get('x-ratelimit-remaining-requests')));
    expect(remaining.sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    const runs = (await Promise.all(admitted.map(json))) as { id: string; status: string }[];
    expect(new Set(runs.map((run) => run.id)).size).toBe(50);
    expect(await usedBy(policy)).toBe(50);

    await settled();
    expect(await rowsOf(gateway.database.client, who.tenant.workspace.id)).toEqual({
      threads: before.threads + 50,
      // the user's message and the answer
      messages: before.messages + 100,
      runs: 50,
      steps: 50,
    });
    expect(chatRequests()).toHaveLength(50);
    const { rows } = await gateway.database.client.execute({
      sql: "SELECT count(*) AS n FROM runs WHERE workspace_id = ? AND status = 'completed'",
      args: [who.tenant.workspace.id],
    });
    expect(Number(defined(rows[0]).n)).toBe(50);
  });
});

describe('a refused request', () => {
  it('writes nothing and calls no provider: refused by a requests policy, streamed or not', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { value: 1 });
    expect((await createRun(who)).status).toBe(200);
    await settled();
    const rows = await rowsOf(gateway.database.client, who.tenant.workspace.id);
    expect(rows).toEqual({ threads: 1, messages: 2, runs: 1, steps: 1 });
    expect(chatRequests()).toHaveLength(1);

    await expectRefused(await createRun(who), 'requests');
    const streamed = await createRun(who, { stream: true });
    expect(streamed.headers.get('content-type')).toMatch(/^application\/json/);
    await expectRefused(streamed, 'requests');
    await settled();
    expect(await rowsOf(gateway.database.client, who.tenant.workspace.id)).toEqual(rows);
    expect(chatRequests()).toHaveLength(1);
    expect(await usedBy(policy)).toBe(1);
  });

  it('writes nothing and calls no provider: refused by a tokens policy', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { type: 'tokens', value: 5 });
    const first = await who.openai.beta.threads.createAndRunPoll(
      { assistant_id: who.assistantId, thread: fakeThread('Hello', { reply: 'one two three four five six' }) },
      { pollIntervalMs: 5 },
    );
    expect(first.status).toBe('completed');
    await settled();
    expect(await usedBy(policy)).toBe(defined(first.usage).total_tokens);
    const rows = await rowsOf(gateway.database.client, who.tenant.workspace.id);

    await expectRefused(await createRun(who), 'tokens');
    await expectRefused(await createRun(who, { stream: true }), 'tokens');
    await settled();
    expect(await rowsOf(gateway.database.client, who.tenant.workspace.id)).toEqual(rows);
    expect(chatRequests()).toHaveLength(1);
    expect(await usedBy(policy)).toBe(defined(first.usage).total_tokens);
  });

  it('leaves a run waiting for tool outputs as it was when submitting them is refused', async () => {
    freshMinute();
    const who = await caller();
    const waiting = await who.openai.beta.threads.createAndRunPoll(
      { assistant_id: who.assistantId, thread: fakeThread('Weather?', [{ tool_calls: 1 }, { reply: 'Sunny.' }]) },
      { pollIntervalMs: 5 },
    );
    expect(waiting.status).toBe('requires_action');
    await createPolicy(who.tenant, { value: 1 });
    expect((await createRun(who)).status).toBe(200);
    await settled();
    const rows = await rowsOf(gateway.database.client, who.tenant.workspace.id);
    const calls = chatRequests().length;

    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const response = await gateway.request(`/v1/threads/${waiting.thread_id}/runs/${waiting.id}/submit_tool_outputs`, {
      headers: who.headers,
      body: { tool_outputs: [{ tool_call_id: defined(call).id, output: 'sunny' }] },
    });
    await expectRefused(response, 'requests');
    await settled();
    const after = await who.openai.beta.threads.runs.retrieve(waiting.id, { thread_id: waiting.thread_id });
    expect(after).toEqual(waiting);
    const { rows: steps } = await gateway.database.client.execute({
      sql: 'SELECT type, status, step_details FROM run_steps WHERE run_id = ?',
      args: [waiting.id],
    });
    expect(steps.map((step) => [step.type, step.status])).toEqual([['tool_calls', 'in_progress']]);
    expect(JSON.parse(defined(steps[0]).step_details as string).tool_calls[0].function.output).toBeNull();
    expect(await rowsOf(gateway.database.client, who.tenant.workspace.id)).toEqual(rows);
    expect(chatRequests()).toHaveLength(calls);
  });
});

describe('token charging', () => {
  const REPLY = 'It is sunny in Paris today.';

  it('charges a streamed run its total tokens when it ends', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { type: 'tokens', value: 1_000_000 });
    const stream = who.openai.beta.threads.createAndRunStream({
      assistant_id: who.assistantId,
      thread: fakeThread('Weather?', { reply: REPLY }),
    });
    const run = await stream.finalRun();
    expect(run.status).toBe('completed');
    const [total] = fakeTotals([{ reply: REPLY }]);
    expect(defined(run.usage).total_tokens).toBe(total);
    // The stream ends after the charge: no wait is needed.
    expect(await usedBy(policy)).toBe(total);
  });

  it('charges a non-streamed run its total tokens when it ends', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { type: 'tokens', value: 1_000_000 });
    const run = await who.openai.beta.threads.createAndRunPoll(
      { assistant_id: who.assistantId, thread: fakeThread('Weather?', { reply: REPLY }) },
      { pollIntervalMs: 5 },
    );
    expect(run.status).toBe('completed');
    await settled();
    const [total] = fakeTotals([{ reply: REPLY }]);
    expect(defined(run.usage).total_tokens).toBe(total);
    expect(await usedBy(policy)).toBe(total);
  });

  it('charges a run continued by submit_tool_outputs each turn as it ends, the total once', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { type: 'tokens', value: 1_000_000 });
    const args = '{"city":"Paris"}';
    const waiting = await who.openai.beta.threads.createAndRunPoll(
      {
        assistant_id: who.assistantId,
        thread: fakeThread('Weather?', [{ tool_calls: [{ name: 'get_weather', arguments: args }] }, { reply: REPLY }]),
      },
      { pollIntervalMs: 5 },
    );
    expect(waiting.status).toBe('requires_action');
    await settled();
    // The first turn is charged as it ends, while the run waits; its reservation is gone.
    const [first] = fakeTotals([{ toolArguments: [args] }]);
    expect(await usedBy(policy)).toBe(first);

    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const stream = who.openai.beta.threads.runs.submitToolOutputsStream(waiting.id, {
      thread_id: waiting.thread_id,
      tool_outputs: [{ tool_call_id: defined(call).id, output: 'sunny' }],
    });
    const done = await stream.finalRun();
    expect(done.status).toBe('completed');
    await settled();
    const totals = fakeTotals([{ toolArguments: [args] }, { reply: REPLY }]);
    expect(totals).toHaveLength(2);
    expect(defined(done.usage).total_tokens).toBe(defined(totals[0]) + defined(totals[1]));
    expect(await usedBy(policy)).toBe(defined(done.usage).total_tokens);
  });

  it('refuses the next run once the group has used the value, and other groups still run', async () => {
    freshMinute();
    const who = await caller();
    const first = await who.openai.beta.threads.createAndRunPoll(
      { assistant_id: who.assistantId, thread: fakeThread('Hi', { reply: REPLY }) },
      { pollIntervalMs: 5 },
    );
    const perRun = defined(first.usage).total_tokens;
    // Room for exactly two such runs, per API key.
    await createPolicy(who.tenant, { type: 'tokens', value: 2 * perRun, group_by: [{ key: 'api_key' }] });
    for (let i = 0; i < 2; i++) {
      const run = await who.openai.beta.threads.createAndRunPoll(
        { assistant_id: who.assistantId, thread: fakeThread('Hi', { reply: REPLY }) },
        { pollIntervalMs: 5 },
      );
      expect(defined(run.usage).total_tokens).toBe(perRun);
      await settled();
    }
    const error = await expectRefused(await createRun(who), 'tokens');
    expect(error.message).toContain(`Limit ${2 * perRun}, Used ${2 * perRun}.`);
    // The organisation key is another group.
    const other = await createRun(
      who,
      {},
      {
        'x-gateway-api-key': who.tenant.orgKey,
        'x-gateway-workspace-id': who.tenant.workspace.id,
      },
    );
    expect(other.status).toBe(200);
  });
});

describe('matching over run traffic', () => {
  /** A run request: body fields over createRun's, extra headers, all as seen by one caller. */
  type Request = { body?: Record<string, unknown>; headers?: Record<string, string> };
  type Conditions = { key: string; value: string }[];
  const metadataHeader = (value: Record<string, string>) => ({ 'x-gateway-metadata': JSON.stringify(value) });
  const AND = (who: Caller): Conditions => [
    { key: 'model', value: 'fake-model' },
    { key: 'virtual_key', value: who.slug },
    { key: 'metadata.team', value: 'blue' },
  ];

  // What the route takes from the request: the calling key, the workspace, the virtual key and its
  // provider, the effective model (the run's own over the assistant's), metadata.
  const cases: [string, (who: Caller) => Conditions, (who: Caller) => Request, boolean][] = [
    [
      "api_key: the calling key's id",
      (who) => [{ key: 'api_key', value: who.tenant.workspaceKeyId }],
      () => ({}),
      true,
    ],
    ["api_key: another key's id", (who) => [{ key: 'api_key', value: who.tenant.orgKeyId }], () => ({}), false],
    [
      "api_key: the organisation key's id, calling with it",
      (who) => [{ key: 'api_key', value: who.tenant.orgKeyId }],
      (who) => ({
        headers: { 'x-gateway-api-key': who.tenant.orgKey, 'x-gateway-workspace-id': who.tenant.workspace.id },
      }),
      true,
    ],
    [
      'workspace_id: its workspace',
      (who) => [{ key: 'workspace_id', value: who.tenant.workspace.id }],
      () => ({}),
      true,
    ],
    ['virtual_key: its slug', (who) => [{ key: 'virtual_key', value: who.slug }], () => ({}), true],
    ["virtual_key: another key's slug", (who) => [{ key: 'virtual_key', value: who.azureSlug }], () => ({}), false],
    ['provider: openai', () => [{ key: 'provider', value: 'openai' }], () => ({}), true],
    [
      'provider: azure-openai, through an Azure key',
      () => [{ key: 'provider', value: 'azure-openai' }],
      (who) => ({ headers: { 'x-gateway-virtual-key': who.azureSlug } }),
      true,
    ],
    [
      'provider: azure-openai, through an OpenAI key',
      () => [{ key: 'provider', value: 'azure-openai' }],
      () => ({}),
      false,
    ],
    ["model: the assistant's", () => [{ key: 'model', value: 'fake-model' }], () => ({}), true],
    [
      "model: the run's own",
      () => [{ key: 'model', value: 'run-model' }],
      () => ({ body: { model: 'run-model' } }),
      true,
    ],
    [
      "model: the assistant's, when the run has its own",
      () => [{ key: 'model', value: 'fake-model' }],
      () => ({ body: { model: 'run-model' } }),
      false,
    ],
    ['model: *', () => [{ key: 'model', value: '*' }], () => ({ body: { model: 'run-model' } }), true],
    [
      'metadata: * and a header value',
      () => [{ key: 'metadata.team', value: '*' }],
      () => ({ headers: metadataHeader({ team: '' }) }),
      true,
    ],
    [
      'metadata: * and no value',
      () => [{ key: 'metadata.team', value: '*' }],
      () => ({ body: { metadata: { user: 'ann' } } }),
      false,
    ],
    ['AND: every condition holds', AND, () => ({ body: { metadata: { team: 'blue' } } }), true],
    ['AND: one fails', AND, () => ({ body: { model: 'run-model', metadata: { team: 'blue' } } }), false],
    [
      'AND: with * on one key',
      (who) => [...AND(who), { key: 'provider', value: '*' }],
      () => ({ headers: metadataHeader({ team: 'blue' }) }),
      true,
    ],
  ];

  it.each(cases)('%s', async (_name, conditions, request, matches) => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { conditions: conditions(who), value: 1 });
    const { body, headers } = request(who);
    const first = await createRun(who, body, headers);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe(matches ? '1' : null);
    const second = await createRun(who, body, headers);
    if (matches) await expectRefused(second, 'requests');
    else expect(second.status).toBe(200);
    expect(await usedBy(policy)).toBe(matches ? 1 : 0);
  });

  it("matches submit_tool_outputs on the run's model and metadata, and the submitting request's header", async () => {
    freshMinute();
    const who = await caller();
    const wait = () =>
      who.openai.beta.threads.createAndRunPoll(
        {
          assistant_id: who.assistantId,
          model: 'run-model',
          metadata: { team: 'blue' },
          thread: fakeThread('Weather?', [{ tool_calls: 1 }, { reply: 'Sunny.' }]),
        },
        { pollIntervalMs: 5 },
      );
    const [red, plain] = [await wait(), await wait()];
    expect([red.status, plain.status]).toEqual(['requires_action', 'requires_action']);
    const policy = await createPolicy(who.tenant, {
      conditions: [
        { key: 'model', value: 'run-model' },
        { key: 'metadata.team', value: 'blue' },
        { key: 'api_key', value: who.tenant.workspaceKeyId },
      ],
      value: 1,
    });
    const submit = (run: typeof red, headers: Record<string, string> = {}) =>
      gateway.request(`/v1/threads/${run.thread_id}/runs/${run.id}/submit_tool_outputs`, {
        headers: { ...who.headers, ...headers },
        body: {
          tool_outputs: [
            {
              tool_call_id: defined(defined(run.required_action).submit_tool_outputs.tool_calls[0]).id,
              output: 'sunny',
            },
          ],
        },
      });
    // The header's team wins over the run's: the policy does not apply.
    const unmatched = await submit(red, { 'x-gateway-metadata': '{"team":"red"}' });
    expect(unmatched.status).toBe(200);
    expect(unmatched.headers.get('x-ratelimit-limit-requests')).toBeNull();
    const matched = await submit(plain);
    expect(matched.status).toBe(200);
    expect(matched.headers.get('ratelimit-policy')).toBe(`"${policy}";q=1;w=60`);
    expect(await usedBy(policy)).toBe(1);
  });
});

describe('the model of an Azure key', () => {
  /** An Azure virtual key on the fake, through the API as a user creates one. */
  async function azureKey(who: Caller, slug: string, extra: Record<string, unknown>) {
    const response = await gateway.request('/v1/virtual-keys', {
      key: who.tenant.workspaceKey,
      body: {
        slug,
        provider: 'azure-openai',
        base_url: fake.url,
        api_version: '2024-10-21',
        api_key: 'sk-azure',
        ...extra,
      },
    });
    expect(response.status).toBe(200);
    return json(response);
  }

  it('binds a model=gpt-4o policy to a run sending "model":"x1" through a key whose deployment is gpt-4o', async () => {
    freshMinute();
    const who = await caller();
    expect(await azureKey(who, 'azure-gpt-4o', { deployment: 'gpt-4o' })).toMatchObject({
      deployment: 'gpt-4o',
      model: 'gpt-4o',
    });
    const policy = await createPolicy(who.tenant, { conditions: [{ key: 'model', value: 'gpt-4o' }], value: 1 });
    const azure = { 'x-gateway-virtual-key': 'azure-gpt-4o' };

    const response = await createRun(who, { model: 'x1' }, azure);
    expect(response.status).toBe(200);
    const run = await json(response);
    // The run records the model that served it, which usage is counted for.
    expect(run.model).toBe('gpt-4o');
    expect(response.headers.get('ratelimit-policy')).toBe(`"${policy}";q=1;w=60`);
    const refused = await expectRefused(await createRun(who, { model: 'x1' }, azure), 'requests');
    expect(refused.message).toContain(policy);
    // Any other spelling of the model is the same deployment, and the same policy.
    await expectRefused(await createRun(who, { model: 'gpt-4o-mini' }, azure), 'requests');
    // Through an OpenAI key the client's model is the model: x1 is not gpt-4o.
    expect((await createRun(who, { model: 'x1' })).status).toBe(200);
    await settled();
    const done = await who.openai.beta.threads.runs.retrieve(run.id, { thread_id: run.thread_id });
    expect(done).toMatchObject({ status: 'completed', model: 'gpt-4o' });
    expect(chatRequests().map((request) => request.path)).toContain('/openai/deployments/gpt-4o/chat/completions');
  });

  it('takes the model a key declares for its deployment, in policies and in submit_tool_outputs', async () => {
    freshMinute();
    const who = await caller();
    expect(await azureKey(who, 'azure-prod', { deployment: 'prod-east-2', model: 'gpt-4o-mini' })).toMatchObject({
      deployment: 'prod-east-2',
      model: 'gpt-4o-mini',
    });
    const policy = await createPolicy(who.tenant, { conditions: [{ key: 'model', value: 'gpt-4o-mini' }], value: 2 });
    const azure = { 'x-gateway-virtual-key': 'azure-prod' };
    const args = '{"city":"Paris"}';
    const created = await json(
      await createRun(
        who,
        {
          model: 'anything',
          thread: fakeThread('Weather?', [
            { tool_calls: [{ name: 'get_weather', arguments: args }] },
            { reply: 'Sunny' },
          ]),
        },
        azure,
      ),
    );
    expect(created.model).toBe('gpt-4o-mini');
    const waiting = await who.openai.beta.threads.runs.poll(
      created.id,
      { thread_id: created.thread_id },
      { pollIntervalMs: 5 },
    );
    expect(waiting.status).toBe('requires_action');
    const [call] = defined(waiting.required_action).submit_tool_outputs.tool_calls;
    const submitted = await gateway.request(`/v1/threads/${created.thread_id}/runs/${created.id}/submit_tool_outputs`, {
      headers: who.headers,
      body: { tool_outputs: [{ tool_call_id: defined(call).id, output: 'sunny' }] },
    });
    expect(submitted.status).toBe(200);
    expect(await usedBy(policy)).toBe(2);
    await settled();
  });
});

describe('grouping over run traffic', () => {
  it('keeps a counter per combination of the group_by values, an absent value a group of its own', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, {
      group_by: [{ key: 'virtual_key' }, { key: 'model' }, { key: 'metadata.user' }],
      value: 1,
    });
    const azure = { 'x-gateway-virtual-key': who.azureSlug };
    const ann = { 'x-gateway-metadata': '{"user":"ann"}' };
    expect((await createRun(who)).status).toBe(200);
    await expectRefused(await createRun(who), 'requests');
    expect((await createRun(who, {}, azure)).status).toBe(200);
    await expectRefused(await createRun(who, {}, azure), 'requests');
    expect((await createRun(who, { model: 'run-model' })).status).toBe(200);
    expect((await createRun(who, {}, ann)).status).toBe(200);
    await expectRefused(await createRun(who, { metadata: { user: 'ann' } }), 'requests');

    const group = (slug: string, model: string, user: string | null) =>
      JSON.stringify([
        ['virtual_key', slug],
        ['model', model],
        ['metadata.user', user],
      ]);
    const counters = await countersOf(policy);
    expect(
      Object.keys(counters)
        .map((key) => key.split('/').slice(3).join('/'))
        .sort(),
    ).toEqual(
      [
        group(who.slug, 'fake-model', null),
        // Through the Azure key, the deployment's model (the key's `model` defaults to its name).
        group(who.azureSlug, 'fake-deployment', null),
        group(who.slug, 'run-model', null),
        group(who.slug, 'fake-model', 'ann'),
      ].sort(),
    );
    expect(Object.values(counters)).toEqual([1, 1, 1, 1]);
  });
});

describe('metadata', () => {
  it('matches metadata.<name> on the header merged over the run metadata, end to end', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, {
      conditions: [{ key: 'metadata.team', value: 'blue' }],
      group_by: [{ key: 'metadata.user' }],
    });
    const header = (value: Record<string, string>) => ({ 'x-gateway-metadata': JSON.stringify(value) });

    // From the run's metadata.
    expect((await createRun(who, { metadata: { team: 'blue', user: 'ann' } })).status).toBe(200);
    await expectRefused(await createRun(who, { metadata: { team: 'blue', user: 'ann' } }), 'requests');
    // The header wins a key both have: red does not match.
    expect((await createRun(who, { metadata: { team: 'blue', user: 'ann' } }, header({ team: 'red' }))).status).toBe(
      200,
    );
    // From the header alone, and merged: the header's team with the body's user.
    await expectRefused(await createRun(who, {}, header({ team: 'blue', user: 'ann' })), 'requests');
    expect((await createRun(who, { metadata: { user: 'bob' } }, header({ team: 'blue' }))).status).toBe(200);
    await expectRefused(await createRun(who, {}, header({ team: 'blue', user: 'bob' })), 'requests');
    expect(Object.keys(await countersOf(policy)).map((key) => key.split('/').at(-1))).toEqual(
      expect.arrayContaining(['[["metadata.user","ann"]]', '[["metadata.user","bob"]]']),
    );
    expect(await usedBy(policy)).toBe(2);
  });

  it('answers a malformed header with 400 invalid_metadata_header and creates nothing', async () => {
    freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { conditions: [{ key: 'metadata.team', value: '*' }], value: 100 });
    for (const value of ['{not json', '["a"]', '{"team":1}']) {
      const response = await createRun(who, {}, { 'x-gateway-metadata': value });
      expect(await errorOf(response)).toMatchObject({
        status: 400,
        code: 'invalid_metadata_header',
        param: 'x-gateway-metadata',
      });
    }
    await settled();
    expect(await rowsOf(gateway.database.client, who.tenant.workspace.id)).toEqual({
      threads: 0,
      messages: 0,
      runs: 0,
      steps: 0,
    });
    expect(chatRequests()).toHaveLength(0);
    expect(await usedBy(policy)).toBe(0);
  });
});

describe('the 429 and the headers through the SDK', () => {
  it('surfaces RateLimitError with the envelope, the policy in the message, and every header', async () => {
    const start = freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { name: 'runs per minute', value: 1 });
    // The SDK with retries off, counting what it sends: a 429 is final, not retried.
    let sent = 0;
    const openai = new OpenAI({
      apiKey: 'unused-by-the-gateway',
      baseURL: 'http://gateway.test/v1',
      defaultHeaders: who.headers,
      maxRetries: 0,
      fetch: (url, init) => {
        sent++;
        return Promise.resolve(gateway.app.request(String(url), init as RequestInit));
      },
    });
    await openai.beta.threads.createAndRun({ assistant_id: who.assistantId, thread: fakeThread('Hi') });
    const error = await openai.beta.threads
      .createAndRun({ assistant_id: who.assistantId, thread: fakeThread('Hi') })
      .then(
        () => null,
        (caught: unknown) => caught,
      );
    expect(sent).toBe(2);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    const limited = error as InstanceType<typeof OpenAI.RateLimitError>;
    expect(limited.status).toBe(429);
    expect(limited.code).toBe('rate_limit_exceeded');
    expect(limited.type).toBe('requests');
    expect(limited.param).toBeNull();
    const reset = new Date(start + 60_000).toISOString();
    expect(limited.message).toMatch(
      new RegExp(
        `^429 Rate limit reached for policy 'runs per minute' \\(${policy}\\) on requests per minute: Limit 1, Used 1, Requested 1\\. ` +
          `The window resets at ${reset.replace(/\./g, '\\.')}; please try again in \\d+(\\.\\d+)?s\\.$`,
      ),
    );
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(limited.headers.get('x-ratelimit-limit-requests')).toBe('1');
    expect(limited.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(limited.headers.get('x-ratelimit-reset-requests')).toMatch(/^\d+(\.\d+)?s$/);
    expect(limited.headers.get('ratelimit-policy')).toBe(`"${policy}";q=1;w=60`);
    expect(limited.headers.get('ratelimit')).toBe(`"${policy}";r=0;t=${retryAfter}`);
  });

  it('surfaces a tokens refusal as RateLimitError of type tokens', async () => {
    const start = freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { type: 'tokens', unit: 'rph', value: 1 });
    await who.openai.beta.threads.createAndRunPoll(
      { assistant_id: who.assistantId, thread: fakeThread('Hi') },
      { pollIntervalMs: 5 },
    );
    await settled();
    const used = await usedBy(policy);
    const before = gateway.clock.now();
    const error = (await who.openai.beta.threads
      .createAndRun({ assistant_id: who.assistantId, thread: fakeThread('Hi') })
      .then(
        () => null,
        (caught: unknown) => caught,
      )) as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(error.type).toBe('tokens');
    expect(error.code).toBe('rate_limit_exceeded');
    const hourEnd = Math.floor(start / 3_600_000) * 3_600_000 + 3_600_000;
    expect(error.message).toContain(
      `policy ${policy} on tokens per hour: Limit 1, Used ${used}. The window resets at ${new Date(hourEnd).toISOString()}`,
    );
    expect(error.headers.get('x-ratelimit-remaining-tokens')).toBe('0');
    expect(error.headers.get('ratelimit-policy')).toBe(`"${policy}";q=1;qu="tokens";w=3600`);
    const retryAfter = Number(error.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(Math.ceil((hourEnd - gateway.clock.now()) / 1000));
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil((hourEnd - before) / 1000));
  });

  it('gives admitted runs the headers: the JSON answer and the event stream', async () => {
    freshMinute();
    const who = await caller();
    const requests = await createPolicy(who.tenant, { value: 10 });
    const tokens = await createPolicy(who.tenant, { type: 'tokens', unit: 'rpd', value: 100_000 });

    const { data: run, response } = await who.openai.beta.threads
      .createAndRun({ assistant_id: who.assistantId, thread: fakeThread('Hi') })
      .withResponse();
    expect(run.status).toBe('queued');
    expect(response.headers.get('x-ratelimit-limit-requests')).toBe('10');
    expect(response.headers.get('x-ratelimit-remaining-requests')).toBe('9');
    expect(response.headers.get('x-ratelimit-limit-tokens')).toBe('100000');
    // What is left after the run's reservation: its completion (GATEWAY_TOKEN_RESERVATION) and prompt.
    const reserved = await reservedBy(run.id);
    expect(reserved).toBeGreaterThan(gateway.deps.config.GATEWAY_TOKEN_RESERVATION);
    expect(response.headers.get('x-ratelimit-remaining-tokens')).toBe(String(100_000 - reserved));
    expect(response.headers.get('ratelimit-policy')).toBe(
      `"${requests}";q=10;w=60, "${tokens}";q=100000;qu="tokens";w=86400`,
    );
    expect(response.headers.get('ratelimit')).toMatch(
      new RegExp(`^"${requests}";r=9;t=\\d+, "${tokens}";r=${100_000 - reserved};t=\\d+$`),
    );
    expect(response.headers.get('retry-after')).toBeNull();
    await settled();
    // The reservation is gone; the run's real tokens stay.
    const charged = await usedBy(tokens);
    expect(charged).toBe(
      defined((await who.openai.beta.threads.runs.retrieve(run.id, { thread_id: run.thread_id })).usage).total_tokens,
    );

    const { data: stream, response: streamed } = await who.openai.beta.threads
      .createAndRun({ assistant_id: who.assistantId, thread: fakeThread('Hi'), stream: true })
      .withResponse();
    expect(streamed.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(streamed.headers.get('x-ratelimit-remaining-requests')).toBe('8');
    const left = 100_000 - charged - reserved;
    expect(streamed.headers.get('x-ratelimit-remaining-tokens')).toBe(String(left));
    expect(streamed.headers.get('ratelimit')).toMatch(
      new RegExp(`^"${requests}";r=8;t=\\d+, "${tokens}";r=${left};t=\\d+$`),
    );
    const events: string[] = [];
    for await (const event of stream) events.push(event.event);
    expect(events.at(-1)).toBe('thread.run.completed');
  });
});

describe('windows and changes over run traffic', () => {
  it('starts a new window at the UTC minute boundary', async () => {
    const start = freshMinute();
    const who = await caller();
    const policy = await createPolicy(who.tenant, { value: 2 });
    expect((await createRun(who)).status).toBe(200);
    expect((await createRun(who)).status).toBe(200);
    await expectRefused(await createRun(who), 'requests');
    gateway.clock.advance(60_000);
    expect((await createRun(who)).status).toBe(200);
    expect((await createRun(who)).status).toBe(200);
    await expectRefused(await createRun(who), 'requests');
    // The new minute counted from zero, and the old one decides nothing any more: it is gone.
    // The store prunes ended windows on an admission a minute or more after its last prune, which
    // was at or before the old window's first admission; so the new window's first admission
    // deleted the old counter.
    const group = `[["workspace_id","${who.tenant.workspace.id}"]]`;
    expect(await countersOf(policy)).toEqual({ [`${policy}/rpm/${start + 60_000}/${group}`]: 2 });
  });

  it('applies a new policy, an update and an archive to the very next run', async () => {
    freshMinute();
    const who = await caller();
    const before = await createRun(who);
    expect(before.status).toBe(200);
    expect(before.headers.get('x-ratelimit-limit-requests')).toBeNull();
    const policy = await createPolicy(who.tenant, { value: 1 });
    expect((await createRun(who)).status).toBe(200);
    await expectRefused(await createRun(who), 'requests');

    const update = await gateway.request(`${POLICIES}/${policy}`, {
      key: who.tenant.workspaceKey,
      method: 'PUT',
      body: { value: 2 },
    });
    expect(update.status).toBe(200);
    expect((await createRun(who)).status).toBe(200);
    await expectRefused(await createRun(who), 'requests');

    const archive = await gateway.request(`${POLICIES}/${policy}`, { key: who.tenant.workspaceKey, method: 'DELETE' });
    expect(archive.status).toBe(200);
    const next = await createRun(who);
    expect(next.status).toBe(200);
    expect(next.headers.get('x-ratelimit-limit-requests')).toBeNull();
    expect(await usedBy(policy)).toBe(2);
  });
});

describe('the policy cache', () => {
  it('does not fail a caller whose shared load failed for the request that started it', async () => {
    const who = await gateway.tenant();
    await createPolicy(who, { value: 5 });
    let calls = 0;
    let failFirst!: () => void;
    const firstCallerGone = new Promise<void>((resolve) => (failFirst = resolve));
    // The first load fails once the second caller waits on it, as a cancelled request's I/O would.
    const load: PolicyLoader = async (db, workspaceId, start, limit) => {
      if (++calls === 1) {
        await firstCallerGone;
        throw new Error('The request that started this load was cancelled');
      }
      return readPolicyPage(db, workspaceId, start, limit);
    };
    const cache = new PolicyCache(gateway.database.db, { load });
    const first = cache.get(who.workspace.id);
    await expect.poll(() => calls).toBe(1);
    const second = cache.get(who.workspace.id);
    // Let the second caller reach the shared load before it fails.
    await new Promise((resolve) => setTimeout(resolve, 20));
    failFirst();
    await expect(first).rejects.toThrow('cancelled');
    expect((await second).size).toBe(1);
    expect(calls).toBe(2);
    // The cache holds the second caller's load: the next lookup loads nothing.
    expect((await cache.get(who.workspace.id)).size).toBe(1);
    expect(calls).toBe(2);
  });

  it('fails a caller whose own load failed, and retries a shared one only once', async () => {
    const who = await gateway.tenant();
    await createPolicy(who, { value: 5 });
    let calls = 0;
    const load: PolicyLoader = async () => {
      calls++;
      await new Promise((resolve) => setTimeout(resolve, 10));
      throw new Error(`load ${calls} failed`);
    };
    const cache = new PolicyCache(gateway.database.db, { load });
    const outcomes = await Promise.allSettled([cache.get(who.workspace.id), cache.get(who.workspace.id)]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['rejected', 'rejected']);
    // The first caller's load, then the second caller's own; nothing more.
    expect(calls).toBe(2);
  });
});
