import { defined } from '../support/defined';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { generateKeyBase64, SecretBox } from '../../src/lib/secrets';
import { nodeConfig } from '../../src/runtime/node/config';
import { ENCRYPTION_KEY_FILE, loadSecretBox } from '../../src/runtime/node/key-file';

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'gateway-secrets-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Whether `box` opens what `other` sealed: the two hold the same key. */
async function sameKey(box: SecretBox, other: SecretBox) {
  return (await box.decrypt(await other.encrypt('probe', 'aad'), 'aad')) === 'probe';
}

describe('SecretBox', () => {
  it('round-trips text, with a fresh IV each time', async () => {
    const box = await SecretBox.fromBase64(generateKeyBase64());
    const plaintext = 'sk-proj-ünïcode-🔑-' + 'x'.repeat(4000);
    const first = await box.encrypt(plaintext, 'vk-1');
    const second = await box.encrypt(plaintext, 'vk-1');
    expect(first).toMatch(/^v1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]+$/);
    expect(first).not.toBe(second);
    expect(first).not.toContain('sk-proj');
    expect(await box.decrypt(first, 'vk-1')).toBe(plaintext);
    expect(await box.decrypt(second, 'vk-1')).toBe(plaintext);
  });

  it('refuses a tampered ciphertext, other associated data and another key', async () => {
    const box = await SecretBox.fromBase64(generateKeyBase64());
    const sealed = await box.encrypt('sk-secret', 'vk-1');
    const [version, iv, body] = sealed.split('.') as [string, string, string];
    const flip = (text: string, at: number) => text.slice(0, at) + (text[at] === 'A' ? 'B' : 'A') + text.slice(at + 1);

    await expect(box.decrypt(`${version}.${iv}.${flip(body, 3)}`, 'vk-1')).rejects.toThrow(/Cannot decrypt/);
    await expect(box.decrypt(`${version}.${flip(iv, 2)}.${body}`, 'vk-1')).rejects.toThrow(/Cannot decrypt/);
    await expect(box.decrypt(`${version}.${iv}.${body.slice(0, -4)}`, 'vk-1')).rejects.toThrow(/Cannot decrypt/);
    await expect(box.decrypt(sealed, 'vk-2')).rejects.toThrow(/Cannot decrypt/);
    await expect(box.decrypt(`v2.${iv}.${body}`, 'vk-1')).rejects.toThrow(/not a 'v1' secret/);
    await expect(box.decrypt('garbage', 'vk-1')).rejects.toThrow(/not a 'v1' secret/);
    const other = await SecretBox.fromBase64(generateKeyBase64());
    await expect(other.decrypt(sealed, 'vk-1')).rejects.toThrow(/Cannot decrypt/);
  });

  it('keeps refusing after a secret was opened once (opened secrets are remembered per record and ciphertext)', async () => {
    const box = await SecretBox.fromBase64(generateKeyBase64());
    const sealed = await box.encrypt('sk-secret', 'vk-1');
    expect(await box.decrypt(sealed, 'vk-1')).toBe('sk-secret');
    expect(await box.decrypt(sealed, 'vk-1')).toBe('sk-secret');
    await expect(box.decrypt(sealed, 'vk-2')).rejects.toThrow(/Cannot decrypt/);
    await expect(box.decrypt(`${sealed}A`, 'vk-1')).rejects.toThrow(/Cannot decrypt/);
    const replaced = await box.encrypt('sk-rotated', 'vk-1');
    expect(await box.decrypt(replaced, 'vk-1')).toBe('sk-rotated');
  });

  it('while rotating, opens under either key, seals under the current one, and reseals only what the previous one sealed', async () => {
    const [oldKey, newKey] = [generateKeyBase64(), generateKeyBase64()];
    const before = await SecretBox.fromBase64(oldKey);
    const rotating = await SecretBox.fromBase64(newKey, oldKey);
    const after = await SecretBox.fromBase64(newKey);
    expect([before.rotating, rotating.rotating, after.rotating]).toEqual([false, true, false]);

    const underOld = await before.encrypt('sk-old', 'vk-1');
    expect(await rotating.decrypt(underOld, 'vk-1')).toBe('sk-old');
    await expect(after.decrypt(underOld, 'vk-1')).rejects.toThrow(/Cannot decrypt/);
    const sealed = await rotating.encrypt('sk-new', 'vk-2');
    expect(await after.decrypt(sealed, 'vk-2')).toBe('sk-new');
    await expect(before.decrypt(sealed, 'vk-2')).rejects.toThrow(/Cannot decrypt/);

    const moved = defined(await rotating.reseal(underOld, 'vk-1'));
    expect(await after.decrypt(moved, 'vk-1')).toBe('sk-old');
    expect(await rotating.reseal(sealed, 'vk-2')).toBeNull();
    expect(await rotating.reseal(moved, 'vk-1')).toBeNull();
    // Associated data still binds a secret to its record, under either key.
    await expect(rotating.reseal(underOld, 'vk-2')).rejects.toThrow(/Cannot decrypt/);
    const third = await SecretBox.fromBase64(generateKeyBase64());
    await expect(rotating.reseal(await third.encrypt('sk-x', 'vk-3'), 'vk-3')).rejects.toThrow(/Cannot decrypt/);
  });

  it('takes base64 and base64url keys, padded or not, and refuses anything but 32 bytes', async () => {
    const key = generateKeyBase64();
    expect(Buffer.from(key, 'base64')).toHaveLength(32);
    const box = await SecretBox.fromBase64(key);
    const url = key.replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
    expect(await sameKey(await SecretBox.fromBase64(url), box)).toBe(true);
    expect(await sameKey(await SecretBox.fromBase64(`  ${key}\n`), box)).toBe(true);

    const short = Buffer.alloc(16, 7).toString('base64');
    const long = Buffer.alloc(33, 7).toString('base64');
    await expect(SecretBox.fromBase64(short)).rejects.toThrow(/32 random bytes.*decodes to 16 bytes/);
    await expect(SecretBox.fromBase64(long)).rejects.toThrow(/decodes to 33 bytes/);
    await expect(SecretBox.fromBase64('')).rejects.toThrow(/32 random bytes/);
    await expect(SecretBox.fromBase64('not base64 at all!')).rejects.toThrow(/other characters/);
    await expect(SecretBox.fromBase64('A')).rejects.toThrow(/32 random bytes/);
  });
});

describe('loadSecretBox (Node)', () => {
  it('uses GATEWAY_ENCRYPTION_KEY when set, and names the variable when it is wrong', async () => {
    const dataDir = tempDir();
    const key = generateKeyBase64();
    const box = await loadSecretBox(nodeConfig({ DATA_DIR: dataDir, GATEWAY_ENCRYPTION_KEY: key }));
    expect(await sameKey(box, await SecretBox.fromBase64(key))).toBe(true);
    expect(() => statSync(join(dataDir, ENCRYPTION_KEY_FILE))).toThrow(/ENOENT/);

    await expect(loadSecretBox(nodeConfig({ DATA_DIR: dataDir, GATEWAY_ENCRYPTION_KEY: 'c2hvcnQ=' }))).rejects.toThrow(
      /^Invalid GATEWAY_ENCRYPTION_KEY: .*decodes to 5 bytes/,
    );
  });

  it('adds GATEWAY_ENCRYPTION_KEY_PREVIOUS as the previous key, naming it when it is wrong', async () => {
    const dataDir = tempDir();
    const [oldKey, newKey] = [generateKeyBase64(), generateKeyBase64()];
    const config = { DATA_DIR: dataDir, GATEWAY_ENCRYPTION_KEY: newKey, GATEWAY_ENCRYPTION_KEY_PREVIOUS: oldKey };
    const box = await loadSecretBox(nodeConfig(config));
    expect(box.rotating).toBe(true);
    const underOld = await (await SecretBox.fromBase64(oldKey)).encrypt('sk-old', 'vk-1');
    expect(await box.decrypt(underOld, 'vk-1')).toBe('sk-old');
    expect(await sameKey(await SecretBox.fromBase64(newKey), box)).toBe(true);

    await expect(loadSecretBox(nodeConfig({ ...config, GATEWAY_ENCRYPTION_KEY_PREVIOUS: 'c2hvcnQ=' }))).rejects.toThrow(
      /^Invalid GATEWAY_ENCRYPTION_KEY_PREVIOUS: .*decodes to 5 bytes/,
    );
    // Beside the key file too: the file holds the new key.
    writeFileSync(join(dataDir, ENCRYPTION_KEY_FILE), `${newKey}\n`, { mode: 0o600 });
    const fromFile = await loadSecretBox(nodeConfig({ DATA_DIR: dataDir, GATEWAY_ENCRYPTION_KEY_PREVIOUS: oldKey }));
    expect(await fromFile.decrypt(underOld, 'vk-1')).toBe('sk-old');
    expect(await sameKey(await SecretBox.fromBase64(newKey), fromFile)).toBe(true);
  });

  it('generates the key file once with mode 0600 and reuses it', async () => {
    const dataDir = join(tempDir(), 'nested', 'data');
    const config = nodeConfig({ DATA_DIR: dataDir });
    const first = await loadSecretBox(config);
    const path = join(dataDir, ENCRYPTION_KEY_FILE);
    const content = readFileSync(path, 'utf8');
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(Buffer.from(content.trim(), 'base64')).toHaveLength(32);

    const second = await loadSecretBox(config);
    expect(readFileSync(path, 'utf8')).toBe(content);
    expect(await sameKey(second, first)).toBe(true);
  });

  it('gives concurrent first loads on an empty directory one key', async () => {
    const dataDir = tempDir();
    const boxes = await Promise.all(Array.from({ length: 8 }, () => loadSecretBox(nodeConfig({ DATA_DIR: dataDir }))));
    for (const box of boxes.slice(1)) expect(await sameKey(box, defined(boxes[0]))).toBe(true);
    const files = (await import('node:fs')).readdirSync(dataDir);
    expect(files).toEqual([ENCRYPTION_KEY_FILE]); // no temporary file left behind
  });

  it('refuses a key file that other users can read', async () => {
    const dataDir = tempDir();
    const path = join(dataDir, ENCRYPTION_KEY_FILE);
    writeFileSync(path, generateKeyBase64());
    chmodSync(path, 0o644);
    await expect(loadSecretBox(nodeConfig({ DATA_DIR: dataDir }))).rejects.toThrow(
      /accessible to other users \(mode 644\).*chmod 600/,
    );
    chmodSync(path, 0o600);
    await expect(loadSecretBox(nodeConfig({ DATA_DIR: dataDir }))).resolves.toBeInstanceOf(SecretBox);
  });

  it('refuses a corrupt key file, naming it', async () => {
    const dataDir = tempDir();
    const path = join(dataDir, ENCRYPTION_KEY_FILE);
    writeFileSync(path, 'too short\n', { mode: 0o600 });
    await expect(loadSecretBox(nodeConfig({ DATA_DIR: dataDir }))).rejects.toThrow(`Invalid encryption key in ${path}`);
  });

  it('refuses to start with a remote LIBSQL_URL and no GATEWAY_ENCRYPTION_KEY', async () => {
    const dataDir = tempDir();
    await expect(
      loadSecretBox(nodeConfig({ DATA_DIR: dataDir, LIBSQL_URL: 'libsql://example.turso.io' })),
    ).rejects.toThrow(/GATEWAY_ENCRYPTION_KEY is required with LIBSQL_URL/);
    expect(() => statSync(join(dataDir, ENCRYPTION_KEY_FILE))).toThrow(/ENOENT/);
  });
});
