import { desc, eq } from 'drizzle-orm';
import { ConfigurationError } from '../../config';
import type { Db } from '../../db/client';
import { encryptionCheck, virtualKeys } from '../../db/schema';
import type { SecretBox } from '../../lib/secrets';

/**
 * Whether the encryption key a gateway starts with is the one its database's provider secrets are
 * sealed under. Without this check a wrong key starts fine and then fails every run, when it first
 * decrypts a provider key; with it, the start refuses, saying so.
 */

const CHECK_ID = 1;
/** Provider secrets tried on a database without a check value: the newest few. */
const SAMPLE = 8;
const CHECK_TEXT = 'assistants-gateway encryption check';
/** The associated data of the check: no virtual key's id, so no provider secret can stand in for it. */
const CHECK_DATA = 'encryption_check';

/**
 * Checks `secrets` against the stored check value. A database without one is checked against its
 * newest provider secrets if it holds any (a database from before the check: one of them must
 * open), then given the check value sealed under this key. Throws ConfigurationError naming `keySource` when the key is another.
 */
export async function checkEncryptionKey(
  db: Db,
  secrets: SecretBox,
  options: { keySource: string; now: number },
): Promise<void> {
  const mismatch = () =>
    new ConfigurationError(
      `The encryption key (${options.keySource}) is not the one this database's provider secrets are encrypted ` +
        'under: start with the key the database was set up with, the one every other host of it uses.',
    );
  const stored = await readCheck(db);
  if (stored === null) {
    // One secret that opens is enough (a single damaged row must not stop every start).
    const sample = await db
      .select({ id: virtualKeys.id, sealed: virtualKeys.secretCiphertext })
      .from(virtualKeys)
      .orderBy(desc(virtualKeys.createdAt))
      .limit(SAMPLE);
    const opened = await Promise.all(sample.map((secret) => opens(secrets, secret.sealed, secret.id)));
    if (sample.length > 0 && !opened.includes(true)) throw mismatch();
    const sealed = await secrets.encrypt(CHECK_TEXT, CHECK_DATA);
    await db.insert(encryptionCheck).values({ id: CHECK_ID, sealed, createdAt: options.now }).onConflictDoNothing();
  }
  // After an insert, what is read back may be a concurrent first start's, under its own key.
  const check = stored ?? (await readCheck(db));
  if (check === null || !(await opens(secrets, check, CHECK_DATA, CHECK_TEXT))) throw mismatch();
}

async function readCheck(db: Db): Promise<string | null> {
  const [row] = await db
    .select({ sealed: encryptionCheck.sealed })
    .from(encryptionCheck)
    .where(eq(encryptionCheck.id, CHECK_ID));
  return row?.sealed ?? null;
}

/** Whether the box opens `sealed` (to `expected`, when given). */
function opens(secrets: SecretBox, sealed: string, associatedData: string, expected?: string): Promise<boolean> {
  return secrets.decrypt(sealed, associatedData).then(
    (text) => expected === undefined || text === expected,
    () => false,
  );
}
