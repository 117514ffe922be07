import { defined } from '../../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../../src/cli/run';
import { embedTexts } from '../../../src/retrieval/embed';
import { embeddingKey } from '../../../src/resources/virtual-keys/embedding-key';
import { createFakeUpstream, fakeDirective } from '../../support/fake-upstream';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * GET /v1/usage against the runs themselves: every run that ends is counted once, with exactly
 * the usage it reports, in the hour it was created; buckets, groups, scopes and pages.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let slug: string;
let assistantId: string;
/** A fixed hour, so that buckets are known: 2026-11-02 10:00 UTC. */
const T0 = Date.UTC(2026, 10, 2, 10);

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: upstream.fetch } });
  gateway.clock.set(T0 + 60_000);
  tenant = await gateway.tenant();
  slug = await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  const assistant = await json(
    await gateway.request('/v1/assistants', {
      key: tenant.workspaceKey,
      body: {
        model: 'usage-model',
        tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
      },
    }),
  );
  assistantId = assistant.id;
});
afterAll(() => gateway?.close());

async function run(scenario: object | object[], options: { stream?: boolean; key?: string } = {}) {
  const response = await gateway.request('/v1/threads/runs', {
    key: options.key ?? tenant.workspaceKey,
    body: {
      assistant_id: assistantId,
      stream: options.stream ?? false,
      thread: { messages: [{ role: 'user', content: `go\n${fakeDirective(scenario)}` }] },
    },
  });
  expect(response.status).toBe(200);
  if (options.stream) {
    const text = await response.text();
    const created = defined(/"id":"(run_\w+)","object":"thread\.run"[^]*?"thread_id":"(thread_\w+)"/.exec(text));
    await gateway.tasks.drain(10_000);
    return { id: defined(created[1]), thread_id: defined(created[2]) };
  }
  const body = await json(response);
  await gateway.tasks.drain(10_000);
  return body as { id: string; thread_id: string };
}

const usageOf = async (path: string, key = tenant.workspaceKey) => json(await gateway.request(path, { key }));
const runUsage = async (r: { id: string; thread_id: string }) =>
  (await usageOf(`/v1/threads/${r.thread_id}/runs/${r.id}`)) as {
    status: string;
    usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  };

describe('GET /v1/usage', () => {
  it('counts every ended run once, with exactly its usage: polled, streamed, with tool outputs, failed, cancelled', async () => {
    const ended = [
      await run({ reply: 'one two three' }),
      await run({ reply: 'streamed answer here' }, { stream: true }),
      await run({ status: 500 }),
    ];
    // Tool outputs: the run waits, then continues and completes.
    const waiting = await run([{ tool_calls: 1 }, { reply: 'done now' }]);
    const current = await usageOf(`/v1/threads/${waiting.thread_id}/runs/${waiting.id}`);
    expect(current.status).toBe('requires_action');
    const before = await usageOf('/v1/usage?bucket_width=1h&limit=1&start_time=' + T0 / 1000);
    await gateway.request(`/v1/threads/${waiting.thread_id}/runs/${waiting.id}/submit_tool_outputs`, {
      key: tenant.workspaceKey,
      body: {
        tool_outputs: [{ tool_call_id: current.required_action.submit_tool_outputs.tool_calls[0].id, output: 'ok' }],
      },
    });
    await gateway.tasks.drain(10_000);
    ended.push(waiting);
    // Cancelled while it waits for tool outputs.
    const cancelled = await run({ tool_calls: 1 });
    await gateway.request(`/v1/threads/${cancelled.thread_id}/runs/${cancelled.id}/cancel`, {
      key: tenant.workspaceKey,
      method: 'POST',
    });
    ended.push(cancelled);

    const runs = await Promise.all(ended.map(runUsage));
    expect(runs.map((r) => r.status).sort()).toEqual(['cancelled', 'completed', 'completed', 'completed', 'failed']);
    const sum = (field: 'prompt_tokens' | 'completion_tokens' | 'total_tokens') =>
      runs.reduce((total, r) => total + (r.usage?.[field] ?? 0), 0);
    expect(sum('total_tokens')).toBeGreaterThan(0);

    // The waiting run was not counted while it waited.
    expect(before.data[0].results[0].num_requests).toBe(3);
    const page = await usageOf(
      `/v1/usage?bucket_width=1h&limit=1&start_time=${T0 / 1000}&group_by=model,kind,virtual_key,api_key_id`,
    );
    expect(page).toMatchObject({ object: 'page', has_more: false, next_page: null });
    expect(page.data).toEqual([
      {
        object: 'bucket',
        start_time: T0 / 1000,
        end_time: T0 / 1000 + 3600,
        results: [
          {
            object: 'usage.result',
            input_tokens: sum('prompt_tokens'),
            output_tokens: sum('completion_tokens'),
            total_tokens: sum('total_tokens'),
            num_requests: 5,
            workspace_id: null,
            api_key_id: tenant.workspaceKeyId,
            virtual_key: slug,
            model: 'usage-model',
            kind: 'run',
          },
        ],
      },
    ]);
  });

  it('buckets by the hour or the day a run was created, every bucket of the range, and pages', async () => {
    const own = await gateway.tenant();
    await gateway.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
    const key = own.workspaceKey;
    const assistant = await json(await gateway.request('/v1/assistants', { key, body: { model: 'm' } }));
    const at = async (ms: number) => {
      gateway.clock.set(ms);
      await gateway.request('/v1/threads/runs', {
        key,
        body: { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: 'a b c' }] } },
      });
      await gateway.tasks.drain(10_000);
    };
    const day = Date.UTC(2026, 10, 10);
    await at(day + 1 * 3_600_000 + 5);
    await at(day + 1 * 3_600_000 + 9);
    await at(day + 5 * 3_600_000);
    await at(day + 2 * 86_400_000);

    const hours = await usageOf(
      `/v1/usage?bucket_width=1h&start_time=${day / 1000}&end_time=${(day + 6 * 3_600_000) / 1000}`,
      key,
    );
    expect(
      hours.data.map((b: { results: { num_requests: number }[] }) => b.results.map((r) => r.num_requests)),
    ).toEqual([[], [2], [], [], [], [1]]);

    const days = await usageOf(`/v1/usage?start_time=${day / 1000}&limit=2`, key);
    expect(
      days.data.map((b: { start_time: number; results: { num_requests: number }[] }) => [
        b.start_time,
        b.results.map((r) => r.num_requests),
      ]),
    ).toEqual([
      [day / 1000, [3]],
      [day / 1000 + 86_400, []],
    ]);
    expect(days.has_more).toBe(true);
    const next = await usageOf(`/v1/usage?start_time=${day / 1000}&limit=2&page=${days.next_page}`, key);
    expect(next.data[0]).toMatchObject({ start_time: day / 1000 + 2 * 86_400, results: [{ num_requests: 1 }] });
  });

  it('counts embeddings calls as their own kind', async () => {
    const own = await gateway.tenant();
    await gateway.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
    gateway.clock.set(T0);
    const target = {
      workspaceId: own.workspace.id,
      apiKeyId: own.workspaceKeyId,
      virtualKeyId: null,
      model: 'text-embedding-3-small',
      dimensions: null,
    };
    await embedTexts(gateway.deps, embeddingKey, target, ['four words are here', 'two more']);
    const page = await usageOf(
      `/v1/usage?bucket_width=1h&limit=1&start_time=${T0 / 1000}&group_by=kind,model`,
      own.workspaceKey,
    );
    expect(page.data[0].results).toEqual([
      expect.objectContaining({
        kind: 'embeddings',
        model: 'text-embedding-3-small',
        input_tokens: 6,
        output_tokens: 0,
        total_tokens: 6,
        num_requests: 1,
      }),
    ]);
  });

  it('counts a response as its own kind, beside the runs of the same workspace', async () => {
    const own = await gateway.tenant();
    await gateway.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
    gateway.clock.set(T0);
    const response = await gateway.request('/v1/responses', {
      key: own.workspaceKey,
      body: { model: 'usage-model', input: `go\n${fakeDirective({ reply: 'three words here' })}` },
    });
    const answered = await json(response);
    expect(response.status, JSON.stringify(answered)).toBe(200);
    await gateway.tasks.drain(10_000);
    const assistant = await json(
      await gateway.request('/v1/assistants', { key: own.workspaceKey, body: { model: 'usage-model' } }),
    );
    const ran = await gateway.request('/v1/threads/runs', {
      key: own.workspaceKey,
      body: {
        assistant_id: assistant.id,
        thread: { messages: [{ role: 'user', content: `go\n${fakeDirective({ reply: 'one' })}` }] },
      },
    });
    expect(ran.status).toBe(200);
    await gateway.tasks.drain(10_000);
    const page = await usageOf(
      `/v1/usage?bucket_width=1h&limit=1&start_time=${T0 / 1000}&group_by=kind`,
      own.workspaceKey,
    );
    const byKind = Object.fromEntries(
      page.data[0].results.map((result: { kind: string; num_requests: number; output_tokens: number }) => [
        result.kind,
        [result.num_requests, result.output_tokens],
      ]),
    );
    expect(byKind).toEqual({ response: [1, answered.usage.output_tokens], run: [1, 1] });
  });

  it('shows an organisation key its workspaces, together or one, and a workspace key only its own', async () => {
    const second = await gateway.tenant({ organisationId: tenant.organisationId });
    const assistant = await json(
      await gateway.request('/v1/assistants', { key: second.workspaceKey, body: { model: 'usage-model' } }),
    );
    await gateway.virtualKey(second, { base_url: 'http://fake.test/v1', default: true });
    gateway.clock.set(T0 + 120_000);
    await gateway.request('/v1/threads/runs', {
      key: second.workspaceKey,
      body: { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: 'hello' }] } },
    });
    await gateway.tasks.drain(10_000);
    const query = `/v1/usage?bucket_width=1h&limit=1&start_time=${T0 / 1000}&group_by=workspace_id`;
    const all = await usageOf(query, tenant.orgKey);
    const seen = all.data[0].results.map((r: { workspace_id: string }) => r.workspace_id);
    expect(seen).toContain(second.workspace.id);
    expect(seen.every((id: string) => [tenant.workspace.id, second.workspace.id].includes(id))).toBe(true);
    const one = await usageOf(`${query}&workspace_id=${second.workspace.slug}`, tenant.orgKey);
    expect(one.data[0].results).toEqual([
      expect.objectContaining({ workspace_id: second.workspace.id, num_requests: 1 }),
    ]);
    const own = await usageOf(query, second.workspaceKey);
    expect(own.data[0].results).toEqual([expect.objectContaining({ workspace_id: second.workspace.id })]);
    const refused = await errorOf(
      await gateway.request(`${query}&workspace_id=${tenant.workspace.id}`, { key: second.workspaceKey }),
    );
    expect(refused).toMatchObject({ status: 403, param: 'workspace_id' });
  });

  it('is printed by `gateway usage` as the API answers it, in JSON and as a table', async () => {
    const own = await gateway.tenant();
    await gateway.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
    const assistant = await json(
      await gateway.request('/v1/assistants', { key: own.workspaceKey, body: { model: 'cli-model' } }),
    );
    gateway.clock.set(T0 + 30_000);
    await gateway.request('/v1/threads/runs', {
      key: own.workspaceKey,
      body: { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: 'count these words' }] } },
    });
    await gateway.tasks.drain(10_000);
    const query = `bucket_width=1h&limit=2&start_time=${T0 / 1000}&end_time=${T0 / 1000 + 7200}&group_by=model,api_key_id`;
    const api = await usageOf(`/v1/usage?${query}`, own.workspaceKey);
    expect(api.data[0].results).toEqual([expect.objectContaining({ model: 'cli-model', num_requests: 1 })]);
    const cli = async (...args: string[]) => {
      let stdout = '';
      let stderr = '';
      const code = await runCli(
        ['usage', '--workspace', own.workspace.id, ...args],
        { DATA_DIR: gateway.dataDir, LOG_LEVEL: 'warn' },
        {
          stdout: (text) => (stdout += text),
          stderr: (text) => (stderr += text),
        },
      );
      return { code, stdout, stderr };
    };
    const since = new Date(T0).toISOString();
    const until = String(T0 / 1000 + 7200);
    const asJson = await cli(
      '--since',
      since,
      '--until',
      until,
      '--bucket',
      '1h',
      '--limit',
      '2',
      '--group-by',
      'model,api_key_id',
      '--json',
    );
    expect(asJson.code, asJson.stderr).toBe(0);
    expect(JSON.parse(asJson.stdout)).toEqual(api);
    const table = await cli('--since', since, '--until', until, '--bucket', '1h', '--group-by', 'model');
    expect(table.stdout.split('\n')[0]).toMatch(
      /^start\s+model\s+input_tokens\s+output_tokens\s+total_tokens\s+num_requests$/,
    );
    expect(table.stdout).toContain(`${since}  cli-model`);
    const wrong = await cli('--bucket', '2d');
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('bucket_width');
  });

  it.each([
    ['bucket_width=2d', 'bucket_width'],
    ['group_by=model,colour', 'group_by[1]'],
    ['group_by=model,model', 'group_by'],
    ['limit=32', 'limit'],
    ['bucket_width=1h&limit=169', 'limit'],
    ['start_time=-5', 'start_time'],
    ['start_time=100&end_time=100', 'end_time'],
    ['page=abc', 'page'],
    ['colour=red', 'colour'],
  ])('refuses %s naming %s', async (query, param) => {
    const error = await errorOf(await gateway.request(`/v1/usage?${query}`, { key: tenant.workspaceKey }));
    expect(error).toMatchObject({ status: 400, param });
  });
});
