import { defined } from '../../support/defined';
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '@libsql/client';
import { ConfigurationError } from '../../../src/config';
import { eq } from 'drizzle-orm';
import { encryptionCheck, virtualKeys } from '../../../src/db/schema';
import { generateKeyBase64, SecretBox } from '../../../src/lib/secrets';
import { checkEncryptionKey } from '../../../src/resources/identities/encryption-check';
import { createTestGateway, type TestGateway } from '../../support/gateway';
import { ROOT, runGatewayToExit, startGatewayProcess } from '../../support/processes';

/**
 * A gateway that cannot work refuses to start, at once, with one line naming the cause and a
 * non-zero exit code (no stack): a bad variable, an unusable DATA_DIR, an unreachable LIBSQL_URL,
 * an encryption key that is not the database's. The Worker's side: test/workers/configuration.test.ts.
 */

let scratch: string;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'gateway-start-'));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The process's exit, asserted to be a refusal in one line without a stack; answers the line. */
async function refusal(env: Record<string, string>): Promise<string> {
  const { code, stdout, stderr } = await runGatewayToExit(env);
  expect(code, `stdout: ${stdout}\nstderr: ${stderr}`).toBe(1);
  expect(stdout).not.toContain('Gateway listening');
  const lines = stderr.split('\n').filter((line) => line.trim() !== '' && !line.startsWith('npm warn'));
  expect(lines).toHaveLength(1);
  expect(lines[0]).not.toMatch(/^\s+at /);
  return defined(lines[0]);
}

/** A gateway that starts, serves, and stops cleanly. */
async function startAndStop(env: Record<string, string>): Promise<void> {
  const gateway = await startGatewayProcess(env);
  try {
    // Answered only once the entry is done starting (its signal handlers installed).
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    expect(await gateway.stop('SIGTERM')).toBe(0);
  } finally {
    await gateway.stop('SIGKILL');
  }
}

/** A loopback port that a server of this process listens on (it accepts connections and answers nothing). */
async function takenPort(): Promise<{ port: number; release(): Promise<void> }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return { port: address.port, release: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** A loopback port that nothing listens on. */
async function closedPort(): Promise<number> {
  const { port, release } = await takenPort();
  await release();
  return port;
}

describe('the Node start refuses', () => {
  it('a boolean variable that is not true, false, 1 or 0, naming it', async () => {
    const line = await refusal({ DATA_DIR: join(scratch, 'flag'), GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'yes' });
    expect(line).toBe('Invalid configuration: GATEWAY_ALLOW_PRIVATE_UPSTREAMS: must be true, false, 1 or 0.');
  });

  it('a DATA_DIR that cannot be created (/proc/nope), without hanging', async () => {
    const line = await refusal({ DATA_DIR: '/proc/nope' });
    expect(line).toMatch(/^DATA_DIR \(\/proc\/nope\) is not a directory the gateway can write to: E[A-Z]+/);
  });

  it('a DATA_DIR below a file', async () => {
    const file = join(scratch, 'a-file');
    writeFileSync(file, 'not a directory');
    const line = await refusal({ DATA_DIR: join(file, 'data') });
    expect(line).toMatch(/^DATA_DIR \(.*a-file\/data\) is not a directory the gateway can write to: ENOTDIR/);
  });

  it('a LIBSQL_URL where nothing listens, naming the refused connection', async () => {
    const port = await closedPort();
    const line = await refusal({
      DATA_DIR: join(scratch, 'refused'),
      LIBSQL_URL: `http://127.0.0.1:${port}`,
      GATEWAY_ENCRYPTION_KEY: generateKeyBase64(),
    });
    expect(line).toBe(
      `Cannot reach the database at LIBSQL_URL (http://127.0.0.1:${port}): connect ECONNREFUSED 127.0.0.1:${port}.`,
    );
  });

  it('a LIBSQL_URL whose name does not resolve, naming it', async () => {
    const line = await refusal({
      DATA_DIR: join(scratch, 'dns'),
      LIBSQL_URL: 'http://gateway-db.invalid',
      GATEWAY_ENCRYPTION_KEY: generateKeyBase64(),
    });
    expect(line).toMatch(
      /^Cannot reach the database at LIBSQL_URL \(http:\/\/gateway-db\.invalid\): getaddrinfo (ENOTFOUND|EAI_AGAIN) gateway-db\.invalid\.$/,
    );
  });

  it('a PORT another process listens on, naming PORT, before any key exists; the next start shows the keys', async () => {
    const dataDir = join(scratch, 'port');
    const { port, release } = await takenPort();
    try {
      const line = await refusal({ DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1' });
      expect(line).toBe(
        `Cannot listen on 127.0.0.1:${port}: another process listens there. Stop it, or set PORT to another port (PORT=0 picks a free one).`,
      );
    } finally {
      await release();
    }
    const database = createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
    try {
      for (const table of ['organisations', 'workspaces', 'api_keys']) {
        expect((await database.execute(`SELECT count(*) AS n FROM ${table}`)).rows[0]?.n, table).toBe(0);
      }
    } finally {
      database.close();
    }

    const gateway = await startGatewayProcess({ DATA_DIR: dataDir });
    try {
      const apiKey = /workspace API key\s+(gk_\S+)/.exec(gateway.stdout())?.[1];
      expect(apiKey, gateway.stdout()).toBeDefined();
      expect(
        (await fetch(`${gateway.url}/v1/assistants`, { headers: { authorization: `Bearer ${apiKey}` } })).status,
      ).toBe(200);
    } finally {
      await gateway.stop('SIGTERM');
    }
  });

  it('a HOST that is not an address of this machine, naming HOST', async () => {
    // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): no machine's own address.
    const line = await refusal({ DATA_DIR: join(scratch, 'host'), HOST: '192.0.2.1', PORT: '8787' });
    expect(line).toBe(
      'Cannot listen on 192.0.2.1:8787: HOST is not an address of this machine. Set HOST to one (127.0.0.1, or 0.0.0.0 for every interface).',
    );
  });

  it('an encryption key that is not the one the database was started with', async () => {
    const dataDir = join(scratch, 'keys');
    const key = generateKeyBase64();
    await startAndStop({ DATA_DIR: dataDir, GATEWAY_ENCRYPTION_KEY: key });

    const line = await refusal({ DATA_DIR: dataDir, GATEWAY_ENCRYPTION_KEY: generateKeyBase64() });
    expect(line).toMatch(
      /^The encryption key \(GATEWAY_ENCRYPTION_KEY\) is not the one this database's provider secrets are encrypted under/,
    );
    // Without the variable, the key file of DATA_DIR (generated now) is not the database's either.
    expect(await refusal({ DATA_DIR: dataDir })).toContain(`(${join(dataDir, 'encryption.key')})`);

    await startAndStop({ DATA_DIR: dataDir, GATEWAY_ENCRYPTION_KEY: key });
  });
});

describe('the encryption check', () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await createTestGateway();
  });
  afterAll(() => gateway.close());

  const box = () => SecretBox.fromBase64(generateKeyBase64());
  const check = (secrets: SecretBox) =>
    checkEncryptionKey(gateway.database.db, secrets, { keySource: 'the test key', now: Date.now() });

  it('stores its value under the first key, passes that key, and refuses another, naming its source', async () => {
    await gateway.database.db.delete(encryptionCheck);
    await check(gateway.deps.secrets);
    await check(gateway.deps.secrets);
    expect(await gateway.database.db.select().from(encryptionCheck)).toHaveLength(1);
    const other = check(await box());
    await expect(other).rejects.toBeInstanceOf(ConfigurationError);
    await expect(other).rejects.toThrow(/^The encryption key \(the test key\) is not the one/);
  });

  it('checks a database from before the check against its provider secrets, then stores it', async () => {
    await gateway.database.db.delete(encryptionCheck);
    // A virtual key sealed under the gateway's own key (the key file of its DATA_DIR).
    const tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: 'https://api.example.com/v1' });

    await expect(check(await box())).rejects.toBeInstanceOf(ConfigurationError);
    expect(await gateway.database.db.select().from(encryptionCheck)).toEqual([]);

    await check(gateway.deps.secrets);
    expect(await gateway.database.db.select().from(encryptionCheck)).toHaveLength(1);
  });

  it('is not stopped by one damaged provider secret when another opens', async () => {
    await gateway.database.db.delete(encryptionCheck);
    const tenant = await gateway.tenant();
    await gateway.virtualKey(tenant, { base_url: 'https://api.example.com/v1' });
    const damaged = await gateway.virtualKey(tenant, { base_url: 'https://api.example.com/v1' });
    await gateway.database.db
      .update(virtualKeys)
      .set({ secretCiphertext: 'v1.AAAA.AAAA' })
      .where(eq(virtualKeys.slug, damaged));

    await check(gateway.deps.secrets);
    expect(await gateway.database.db.select().from(encryptionCheck)).toHaveLength(1);
  });

  it('lets only one of two first starts with different keys win', async () => {
    await gateway.database.db.delete(encryptionCheck);
    const results = await Promise.allSettled([check(gateway.deps.secrets), check(await box())]);
    expect(results.map((result) => result.status).sort()).toEqual(['fulfilled', 'rejected']);
  });
});

describe('npm run dev:worker', () => {
  it('refuses a --port that is not a port before it starts anything', () => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/dev-worker.ts', '--port', '80a'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain("--port must be a port number (1-65535), got '80a'");
    expect(result.stdout).toBe('');
  });
});
