import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCliCaptured } from '../support/cli';
import { generateKeyBase64, SecretBox } from '../../src/lib/secrets';

/**
 * `gateway encryption-key rotate` on an embedded database: the provider secrets and the check value
 * move from GATEWAY_ENCRYPTION_KEY_PREVIOUS to GATEWAY_ENCRYPTION_KEY, after which the new key alone
 * opens every secret and the old one alone is refused at start (docs/operations.md).
 */

let dataDir: string;
const oldKey = generateKeyBase64();
const newKey = generateKeyBase64();
beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'gateway-rotate-'));
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

async function runCli(args: string[], keys: { key: string; previous?: string }) {
  const env = {
    DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    GATEWAY_ENCRYPTION_KEY: keys.key,
    ...(keys.previous ? { GATEWAY_ENCRYPTION_KEY_PREVIOUS: keys.previous } : {}),
    PROVIDER_KEY: 'sk-provider-secret',
  };
  return runCliCaptured(args, env);
}

/** The stored secrets, by virtual key id, read straight from the database file. */
async function storedSecrets(): Promise<Map<string, string>> {
  const client = createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
  try {
    const { rows } = await client.execute('select id, secret_ciphertext from virtual_keys order by id');
    return new Map(rows.map((row) => [String(row.id), String(row.secret_ciphertext)]));
  } finally {
    client.close();
  }
}

describe('gateway encryption-key rotate', () => {
  it('moves every secret and the check value to the new key, once', async () => {
    const init = await runCli(['init', '--json'], { key: oldKey });
    expect(init.code, init.stderr).toBe(0);
    for (const slug of ['alpha', 'beta', 'gamma']) {
      const created = await runCli(
        [
          'virtual-keys',
          'create',
          '--workspace',
          'default',
          '--slug',
          slug,
          '--provider',
          'openai',
          '--api-key-env',
          'PROVIDER_KEY',
          '--json',
        ],
        { key: oldKey },
      );
      expect(created.code, created.stderr).toBe(0);
    }
    const before = await storedSecrets();
    expect(before.size).toBe(3);

    // Without the previous key there is nothing to rotate from; with the new key alone the start is refused.
    const alone = await runCli(['encryption-key', 'rotate'], { key: oldKey });
    expect(alone.code).toBe(2);
    expect(alone.stderr).toMatch(/set GATEWAY_ENCRYPTION_KEY_PREVIOUS/);
    await expect(runCli(['encryption-key', 'rotate'], { key: newKey })).rejects.toThrow(
      /not the one this database's provider secrets are encrypted under/,
    );

    const rotated = await runCli(['encryption-key', 'rotate', '--json'], { key: newKey, previous: oldKey });
    expect(rotated.code, rotated.stderr).toBe(0);
    expect(JSON.parse(rotated.stdout)).toEqual({ resealed: 3, current: 0, changed: 0, unreadable: [] });

    const after = await storedSecrets();
    const box = await SecretBox.fromBase64(newKey);
    for (const [id, sealed] of after) {
      expect(sealed).not.toBe(before.get(id));
      expect(await box.decrypt(sealed, id)).toBe('sk-provider-secret');
    }
    // The check value moved last: the new key alone starts, the old one alone is refused.
    expect((await runCli(['virtual-keys', 'list', '--workspace', 'default'], { key: newKey })).code).toBe(0);
    const again = await runCli(['encryption-key', 'rotate'], { key: newKey, previous: oldKey });
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/Resealed under the new key: 0; already under it: 3\./);
    await expect(
      runCli(['encryption-key', 'rotate', '--json'], { key: oldKey, previous: generateKeyBase64() }),
    ).rejects.toThrow(/not the one this database's provider secrets are encrypted under/);
  });

  it('names a secret that opens under neither key, leaves it as it is, and exits 1', async () => {
    const [damagedId] = [...(await storedSecrets()).keys()];
    const damaged = `v1.${'A'.repeat(16)}.${'B'.repeat(40)}`;
    const client = createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
    await client.execute({
      sql: 'update virtual_keys set secret_ciphertext = ? where id = ?',
      args: [damaged, damagedId ?? ''],
    });
    client.close();

    const newer = generateKeyBase64();
    const result = await runCli(['encryption-key', 'rotate', '--json'], { key: newer, previous: newKey });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      'error: 1 provider secret(s) not moved to the new key: keep GATEWAY_ENCRYPTION_KEY_PREVIOUS\n',
    );
    expect(JSON.parse(result.stdout)).toEqual({ resealed: 2, current: 0, changed: 0, unreadable: [damagedId] });
    expect((await storedSecrets()).get(damagedId ?? '')).toBe(damaged);
  });
});
