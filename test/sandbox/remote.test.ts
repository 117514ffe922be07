import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/run';
import { parseConfig } from '../../src/config';
import { sandboxLimits } from '../../src/sandbox/limits';
import { WORKSPACE_HEADER } from '../../src/sandbox/protocol';
import { remoteSandbox } from '../../src/sandbox/remote';
import { startSandboxServer } from '../support/sandbox-server';
import { waitFor } from '../support/wait';

/**
 * The sandbox over HTTP: `gateway sandbox`'s server (the real local sandbox behind it) on loopback,
 * called by the client a Worker uses (fetch only). The secret, the workspace a session belongs to,
 * bounded bodies both ways, JSON errors. Skipped, saying so, where there is no local sandbox.
 */

const served = await startSandboxServer({ GATEWAY_SANDBOX_FILE_BYTES: String(1024 * 1024) });
if (!served) console.warn('test/sandbox/remote.test.ts: skipped, no local sandbox here.');
const SECRET = served?.secret ?? '';
const url = served?.url ?? '';
const limits = served?.limits ?? sandboxLimits(parseConfig({}));

const client = (secret = SECRET, at = url) =>
  remoteSandbox({
    url: at,
    secret,
    fileBytes: limits.fileBytes,
    logBytes: limits.logBytes,
    timeoutMs: limits.timeoutMs,
  });

afterAll(() => served?.close());

/** A server that answers every request with `answer`: a sandbox that misbehaves. */
async function fakeServer(answer: (response: ServerResponse) => void): Promise<{ url: string; close: () => void }> {
  const fake = createServer((_, response) => answer(response));
  await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(fake.address() as AddressInfo).port}`, close: () => fake.close() };
}

describe.skipIf(!served)('the sandbox over HTTP', () => {
  it('serves a session: a file put in, pandas and a chart, state kept, the session ended', async () => {
    const remote = client();
    expect(await remote.availability()).toEqual({ available: true });
    const session = await remote.open({ workspaceId: 'ws_remote', threadId: 'thread_1' });
    await session.putFile('data.csv', new TextEncoder().encode('a,b\n1,2\n3,4\n'));
    const result = await session.run(
      "import pandas as pd, matplotlib.pyplot as plt\ndf = pd.read_csv('data.csv')\nplt.bar(df.a, df.b)\ndf.to_json('out.json')\ndf.b.sum()",
    );
    expect(result).toMatchObject({ status: 'ok', logs: '6\n', logsTruncated: false });
    expect(
      Buffer.from(result.images[0]?.bytes ?? [])
        .subarray(1, 4)
        .toString(),
    ).toBe('PNG');
    expect(result.files.map((file) => [file.path, new TextDecoder().decode(file.bytes)])).toEqual([
      ['out.json', '{"a":{"0":1,"1":3},"b":{"0":2,"1":4}}'],
    ]);
    // The same thread's session again, with its variables.
    const again = await remote.open({ workspaceId: 'ws_remote', threadId: 'thread_1' });
    expect(again.id).toBe(session.id);
    expect(await again.run('len(df)')).toMatchObject({ status: 'ok', logs: '2\n' });
    await session.close();
    await expect(again.run('1')).rejects.toMatchObject({ code: 'session_ended' });
  });

  it('answers a call killed at its wall time as the local sandbox does, and ends the session', async () => {
    const session = await client().open({ workspaceId: 'ws_remote', threadId: 'thread_timeout' });
    const result = await session.run('while True:\n    pass', { timeoutMs: 2000 });
    expect(result).toMatchObject({ status: 'timeout', reason: expect.stringContaining('GATEWAY_SANDBOX_TIMEOUT_MS') });
    expect(session.alive).toBe(false);
    await expect(session.run('1')).rejects.toMatchObject({ code: 'session_ended' });
  });

  it('serves only the shared secret, in JSON, and never says it', async () => {
    const wrong = client('w'.repeat(40));
    const answer = await wrong.availability();
    expect(answer).toEqual({ available: false, reason: 'The sandbox refused GATEWAY_SANDBOX_SECRET.' });
    await expect(wrong.open({ workspaceId: 'w', threadId: 't' })).rejects.toMatchObject({ code: 'unavailable' });
    for (const authorization of [undefined, `Bearer ${SECRET.slice(0, -1)}`, `Bearer ${SECRET}x`, SECRET]) {
      const response = await fetch(`${url}/v1/availability`, {
        headers: authorization === undefined ? {} : { authorization },
      });
      expect(response.status).toBe(401);
      const body = await response.text();
      expect(JSON.parse(body)).toMatchObject({ error: { code: 'unauthorized' } });
      expect(body).not.toContain(SECRET.slice(0, 8));
    }
  });

  it('treats a session id with another workspace as no session', async () => {
    const session = await client().open({ workspaceId: 'ws_owner', threadId: 'thread_owned' });
    await session.run('secret = 42');
    const headers = { authorization: `Bearer ${SECRET}`, 'content-type': 'application/json' };
    const intruders: Record<string, string>[] = [{ [WORKSPACE_HEADER]: 'ws_intruder' }, {}];
    for (const workspace of intruders) {
      const response = await fetch(`${url}/v1/sessions/${session.id}/run`, {
        method: 'POST',
        headers: { ...headers, ...workspace },
        body: JSON.stringify({ code: 'print(secret)' }),
      });
      expect(response.status).toBe(404);
      expect(await response.json()).toEqual({ error: { code: 'session_ended', message: 'No such code session.' } });
    }
    expect(await session.run('secret')).toMatchObject({ status: 'ok', logs: '42\n' });
    await session.close();
  });

  it('bounds what it is sent: a file past GATEWAY_SANDBOX_FILE_BYTES, declared or streamed, is refused', async () => {
    const session = await client().open({ workspaceId: 'ws_remote', threadId: 'thread_big' });
    await expect(session.putFile('big.bin', new Uint8Array(limits.fileBytes + 1))).rejects.toMatchObject({
      code: 'invalid_request',
    });
    const declared = await fetch(`${url}/v1/sessions/${session.id}/files/declared.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${SECRET}`, [WORKSPACE_HEADER]: 'ws_remote' },
      body: new Uint8Array(limits.fileBytes + 1),
    });
    expect(declared.status).toBe(400);
    // Streamed without a length: refused once it passes the bound, whatever else follows.
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        sent += 64 * 1024;
        if (sent > 64 * limits.fileBytes) controller.close();
        else controller.enqueue(new Uint8Array(64 * 1024));
      },
    });
    const response = await fetch(`${url}/v1/sessions/${session.id}/files/streamed.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${SECRET}`, [WORKSPACE_HEADER]: 'ws_remote' },
      body,
      duplex: 'half',
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: { code: 'invalid_request' } });
    expect(sent).toBeLessThan(64 * limits.fileBytes);
    expect(await session.run("import os; os.listdir('.')")).toMatchObject({ status: 'ok', logs: '[]\n' });
    await session.close();
  });

  it('bounds and checks what a server answers: too much, or the wrong shape, is a failed call', async () => {
    const huge = await fakeServer((response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(`{"id":"${'0'.repeat(1024 * 1024)}"}`);
    });
    const wrong = await fakeServer((response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end('{"id":"../../etc"}');
    });
    try {
      await expect(client(SECRET, huge.url).open({ workspaceId: 'w', threadId: 't' })).rejects.toMatchObject({
        code: 'failed',
        message: 'The sandbox answered more than a call may return.',
      });
      await expect(client(SECRET, wrong.url).open({ workspaceId: 'w', threadId: 't' })).rejects.toMatchObject({
        code: 'failed',
      });
      // A redirect is not followed: the secret goes nowhere but the configured server.
      let sentSecret = false;
      const elsewhere = await fakeServer((response) => {
        sentSecret = true;
        response.end('{"available":true}');
      });
      const redirecting = await fakeServer((response) => {
        response.writeHead(307, { location: `${elsewhere.url}/v1/availability` });
        response.end();
      });
      expect(await client(SECRET, redirecting.url).availability()).toEqual({
        available: false,
        reason: 'The sandbox answered 307.',
      });
      expect(sentSecret).toBe(false);
      elsewhere.close();
      redirecting.close();
      const unreachable = await client(SECRET, 'http://127.0.0.1:1').availability();
      expect(unreachable).toMatchObject({ available: false, reason: expect.stringContaining('cannot be reached') });
      expect(JSON.stringify(unreachable)).not.toContain(SECRET);
    } finally {
      huge.close();
      wrong.close();
    }
  });

  it('is what `gateway sandbox` serves, until told to stop; without a secret it refuses to start', async () => {
    const output: string[] = [];
    const io = { stdout: (text: string) => output.push(text), stderr: (text: string) => output.push(text) };
    expect(await runCli(['sandbox', '--port', '0'], {}, io)).toBe(2);
    expect(output.join('')).toContain('set GATEWAY_SANDBOX_SECRET');

    output.length = 0;
    const stop = new AbortController();
    const served = runCli(['sandbox', '--port', '0'], { GATEWAY_SANDBOX_SECRET: SECRET }, io, stop.signal);
    const listening = await waitFor(
      () => /Sandbox listening on (\S+)/.exec(output.join(''))?.[1],
      (address) => address !== undefined,
      30_000,
    );
    expect(listening).toBeDefined();
    const session = await client(SECRET, listening).open({ workspaceId: 'ws_cli', threadId: 'thread_cli' });
    expect(await session.run('print("served")')).toMatchObject({ status: 'ok', logs: 'served\n' });
    stop.abort();
    expect(await served).toBe(0);
    await expect(session.run('1')).rejects.toMatchObject({ code: 'unavailable' });
  });
});
