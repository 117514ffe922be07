import { defined } from '../../support/defined';
import { request as httpRequest } from 'node:http';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config';
import { listen } from '../../../src/runtime/node/server';
import { startGatewayProcess } from '../../support/processes';
import { waitFor } from '../../support/wait';

/**
 * `npm start` as a new user meets it: a fresh data directory, keys printed once, then served; and
 * the modes of its data files. (Its timeouts and its cap on connections, which wait on the real
 * clock: test/reliability/node-server.test.ts.)
 */

let dataDir: string;
beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'gateway-node-'));
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

function keysFrom(stdout: string) {
  const find = (label: string) => new RegExp(`${label}\\s+(gk_[A-Za-z0-9_-]+)`).exec(stdout)?.[1];
  return { organisation: find('organisation API key'), workspace: find('workspace API key') };
}

describe('the Node server', () => {
  let workspaceKey: string;
  let policyId: string;

  it('initialises an empty database, prints the keys once, and serves them', async () => {
    const gateway = await startGatewayProcess({ DATA_DIR: dataDir });
    try {
      // The keys are printed after the listening line; give stdout a moment to flush.
      await expect.poll(() => keysFrom(gateway.stdout()).workspace, { timeout: 5_000 }).toBeDefined();
      const keys = keysFrom(gateway.stdout());
      workspaceKey = defined(keys.workspace);
      expect(keys.organisation).toMatch(/^gk_/);

      const created = await fetch(`${gateway.url}/v1/policies/rate-limits`, {
        method: 'POST',
        headers: { 'x-gateway-api-key': workspaceKey, 'content-type': 'application/json' },
        body: JSON.stringify({
          name: 'gpt-4o per key',
          conditions: [{ key: 'model', value: 'gpt-4o' }],
          group_by: [{ key: 'api_key' }],
          type: 'requests',
          unit: 'rpm',
          value: 60,
        }),
      });
      expect(created.status).toBe(200);
      policyId = ((await created.json()) as { id: string }).id;

      const listed = await fetch(`${gateway.url}/v1/policies/rate-limits?page_size=10`, {
        headers: { 'x-gateway-api-key': defined(keys.organisation) },
      });
      expect(((await listed.json()) as { total: number }).total).toBe(1);
      expect(await gateway.stop('SIGTERM')).toBe(0);
    } finally {
      await gateway.stop('SIGKILL');
    }
  });

  it('keeps the data in WAL mode under DATA_DIR', async () => {
    const client = createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
    const mode = await client.execute('PRAGMA journal_mode');
    const policies = await client.execute('SELECT id FROM rate_limit_policies');
    client.close();
    expect(defined(mode.rows[0])[0]).toBe('wal');
    expect(policies.rows.map((row) => row[0])).toEqual([policyId]);
  });

  it('on restart prints no key, keeps the data, refuses chunked bodies over the limit, and reads a body whole or in pieces alike', async () => {
    const gateway = await startGatewayProcess({ DATA_DIR: dataDir, GATEWAY_MAX_BODY_BYTES: '1024' });
    try {
      const response = await fetch(`${gateway.url}/v1/policies/rate-limits/${policyId}`, {
        headers: { 'x-gateway-api-key': workspaceKey },
      });
      expect(response.status).toBe(200);

      // A chunked upload over the limit, through the real HTTP server.
      const status = await new Promise<number>((resolve, reject) => {
        const url = new URL(`${gateway.url}/v1/policies/rate-limits`);
        const req = httpRequest(
          {
            host: url.hostname,
            port: url.port,
            path: url.pathname,
            method: 'POST',
            headers: {
              'x-gateway-api-key': workspaceKey,
              'content-type': 'application/json',
              'transfer-encoding': 'chunked',
            },
          },
          (res) => {
            res.resume();
            resolve(defined(res.statusCode));
          },
        );
        req.on('error', reject);
        for (let i = 0; i < 8; i++) req.write(' '.repeat(256));
        req.end('{}');
      });
      expect(status).toBe(413);

      // A body the server has whole when it is read (its length declared, one write), and one
      // still arriving in pieces, its length declared or not: read alike.
      const send = (pieces: Buffer[], gapMs: number, declared: boolean) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const url = new URL(`${gateway.url}/v1/assistants`);
          const length = declared ? { 'content-length': String(Buffer.concat(pieces).length) } : {};
          const req = httpRequest(
            {
              host: url.hostname,
              port: url.port,
              path: url.pathname,
              method: 'POST',
              headers: { 'x-gateway-api-key': workspaceKey, 'content-type': 'application/json', ...length },
            },
            (res) => {
              let body = '';
              res.on('data', (chunk: Buffer) => (body += chunk));
              res.on('end', () => resolve({ status: defined(res.statusCode), body }));
            },
          );
          req.on('error', reject);
          void (async () => {
            for (const piece of pieces.slice(0, -1)) {
              req.write(piece);
              await new Promise((wait) => setTimeout(wait, gapMs));
            }
            req.end(pieces[pieces.length - 1]);
          })();
        });
      const name = 'caf\u00e9 \ud83d\ude00';
      const json = Buffer.from(JSON.stringify({ model: 'gpt-4o', name }));
      const whole = await send([json], 0, true);
      // The last cut falls inside the emoji's four bytes: pieces are bytes, not characters.
      const pieces = [json.subarray(0, 10), json.subarray(10, json.length - 4), json.subarray(json.length - 4)];
      const inPieces = await send(pieces, 50, false);
      const declaredInPieces = await send(pieces, 50, true);
      for (const answer of [whole, inPieces, declaredInPieces]) {
        expect(answer.status).toBe(200);
        expect(JSON.parse(answer.body)).toMatchObject({ object: 'assistant', model: 'gpt-4o', name });
      }

      expect(await gateway.stop('SIGTERM')).toBe(0);
      expect(gateway.stdout()).not.toMatch(/gk_/);
      expect(gateway.stderr()).not.toMatch(/gk_/);
    } finally {
      await gateway.stop('SIGKILL');
    }
  });
});

// ── Files ────────────────────────────────────────────────────────────────────────────────────

const modeOf = (path: string) => statSync(path).mode & 0o777;

describe('the data files', () => {
  it('are the owner’s alone: DATA_DIR created 0700, the database, its WAL and shared memory 0600', async () => {
    const root = mkdtempSync(join(tmpdir(), 'gateway-modes-'));
    const directory = join(root, 'nested', 'data');
    const gateway = await startGatewayProcess({ DATA_DIR: directory });
    try {
      // While it runs, every file SQLite uses is there.
      expect(modeOf(directory)).toBe(0o700);
      expect(modeOf(join(root, 'nested'))).toBe(0o700);
      for (const file of ['gateway.db', 'gateway.db-wal', 'gateway.db-shm', 'encryption.key']) {
        expect([file, modeOf(join(directory, file))]).toEqual([file, 0o600]);
      }
      expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
      expect(await gateway.stop('SIGTERM')).toBe(0);
      expect(gateway.stderr()).not.toMatch(/open to other users/);
    } finally {
      await gateway.stop('SIGKILL');
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('are tightened to 0600 with a warning when found open to others; an open DATA_DIR only gets the warning', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'gateway-modes-'));
    try {
      const first = await startGatewayProcess({ DATA_DIR: directory });
      expect(await first.stop('SIGKILL')).toBe(null); // a kill leaves the WAL and shared memory behind
      chmodSync(directory, 0o755);
      for (const file of ['gateway.db', 'gateway.db-wal', 'gateway.db-shm']) chmodSync(join(directory, file), 0o644);

      const second = await startGatewayProcess({ DATA_DIR: directory });
      try {
        for (const file of ['gateway.db', 'gateway.db-wal', 'gateway.db-shm']) {
          expect([file, modeOf(join(directory, file))]).toEqual([file, 0o600]);
          expect(second.stderr()).toContain(
            `${join(directory, file)} was open to other users (mode 644): changed to 600.`,
          );
        }
        expect(modeOf(directory)).toBe(0o755);
        expect(second.stderr()).toMatch(/The data directory .* is open to other users \(mode 755\)/);
        expect((await fetch(`${second.url}/health`)).status).toBe(200);
        expect(await second.stop('SIGTERM')).toBe(0);
      } finally {
        await second.stop('SIGKILL');
      }
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});

describe('answers in flight', () => {
  it('counts an answer from its request until its last byte is written or its client goes', async () => {
    const config = { ...parseConfig({}), HOST: '127.0.0.1', PORT: 0 };
    let feed!: ReadableStreamDefaultController<Uint8Array>;
    const { server, url, answering } = await listen(
      () => new Response(new ReadableStream<Uint8Array>({ start: (controller) => void (feed = controller) })),
      config,
    );
    try {
      expect(answering()).toBe(0);
      // Read to its end: counted while its body is written, not once its headers are.
      const read = await fetch(url);
      expect(answering()).toBe(1);
      feed.enqueue(new TextEncoder().encode('part'));
      feed.close();
      expect(await read.text()).toBe('part');
      await waitFor(answering, (count) => count === 0);
      expect(answering()).toBe(0);

      // Left by its client midway: no longer counted.
      const left = new AbortController();
      const leaving = await fetch(url, { signal: left.signal });
      feed.enqueue(new TextEncoder().encode('part'));
      await defined(leaving.body).getReader().read();
      expect(answering()).toBe(1);
      left.abort();
      await waitFor(answering, (count) => count === 0);
      expect(answering()).toBe(0);
    } finally {
      server.close();
    }
  });
});
