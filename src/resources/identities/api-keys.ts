import { and, desc, eq, isNull, sql } from 'drizzle-orm';
import { preparedQuery, type Db } from '../../db/client';
import { apiKeys, settingsGeneration, workspaces, type ApiKeyKind, type AuthenticatedKey } from '../../db/schema';
import type { KeyAt } from '../../db/settings-cache';
import { ApiError } from '../../errors';
import { randomToken, sha256Hex } from '../../lib/crypto';
import { BoundedMap } from '../../lib/bounded-map';
import { newUuid } from '../../lib/ids';

/**
 * API keys: `gk_` + 32 random bytes, shown once at creation. The database keeps the SHA-256 of the
 * whole key and a short prefix to recognise it by, so a leaked database row authenticates nobody
 * and a key is only ever compared through its hash.
 */

const KEY_PREFIX = 'gk_';
const VISIBLE_CHARS = 10;

export interface ApiKeyRecord {
  id: string;
  kind: ApiKeyKind;
  name: string;
  prefix: string;
  organisationId: string;
  workspaceId: string | null;
  createdAt: number;
  revokedAt: number | null;
}

/** Whether a presented key could be a gateway key at all (a provider's `sk-…` cannot). */
export function isGatewayKeyShaped(plaintext: string): boolean {
  return plaintext.startsWith(KEY_PREFIX);
}

export function generateApiKey(): string {
  return KEY_PREFIX + randomToken(32);
}

export interface NewApiKey {
  kind: ApiKeyKind;
  organisationId: string;
  workspaceId: string | null;
  name: string;
  now: number;
}

/**
 * A new key and its row, not yet written, so that the bootstrap can write it in one batch with
 * the organisation and workspace it belongs to.
 */
export async function prepareApiKey(input: NewApiKey) {
  const plaintext = generateApiKey();
  const record: ApiKeyRecord = {
    id: newUuid(),
    kind: input.kind,
    name: input.name,
    prefix: plaintext.slice(0, VISIBLE_CHARS),
    organisationId: input.organisationId,
    workspaceId: input.kind === 'workspace' ? input.workspaceId : null,
    createdAt: input.now,
    revokedAt: null,
  };
  return { record, plaintext, row: { ...record, hash: await sha256Hex(plaintext) } };
}

export async function createApiKey(db: Db, input: NewApiKey) {
  const { record, plaintext, row } = await prepareApiKey(input);
  await db.insert(apiKeys).values(row);
  return { record, plaintext };
}

// With the settings' generation its snapshot saw: the key is exact at that generation (settings-cache.ts).
const keyByHash = preparedQuery((db) =>
  db
    .select({
      id: apiKeys.id,
      kind: apiKeys.kind,
      organisationId: apiKeys.organisationId,
      workspaceId: workspaces.id,
      workspaceSlug: workspaces.slug,
      generation: sql<
        number | null
      >`(SELECT ${settingsGeneration.value} FROM ${settingsGeneration} WHERE ${settingsGeneration.id} = 0)`,
    })
    .from(apiKeys)
    .leftJoin(workspaces, eq(workspaces.id, apiKeys.workspaceId))
    .where(and(eq(apiKeys.hash, sql.placeholder('hash')), isNull(apiKeys.revokedAt)))
    .limit(1)
    .prepare(),
);

const RECENT_HASHES_MAX = 10_000;

/**
 * Hashes of keys that authenticated recently, oldest first, one set per app (the settings cache
 * holds it: db/settings-cache.ts). Every request hashes its key, and WebCrypto's digest is
 * asynchronous (on Node a hop through the thread pool), a noticeable share of a run's creation.
 * Only the hash is remembered, never the lookup, so a revoked key is refused at its next request;
 * only keys that matched are kept, so unknown keys cannot crowd out real ones.
 */
export class KeyHashes {
  readonly #recent = new BoundedMap<string, string>(RECENT_HASHES_MAX);

  /** The hash of `plaintext`, and `remember`, which keeps it once the key is known to be live. */
  async of(plaintext: string): Promise<{ hash: string; remember: () => void }> {
    const recent = this.#recent.get(plaintext);
    if (recent !== undefined) return { hash: recent, remember: () => undefined };
    const hash = await sha256Hex(plaintext);
    return { hash, remember: () => this.#recent.set(plaintext, hash) };
  }
}

/** The key presented, if it is live, with the settings' generation of the snapshot it was found in. */
export async function authenticateApiKey(db: Db, hashes: KeyHashes, plaintext: string): Promise<KeyAt | null> {
  if (!isGatewayKeyShaped(plaintext)) return null;
  const { hash, remember } = await hashes.of(plaintext);
  const [row] = await keyByHash(db).all({ hash });
  if (!row) return null;
  remember();
  const key: AuthenticatedKey = {
    id: row.id,
    kind: row.kind,
    organisationId: row.organisationId,
    workspace:
      row.kind === 'workspace' && row.workspaceId && row.workspaceSlug
        ? { id: row.workspaceId, slug: row.workspaceSlug }
        : null,
  };
  return { key, generation: row.generation };
}

const recordColumns = {
  id: apiKeys.id,
  kind: apiKeys.kind,
  name: apiKeys.name,
  prefix: apiKeys.prefix,
  organisationId: apiKeys.organisationId,
  workspaceId: apiKeys.workspaceId,
  createdAt: apiKeys.createdAt,
  revokedAt: apiKeys.revokedAt,
};

export async function listApiKeys(db: Db, organisationId?: string): Promise<ApiKeyRecord[]> {
  return db
    .select(recordColumns)
    .from(apiKeys)
    .where(organisationId ? eq(apiKeys.organisationId, organisationId) : undefined)
    .orderBy(desc(apiKeys.createdAt), desc(apiKeys.id));
}

/** Revokes a key; revoking a revoked key keeps its first revocation time. */
export async function revokeApiKey(db: Db, id: string, now: number): Promise<ApiKeyRecord> {
  await db
    .update(apiKeys)
    .set({ revokedAt: now })
    .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)));
  const [row] = await db.select(recordColumns).from(apiKeys).where(eq(apiKeys.id, id));
  if (!row) throw new ApiError('api_key_not_found', `No API key found with id '${id}'.`, { param: 'id' });
  return row;
}

/** The keys of one workspace, or of a whole organisation (its own keys and every workspace's). */
export async function listScopedApiKeys(
  db: Db,
  scope: { organisationId: string; workspaceId: string | null },
): Promise<ApiKeyRecord[]> {
  return db
    .select(recordColumns)
    .from(apiKeys)
    .where(
      scope.workspaceId === null
        ? eq(apiKeys.organisationId, scope.organisationId)
        : and(eq(apiKeys.organisationId, scope.organisationId), eq(apiKeys.workspaceId, scope.workspaceId)),
    )
    .orderBy(desc(apiKeys.createdAt), desc(apiKeys.id));
}

/**
 * Revokes a key the caller may manage: a workspace key, keys of its workspace; an organisation key,
 * any key of its organisation. Any other id is not found, so that the answer never tells whether
 * another tenant's key exists.
 */
export async function revokeScopedApiKey(
  db: Db,
  caller: AuthenticatedKey,
  id: string,
  now: number,
): Promise<ApiKeyRecord> {
  const [row] = await db.select(recordColumns).from(apiKeys).where(eq(apiKeys.id, id)).limit(1);
  const manageable =
    row !== undefined &&
    row.organisationId === caller.organisationId &&
    (caller.workspace === null || row.workspaceId === caller.workspace.id);
  if (!manageable) throw new ApiError('api_key_not_found', `No API key found with id '${id}'.`, { param: 'id' });
  return revokeApiKey(db, id, now);
}
