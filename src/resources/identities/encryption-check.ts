import { and, asc, desc, eq, gt } from 'drizzle-orm';
import { ConfigurationError } from '../../config';
import type { Db } from '../../db/client';
import { encryptionCheck, virtualKeys } from '../../db/schema';
import type { SecretBox } from '../../lib/secrets';

/**
 * Whether the encryption key a gateway starts with is the one its database's provider secrets are
 * sealed under. Without this check a wrong key starts fine and then fails every run, when it first
 * decrypts a provider key; with it, the start refuses, saying so. And the key's rotation, which
 * moves the secrets and the check value from the previous key to the current one.
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

/** Provider secrets resealed per batch (one transaction, one round trip). */
const ROTATION_PAGE = 200;

/** What a rotation did (`gateway encryption-key rotate`). */
export interface Rotation {
  /** Secrets moved from the previous key to the current one. */
  resealed: number;
  /** Secrets already under the current key. */
  current: number;
  /** Secrets replaced by a host while they were resealed: run the rotation again to move them. */
  changed: number;
  /** Virtual keys whose secret opens under neither key: damaged, or sealed under a third key. */
  unreadable: string[];
}

/**
 * Seals every provider secret sealed under the box's previous key under its current one, then the
 * check value. Each secret is replaced only if it is still the one read, so a secret a host writes
 * meanwhile is never overwritten: it is counted in `changed`. Running it again is harmless.
 */
export async function rotateEncryptionKey(db: Db, secrets: SecretBox): Promise<Rotation> {
  const rotation: Rotation = { resealed: 0, current: 0, changed: 0, unreadable: [] };
  let after = '';
  for (;;) {
    const page = await db
      .select({ id: virtualKeys.id, sealed: virtualKeys.secretCiphertext })
      .from(virtualKeys)
      .where(gt(virtualKeys.id, after))
      .orderBy(asc(virtualKeys.id))
      .limit(ROTATION_PAGE);
    const last = page.at(-1);
    if (!last) break;
    after = last.id;
    const updates = [];
    for (const row of page) {
      const resealed = await secrets.reseal(row.sealed, row.id).catch(() => undefined);
      if (resealed === undefined) rotation.unreadable.push(row.id);
      else if (resealed === null) rotation.current += 1;
      else
        updates.push(
          db
            .update(virtualKeys)
            .set({ secretCiphertext: resealed })
            .where(and(eq(virtualKeys.id, row.id), eq(virtualKeys.secretCiphertext, row.sealed))),
        );
    }
    const [first, ...rest] = updates;
    if (!first) continue;
    for (const result of await db.batch([first, ...rest])) {
      if (result.rowsAffected > 0) rotation.resealed += 1;
      else rotation.changed += 1;
    }
  }
  // Last: from here on, a host given only the previous key refuses to start.
  const check = await readCheck(db);
  const resealedCheck = check === null ? null : await secrets.reseal(check, CHECK_DATA);
  if (check !== null && resealedCheck !== null) {
    await db
      .update(encryptionCheck)
      .set({ sealed: resealedCheck })
      .where(and(eq(encryptionCheck.id, CHECK_ID), eq(encryptionCheck.sealed, check)));
  }
  return rotation;
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
