import { and, count, desc, eq, inArray, isNull, sql, type SQL } from 'drizzle-orm';
import { preparedQuery, type Db } from '../db/client';
import { virtualKeys, workspaces } from '../db/schema';
import { ApiError } from '../errors';
import { newUuid } from '../lib/ids';
import type { SecretBox } from '../lib/secrets';
import { checkUpstreamUrl, type UpstreamUrlOptions } from '../lib/upstream-url';
import { DEFAULT_OPENAI_BASE_URL, type CreateVirtualKeyBody, type Provider } from '../schemas/virtual-keys';
import { insertWhere, quotaExceeded } from './quotas';

/**
 * Virtual keys: provider credentials stored per workspace. The provider's API key is kept only as
 * ciphertext bound to the key's id (see SecretBox) and is decrypted for the upstream call alone.
 */

export interface VirtualKey {
  id: string;
  workspaceId: string;
  slug: string;
  provider: Provider;
  /** Without a trailing slash: the provider adapter appends its endpoint path. */
  baseUrl: string;
  /**
   * Azure OpenAI: api_version, deployment and the model the deployment serves (stored since
   * `model` was added; the deployment's name stands in for it on older keys). Empty for `openai`.
   */
  options: { api_version?: string; deployment?: string; model?: string };
  secretCiphertext: string;
  createdAt: number;
  revokedAt: number | null;
}

type VirtualKeyRow = typeof virtualKeys.$inferSelect;

function fromRow(row: VirtualKeyRow): VirtualKey {
  return {
    id: row.id,
    workspaceId: row.workspaceId,
    slug: row.slug,
    provider: row.provider,
    baseUrl: row.baseUrl,
    options: { api_version: row.options.api_version, deployment: row.options.deployment, model: row.options.model },
    secretCiphertext: row.secretCiphertext,
    createdAt: row.createdAt,
    revokedAt: row.revokedAt,
  };
}

/**
 * The model a request through this key really reaches: an Azure deployment serves one model
 * whatever the request names (the key's `model`, by default its deployment's name), so that is the
 * model policies match and runs record; other providers take the request's.
 */
export function servedModel(key: VirtualKey, requested: string): string {
  if (key.provider !== 'azure-openai') return requested;
  return key.options.model ?? key.options.deployment ?? requested;
}

export interface CreateVirtualKeyInput {
  workspaceId: string;
  body: CreateVirtualKeyBody;
  /** The upstream address rules in force (services/upstream-rules.ts). */
  upstreamRules: UpstreamUrlOptions;
  /** GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE: the most live keys the workspace may hold. */
  maxKeys: number;
  now: number;
}

const liveIn = (workspaceId: string) => and(eq(virtualKeys.workspaceId, workspaceId), isNull(virtualKeys.revokedAt));

/**
 * Stores a new key; 409 `already_exists` when a live key of the workspace has the slug, 400
 * `quota_exceeded` when the workspace holds `maxKeys` live keys (checked in the insert itself).
 */
export async function createVirtualKey(db: Db, secrets: SecretBox, input: CreateVirtualKeyInput): Promise<VirtualKey> {
  const { body } = input;
  const baseUrl = checkBaseUrl(body.base_url ?? DEFAULT_OPENAI_BASE_URL, input.upstreamRules);
  const id = newUuid();
  const options: Record<string, string> =
    body.provider === 'azure-openai'
      ? { api_version: body.api_version!, deployment: body.deployment!, model: body.model ?? body.deployment! }
      : {};
  const values = {
    id,
    workspaceId: input.workspaceId,
    slug: body.slug,
    provider: body.provider,
    baseUrl,
    secretCiphertext: await secrets.encrypt(body.api_key, id),
    options,
    createdAt: input.now,
    revokedAt: null,
  };
  const live = sql`(SELECT count(*) FROM ${virtualKeys} WHERE ${liveIn(input.workspaceId)})`;
  const [row] = await insertWhere(db, virtualKeys, values, sql`${live} < ${input.maxKeys}`)
    // The partial unique index (workspace, slug) WHERE revoked_at IS NULL decides, race-free.
    .onConflictDoNothing()
    .returning();
  if (row) return fromRow(row);
  if (await findActiveVirtualKey(db, input.workspaceId, body.slug)) {
    throw new ApiError('already_exists', `A virtual key with slug '${body.slug}' already exists in this workspace.`, {
      param: 'slug',
    });
  }
  const [held] = await db.select({ count: count() }).from(virtualKeys).where(liveIn(input.workspaceId));
  throw quotaExceeded(
    `This workspace has ${held?.count ?? input.maxKeys} live virtual keys; its cap is ${input.maxKeys}. Revoke one before creating another.`,
  );
}

/** The base URL as stored, or 400 naming `base_url`. */
function checkBaseUrl(baseUrl: string, rules: UpstreamUrlOptions): string {
  const problem =
    checkUpstreamUrl(baseUrl, rules) ??
    (new URL(baseUrl).search !== '' ? 'the URL must not have a query string; the endpoint path is appended to it.' : null);
  if (problem) throw new ApiError('invalid_value', `Invalid 'base_url': ${problem}`, { param: 'base_url' });
  return baseUrl.replace(/\/+$/, '');
}

export interface VirtualKeyFilter {
  /** One workspace; otherwise every workspace of `organisationId`; neither: all keys (the CLI). */
  workspaceId?: string;
  organisationId?: string;
  includeRevoked?: boolean;
}

/** Newest first. */
export async function listVirtualKeys(db: Db, filter: VirtualKeyFilter): Promise<VirtualKey[]> {
  let scope: SQL | undefined;
  if (filter.workspaceId !== undefined) scope = eq(virtualKeys.workspaceId, filter.workspaceId);
  else if (filter.organisationId !== undefined) {
    scope = inArray(
      virtualKeys.workspaceId,
      db.select({ id: workspaces.id }).from(workspaces).where(eq(workspaces.organisationId, filter.organisationId)),
    );
  }
  const rows = await db
    .select()
    .from(virtualKeys)
    .where(and(scope, filter.includeRevoked ? undefined : isNull(virtualKeys.revokedAt)))
    // rowid is insertion order: it breaks ties between keys created in the same millisecond.
    .orderBy(desc(virtualKeys.createdAt), desc(sql`${virtualKeys}.rowid`));
  return rows.map(fromRow);
}

/** Revokes the workspace's live key with that slug; the slug is then free for a new key. */
export async function revokeVirtualKey(db: Db, workspaceId: string, slug: string, now: number): Promise<VirtualKey> {
  const [row] = await db
    .update(virtualKeys)
    .set({ revokedAt: now })
    .where(and(eq(virtualKeys.workspaceId, workspaceId), eq(virtualKeys.slug, slug), isNull(virtualKeys.revokedAt)))
    .returning();
  if (!row) {
    throw new ApiError('virtual_key_not_found', `No virtual key found with slug '${slug}' in this workspace.`, {
      param: 'slug',
    });
  }
  return fromRow(row);
}

/** The live key of the workspace with that slug: what `x-gateway-virtual-key` selects. */
const activeBySlug = preparedQuery((db) =>
  db
    .select()
    .from(virtualKeys)
    .where(
      and(
        eq(virtualKeys.workspaceId, sql.placeholder('workspaceId')),
        eq(virtualKeys.slug, sql.placeholder('slug')),
        isNull(virtualKeys.revokedAt),
      ),
    )
    .limit(1)
    .prepare(),
);

/**
 * The virtual key that executes a run (or answers for an assistant) of the workspace: the one the
 * x-gateway-virtual-key header names. Missing is 400 `missing_virtual_key`; unknown, revoked and
 * another workspace's are one 401 `invalid_virtual_key`, which does not repeat the slug, so other
 * workspaces' slugs cannot be probed. `model` is the model the run will use.
 */
export async function resolveVirtualKey(
  db: Db,
  workspaceId: string,
  request: { slug: string | undefined; model: string },
): Promise<VirtualKey> {
  if (!request.slug) {
    throw new ApiError('missing_virtual_key', `Missing required header: '${VIRTUAL_KEY_HEADER}' (a virtual key's slug).`, {
      param: VIRTUAL_KEY_HEADER,
    });
  }
  const key = await findActiveVirtualKey(db, workspaceId, request.slug);
  if (!key) {
    throw new ApiError('invalid_virtual_key', `The '${VIRTUAL_KEY_HEADER}' header names no live virtual key of this workspace.`, {
      param: VIRTUAL_KEY_HEADER,
    });
  }
  return key;
}

/** The header that names a virtual key by its slug. */
export const VIRTUAL_KEY_HEADER = 'x-gateway-virtual-key';

export async function findActiveVirtualKey(db: Db, workspaceId: string, slug: string): Promise<VirtualKey | null> {
  const [row] = await activeBySlug(db).all({ workspaceId, slug });
  return row ? fromRow(row) : null;
}

/** A key by id, revoked or not (a run keeps the id of its key; the caller checks `revokedAt`). */
export async function getVirtualKey(db: Db, id: string): Promise<VirtualKey | null> {
  const [row] = await db.select().from(virtualKeys).where(eq(virtualKeys.id, id)).limit(1);
  return row ? fromRow(row) : null;
}

/** The provider's API key, for the upstream request only: never log it or put it in a response. */
export function decryptVirtualKeySecret(secrets: SecretBox, key: VirtualKey): Promise<string> {
  return secrets.decrypt(key.secretCiphertext, key.id);
}
