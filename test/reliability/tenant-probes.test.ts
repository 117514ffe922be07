import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  runCli,
  startFakeUpstreamProcess,
  startGatewayProcess,
  type FakeUpstreamProcess,
  type GatewayProcess,
} from '../support/processes';
import { recordTally } from '../support/tally';
import { prepare, recordFigures, type Target } from './support';

/**
 * What a tenant can try against a gateway process that is not about bytes (issue 34's R1, F12,
 * F13), over real connections: 130 virtual keys created at once (all of them up to the
 * workspace's cap, none refused for another's write), `image_url` parts that point the provider
 * somewhere it should not go, and `tool_resources` naming another workspace's vector store.
 */

const ENV = { LOG_LEVEL: 'warn', GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' };
const CAP = 100;

let dataDir: string;
let fake: FakeUpstreamProcess;
let gateway: GatewayProcess;
let attacker: Target;
/** Another workspace's vector store and file, which the attacker names. */
let theirs: { storeId: string; fileId: string };
const tally = { inputsTried: 0, answered5xx: 0 };
const figures: Record<string, number> = {};

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'reliability-probes-'));
  fake = await startFakeUpstreamProcess();
  gateway = await startGatewayProcess({ ...ENV, DATA_DIR: dataDir });
  attacker = await prepare(gateway, fake.baseURL);

  const env = { DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  expect((await runCli(['workspaces', 'create', '--slug', 'victim', '--json'], env)).code).toBe(0);
  const key = JSON.parse((await runCli(['api-keys', 'create', '--workspace', 'victim', '--json'], env)).stdout)
    .key as string;
  const victim = { url: gateway.url, headers: { 'x-gateway-api-key': key, 'content-type': 'application/json' } };
  expect(
    (
      await call(victim, 'POST', '/v1/virtual-keys', {
        slug: 'own',
        provider: 'openai',
        base_url: fake.baseURL,
        api_key: 'sk-own',
        default: true,
      })
    ).status,
  ).toBe(200);
  const form = new FormData();
  form.append('purpose', 'assistants');
  form.append('file', new Blob(['the victim’s notes']), 'notes.txt');
  const file = (await (
    await fetch(`${gateway.url}/v1/files`, { method: 'POST', headers: { 'x-gateway-api-key': key }, body: form })
  ).json()) as { id: string };
  const store = (await (
    await call(victim, 'POST', '/v1/vector_stores', { name: 'private', file_ids: [file.id] })
  ).json()) as { id: string };
  expect(store.id).toMatch(/^vs_/);
  theirs = { storeId: store.id, fileId: file.id };
});

afterAll(async () => {
  recordTally('tenant-probes', tally);
  recordFigures('tenant-probes', figures);
  await gateway?.stop('SIGKILL');
  await fake?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

async function call(
  target: Pick<Target, 'url' | 'headers'>,
  method: string,
  path: string,
  body?: unknown,
): Promise<Response> {
  const response = await fetch(`${target.url}${path}`, {
    method,
    headers: target.headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status >= 500) tally.answered5xx++;
  tally.inputsTried++;
  return response;
}

const errorOf = async (response: Response): Promise<Record<string, unknown>> => ({
  status: response.status,
  ...((await response.json()) as { error: Record<string, unknown> }).error,
});

describe('probes of one tenant', () => {
  it('R1: 130 virtual keys created at once, each with its own models: the workspace’s cap exactly, none refused for another’s write', async () => {
    const answers = await Promise.all(
      Array.from({ length: 130 }, (_, i) =>
        call(attacker, 'POST', '/v1/virtual-keys', {
          slug: `burst-${i}`,
          provider: 'openai',
          base_url: fake.baseURL,
          api_key: 'sk-burst',
          models: [`burst-model-${i}`],
        }),
      ),
    );
    const statuses = answers.map((answer) => answer.status);
    const codes = await Promise.all(
      answers.filter((answer) => answer.status !== 200).map(async (answer) => String((await errorOf(answer)).code)),
    );
    const live = ((await (await call(attacker, 'GET', '/v1/virtual-keys')).json()) as { data: unknown[] }).data.length;
    figures.r1_created = statuses.filter((status) => status === 200).length;
    figures.r1_conflicts = codes.filter((code) => code === 'concurrent_update').length;
    // `prepare` made one key already: 99 more fit under the cap.
    expect(figures.r1_created).toBe(CAP - 1);
    expect(new Set(codes)).toEqual(new Set(['quota_exceeded']));
    expect(live).toBe(CAP);
  });

  it('F13: tool_resources naming another workspace’s vector store or file are refused as unknown, wherever they are taken', async () => {
    const store = { file_search: { vector_store_ids: [theirs.storeId] } };
    const file = { code_interpreter: { file_ids: [theirs.fileId] } };
    const probes: [string, string, unknown, string][] = [
      [
        'POST',
        '/v1/assistants',
        { model: 'fake-model', tools: [{ type: 'file_search' }], tool_resources: store },
        'tool_resources.file_search.vector_store_ids[0]',
      ],
      [
        'POST',
        `/v1/assistants/${attacker.assistantId}`,
        { tool_resources: store },
        'tool_resources.file_search.vector_store_ids[0]',
      ],
      ['POST', '/v1/threads', { tool_resources: store }, 'tool_resources.file_search.vector_store_ids[0]'],
      [
        'POST',
        '/v1/threads/runs',
        { assistant_id: attacker.assistantId, tool_resources: store },
        'tool_resources.file_search.vector_store_ids[0]',
      ],
      [
        'POST',
        '/v1/assistants',
        { model: 'fake-model', tools: [{ type: 'code_interpreter' }], tool_resources: file },
        'tool_resources.code_interpreter.file_ids[0]',
      ],
    ];
    for (const [method, path, body, param] of probes) {
      const error = await errorOf(await call(attacker, method, path, body));
      expect({ path, ...error }).toMatchObject({ path, status: 404, param });
    }
    // Nothing of the victim's leaked into the attacker's listings either.
    const stores = ((await (await call(attacker, 'GET', '/v1/vector_stores')).json()) as { data: { id: string }[] })
      .data;
    expect(stores.map((one) => one.id)).not.toContain(theirs.storeId);
  });

  it('F12: image_url parts to a file, another scheme, the metadata service or a link-local address are refused naming the part', async () => {
    const urls = [
      'file:///etc/passwd',
      'gopher://127.0.0.1:70/_x',
      'http://169.254.169.254/latest/meta-data/',
      'http://[fe80::1]/',
      'ftp://example.com/a.png',
      'data:text/html;base64,PHA+',
    ];
    for (const url of urls) {
      const error = await errorOf(
        await call(attacker, 'POST', '/v1/threads', {
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: 'look' },
                { type: 'image_url', image_url: { url } },
              ],
            },
          ],
        }),
      );
      expect({ url, ...error }).toMatchObject({ url, status: 400, param: 'messages[0].content[1].image_url.url' });
    }
    const accepted = await call(attacker, 'POST', '/v1/threads', {
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }],
    });
    expect(accepted.status).toBe(200);
    expect(tally.answered5xx).toBe(0);
  });
});
