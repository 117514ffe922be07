import { randomBytes } from 'node:crypto';
import { link, readFile, stat, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { secretBoxFromEnv, type Config } from '../../config';
import { generateKeyBase64, type SecretBox } from '../../lib/secrets';
import { makeDirectory } from '../../lib/make-directory';

export const ENCRYPTION_KEY_FILE = 'encryption.key';

/**
 * The box for provider secrets on Node (the server and the CLI): GATEWAY_ENCRYPTION_KEY when set
 * (and GATEWAY_ENCRYPTION_KEY_PREVIOUS beside it while the key is rotated).
 * Otherwise, on the embedded database only, the key in DATA_DIR/encryption.key, generated on first
 * use. A remote database is shared with other hosts (Workers, other servers) that must all hold the
 * same key, so there the key has to be configured: a local file would silently diverge.
 */
export async function loadSecretBox(config: Config): Promise<SecretBox> {
  if (config.GATEWAY_ENCRYPTION_KEY) return secretBoxFromEnv(config.GATEWAY_ENCRYPTION_KEY, config);
  if (config.LIBSQL_URL) {
    throw new Error(
      'GATEWAY_ENCRYPTION_KEY is required with LIBSQL_URL: set it to the same 32-byte base64 key on every ' +
        'host that uses this database (generate one with `openssl rand -base64 32`).',
    );
  }
  const path = join(config.DATA_DIR, ENCRYPTION_KEY_FILE);
  return secretBoxFromEnv(await readKeyFile(path), config, `encryption key in ${path}`);
}

/** Where loadSecretBox takes the key from, for messages about it. */
export function encryptionKeySource(config: Config): string {
  return config.GATEWAY_ENCRYPTION_KEY ? 'GATEWAY_ENCRYPTION_KEY' : join(config.DATA_DIR, ENCRYPTION_KEY_FILE);
}

/**
 * Reads the key file, creating it first if there is none. The key is written to a private
 * temporary file and then hard-linked into place: the link either appears complete or fails
 * because another process got there first, whose key is then read. (Writing the final name with
 * the 'wx' flag alone would let a racing reader see it empty.) A file that others can read is
 * refused rather than fixed, as ssh refuses a loose private key: it may already have leaked.
 */
async function readKeyFile(path: string): Promise<string> {
  const existing = await readPrivateFile(path);
  if (existing !== null) return existing;
  // The data directory, when the key comes first, is as private as the key (db/node.ts).
  makeDirectory(dirname(path), 0o700);
  const temporary = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  await writeFile(temporary, `${generateKeyBase64()}\n`, { flag: 'wx', mode: 0o600 });
  try {
    await link(temporary, path);
  } catch (error) {
    if (errorCode(error) !== 'EEXIST') throw error;
  } finally {
    await unlink(temporary);
  }
  const created = await readPrivateFile(path);
  if (created === null) throw new Error(`Could not create the encryption key file ${path}.`);
  return created;
}

async function readPrivateFile(path: string): Promise<string | null> {
  let mode: number;
  try {
    mode = (await stat(path)).mode;
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return null;
    throw error;
  }
  // Windows has no such permission bits to check.
  if (process.platform !== 'win32' && (mode & 0o077) !== 0) {
    throw new Error(
      `The encryption key file ${path} is accessible to other users (mode ${(mode & 0o777).toString(8)}). ` +
        `Restrict it with \`chmod 600 ${path}\` (and consider the key exposed if others could read it).`,
    );
  }
  return readFile(path, 'utf8');
}

/** The `code` of a failed system call (ENOENT, EEXIST, …). */
const errorCode = (error: unknown) => (error instanceof Error && 'code' in error ? error.code : undefined);
