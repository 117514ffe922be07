import { defined } from '../../support/defined';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../../src/lib/crypto';
import { generateKeyBase64 } from '../../../src/lib/secrets';
import { startFakeUpstream, type FakeScenario, type FakeUpstreamServer } from '../../support/fake-upstream';
import { startGatewayProcess, type GatewayProcess } from '../../support/processes';
import { recordTally } from '../../support/tally';

/**
 * No secret leaves: a gateway process (everything it writes to stdout and stderr, at LOG_LEVEL
 * debug) goes through keys, virtual keys with provider secrets (one rotated), runs streamed and not, and upstream
 * errors that repeat the provider key back, in their bodies, their headers and mid-stream. Every
 * response (status line, headers, body) and every line written is scanned for the API keys, their
 * hashes, the provider keys and the encryption key.
 */

let fake: FakeUpstreamServer;
/** Azure's stand-in: its own key. */
let fakeAzure: FakeUpstreamServer;
let gateway: GatewayProcess;
let dataDir: string;
let keys: { workspace: string; organisation: string };
/** Where the start-up output (which shows the new keys, once, by design) ends. */
let startupEnd: { stdout: number; stderr: number };
const ENCRYPTION_KEY = generateKeyBase64();
const OPENAI_KEY = `sk-proj-${crypto.randomUUID().replaceAll('-', '')}`;
/** Azure keys are 32 hex digits: nothing about them says "key", only the value itself can be recognised. */
const AZURE_KEY = crypto.randomUUID().replaceAll('-', '');
const WRONG_KEY = `sk-wrong-${crypto.randomUUID().replaceAll('-', '')}`;
const exchanges: string[] = [];
let requests = 0;

beforeAll(async () => {
  fake = await startFakeUpstream({ apiKey: OPENAI_KEY });
  fakeAzure = await startFakeUpstream({ apiKey: AZURE_KEY });
  dataDir = mkdtempSync(join(tmpdir(), 'gateway-secrets-scan-'));
  gateway = await startGatewayProcess({
    DATA_DIR: dataDir,
    GATEWAY_ENCRYPTION_KEY: ENCRYPTION_KEY,
    GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
    LOG_LEVEL: 'debug',
  });
  const find = (label: string) => new RegExp(`${label}\\s+(gk_[A-Za-z0-9_-]+)`).exec(gateway.stdout())?.[1];
  for (let i = 0; i < 100 && !find('workspace API key'); i++) await new Promise((resolve) => setTimeout(resolve, 50));
  keys = { workspace: defined(find('workspace API key')), organisation: defined(find('organisation API key')) };
  expect(keys.workspace).toMatch(/^gk_/);
  startupEnd = { stdout: gateway.stdout().length, stderr: gateway.stderr().length };
});
afterAll(async () => {
  await gateway?.stop('SIGKILL');
  await fake?.close();
  await fakeAzure?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** A request to the gateway; the whole exchange is kept for the scan. */
async function call(
  path: string,
  init: { method?: string; key?: string; headers?: Record<string, string>; body?: unknown } = {},
) {
  const headers: Record<string, string> = { ...init.headers };
  if (init.key !== undefined) headers['x-gateway-api-key'] = init.key;
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${gateway.url}${path}`, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await response.text();
  requests += 1;
  exchanges.push(
    `${response.status} ${response.statusText}\n${[...response.headers].map(([k, v]) => `${k}: ${v}`).join('\n')}\n\n${text}`,
  );
  return { status: response.status, text, json: () => JSON.parse(text) };
}

let assistantId: string;

async function createKeys() {
  const openai = await call('/v1/virtual-keys', {
    key: keys.workspace,
    body: { slug: 'openai', provider: 'openai', base_url: fake.baseURL, api_key: OPENAI_KEY },
  });
  expect(openai.status).toBe(200);
  const azure = await call('/v1/virtual-keys', {
    key: keys.organisation,
    body: {
      slug: 'azure',
      provider: 'azure-openai',
      base_url: fakeAzure.url,
      api_key: AZURE_KEY,
      api_version: '2024-10-21',
      deployment: 'gpt-4o',
      workspace_id: 'default',
    },
  });
  expect(azure.status).toBe(200);
  const wrong = await call('/v1/virtual-keys', {
    key: keys.workspace,
    body: { slug: 'wrong', provider: 'openai', base_url: fake.baseURL, api_key: WRONG_KEY },
  });
  expect(wrong.status).toBe(200);
  const assistant = await call('/v1/assistants', { key: keys.workspace, body: { model: 'gpt-4o', name: 'scan' } });
  assistantId = assistant.json().id;
}

/** Runs once through `virtualKey` with the scenario queued at the fake; the final run, after the stream when streamed. */
async function run(virtualKey: string, scenario: FakeScenario | null, stream = false) {
  if (scenario) (virtualKey === 'azure' ? fakeAzure : fake).enqueue(scenario);
  const created = await call('/v1/threads/runs', {
    key: keys.workspace,
    headers: { 'x-gateway-virtual-key': virtualKey },
    body: { assistant_id: assistantId, stream, thread: { messages: [{ role: 'user', content: 'hello' }] } },
  });
  expect(created.status).toBe(200);
  const ids = stream
    ? {
        thread: defined(defined(/"thread_id":"(thread_\w+)"/.exec(created.text))[1]),
        run: defined(defined(/"id":"(run_\w+)"/.exec(created.text))[1]),
      }
    : { thread: created.json().thread_id as string, run: created.json().id as string };
  for (;;) {
    const current = await call(`/v1/threads/${ids.thread}/runs/${ids.run}`, { key: keys.workspace });
    const body = current.json();
    if (!['queued', 'in_progress', 'cancelling'].includes(body.status)) return body;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('a gateway process, scanned for secrets', () => {
  it('runs the scenario: keys, virtual keys, runs, upstream errors that repeat the provider key', async () => {
    await createKeys();
    expect((await run('openai', null)).status).toBe('completed');
    expect((await run('openai', null, true)).status).toBe('completed');
    expect((await run('azure', null)).status).toBe('completed');

    // The upstream refuses the wrong key with its own (masked) message.
    expect((await run('wrong', null)).last_error.message).toMatch(/HTTP 401/);

    const echoes: [string, FakeScenario][] = [
      [
        'the key in the error message',
        {
          status: 401,
          error: {
            error: { message: `Invalid header: Authorization: Bearer ${OPENAI_KEY}`, type: 'invalid_request_error' },
          },
        },
      ],
      ['the key in a string error', { status: 400, error: { error: `bad key ${OPENAI_KEY}` } }],
      ['the key in a top-level message', { status: 403, error: { message: `key ${OPENAI_KEY} is not allowed` } }],
      [
        'the key in a body that is not JSON',
        { status: 502, error: `upstream proxy: got Authorization: Bearer ${OPENAI_KEY}` },
      ],
      ['the key in a response header', { status: 500, headers: { 'x-echo-authorization': `Bearer ${OPENAI_KEY}` } }],
      [
        'the key in a 429',
        { status: 429, retry_after: 0, error: { error: { message: `rate limited for key ${OPENAI_KEY}` } } },
      ],
      ['the key in a redirect', { status: 307, headers: { location: `${fake.url}/steal?key=${OPENAI_KEY}` } }],
    ];
    for (const [name, scenario] of echoes) {
      const finished = await run('openai', scenario);
      expect({ name, status: finished.status }).toEqual({ name, status: 'failed' });
    }
    for (const stream of [false, true]) {
      // Mid-stream: the error chunk repeats the key.
      const finished = await run(
        'openai',
        {
          reply: 'a b c',
          error_after_chunks: 2,
          stream_error: { error: { message: `stream broke for ${OPENAI_KEY}` } },
        },
        stream,
      );
      expect(finished.status).toBe('failed');
    }
    // The same for Azure, whose key travels in `api-key`.
    const azure = await run('azure', {
      status: 401,
      error: { error: { code: '401', message: `Access denied: api-key ${AZURE_KEY} is invalid` } },
    });
    expect(azure).toMatchObject({ status: 'failed', last_error: { message: expect.stringContaining('[redacted]') } });

    // Keys presented wrongly, and the error paths around them.
    for (const key of [`${keys.workspace}x`, keys.workspace.slice(0, -1), keys.workspace.toUpperCase(), OPENAI_KEY]) {
      expect((await call('/v1/policies/rate-limits', { key })).status).toBe(401);
    }
    expect(
      (
        await call(`/v1/assistants/${assistantId}`, {
          key: keys.workspace,
          headers: { 'x-gateway-virtual-key': OPENAI_KEY },
        })
      ).status,
    ).toBe(401);
    expect(
      (
        await call('/v1/virtual-keys', {
          key: keys.workspace,
          body: { slug: 'bad', provider: 'openai', api_key: OPENAI_KEY, base_url: 'http://169.254.169.254/' },
        })
      ).status,
    ).toBe(400);
    expect(
      (
        await call('/v1/virtual-keys', {
          key: keys.workspace,
          body: { slug: 'openai', provider: 'openai', api_key: OPENAI_KEY },
        })
      ).status,
    ).toBe(409);
    expect(
      (await call('/v1/policies/rate-limits', { headers: { authorization: `Bearer ${OPENAI_KEY}` } })).status,
    ).toBe(401);
    expect((await call('/v1/virtual-keys?include_revoked=true', { key: keys.organisation })).status).toBe(200);
    // The wrong key rotated to the right one: its runs complete from then on.
    expect((await call('/v1/virtual-keys/wrong', { key: keys.workspace, body: { api_key: OPENAI_KEY } })).status).toBe(
      200,
    );
    expect((await run('wrong', null)).status).toBe('completed');
    expect((await call('/v1/virtual-keys/wrong', { method: 'DELETE', key: keys.workspace })).status).toBe(200);
  });

  it('never shows an API key, its hash, a provider key or the encryption key in a response or a log line', async () => {
    // Let the last log lines reach the pipes, then stop cleanly (shutdown logs too).
    expect(await gateway.stop('SIGTERM')).toBe(0);
    const logs = gateway.stdout().slice(startupEnd.stdout) + gateway.stderr().slice(startupEnd.stderr);
    const lines = logs.split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThan(requests); // an access line per request, and more

    const rawKey = Buffer.from(ENCRYPTION_KEY, 'base64');
    const secrets: Record<string, string> = {
      'workspace API key': keys.workspace,
      'organisation API key': keys.organisation,
      'workspace API key hash': await sha256Hex(keys.workspace),
      'organisation API key hash': await sha256Hex(keys.organisation),
      'OpenAI provider key': OPENAI_KEY,
      'Azure provider key': AZURE_KEY,
      'wrong provider key': WRONG_KEY,
      'encryption key': ENCRYPTION_KEY.replace(/=+$/, ''),
      'encryption key (base64url)': rawKey.toString('base64url'),
      'encryption key (hex)': rawKey.toString('hex'),
    };
    const found: string[] = [];
    for (const [name, secret] of Object.entries(secrets)) {
      for (const [where, text] of [
        ['responses', exchanges.join('\n')],
        ['logs', logs],
      ] as const) {
        if (text.includes(secret)) found.push(`${name} in ${where}`);
        // Case-insensitively too: hex and keys echoed in another case are still the secret.
        else if (text.toLowerCase().includes(secret.toLowerCase())) found.push(`${name} (case changed) in ${where}`);
      }
    }
    recordTally('secrets-scan', { inputsTried: requests });
    expect(found).toEqual([]);
    // The scan saw what it had to: the upstream's refusals reached the runs, redacted.
    expect(exchanges.join('\n')).toContain('[redacted]');
    expect(exchanges.length).toBe(requests);
  });
});
