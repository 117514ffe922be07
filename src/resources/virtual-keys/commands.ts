import { and, count, desc, eq, inArray, isNull, ne, or, sql, type SQL } from 'drizzle-orm';
import { insertWhere, preparedQuery, type Db } from '../../db/client';
import { runs, virtualKeys, workspaces, type VirtualKey } from '../../db/schema';
import { ApiError } from '../../errors';
import { VIRTUAL_KEY_HEADER } from '../../http/middleware/virtual-key';
import { newUuid } from '../../lib/ids';
import { closestModel, conflicts, globEnds, isGlob, matches, sharedModel, specificity } from '../../lib/model-patterns';
import type { SecretBox } from '../../lib/secrets';
import { checkUpstreamUrl, type UpstreamUrlOptions } from '../../lib/upstream-url';
import type { Deps } from '../../deps';
import type { Share } from '../../lib/fair-shares';
import { ADAPTERS } from '../../providers/adapters';
import { RETRY_DEFAULTS, type RetrySettings } from '../../providers/attempts';
import type { ChatCallOptions } from '../../providers/chat';
import {
  DEFAULT_OPENAI_BASE_URL,
  misplacedAzureField,
  type CreateVirtualKeyBody,
  type RetryBody,
  type UpdateVirtualKeyBody,
} from './schemas';
import { quotaExceeded } from '../identities/quotas';

/**
 * Virtual keys: provider credentials stored per workspace. The provider's API key is kept only as
 * ciphertext bound to the key's id (see SecretBox) and is decrypted for the upstream call alone.
 */

type VirtualKeyRow = typeof virtualKeys.$inferSelect;

function fromRow(row: VirtualKeyRow): VirtualKey {
  return {
    id: row.id,
    workspaceId: row.workspaceId,
    slug: row.slug,
    provider: row.provider,
    baseUrl: row.baseUrl,
    options: { api_version: row.options.api_version, deployment: row.options.deployment, model: row.options.model },
    models: row.models,
    isDefault: row.isDefault,
    fallbacks: row.fallbacks,
    retry: { ...RETRY_DEFAULTS, ...row.retry },
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
  /** The upstream address rules in force (resources/virtual-keys/upstream-rules.ts). */
  upstreamRules: UpstreamUrlOptions;
  /** GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE: the most live keys the workspace may hold. */
  maxKeys: number;
  now: number;
}

const liveIn = (workspaceId: string) => and(eq(virtualKeys.workspaceId, workspaceId), isNull(virtualKeys.revokedAt));

/**
 * Stores a new key; 409 `already_exists` when a live key of the workspace has the slug, 400
 * `quota_exceeded` when the workspace holds `maxKeys` live keys (checked in the insert itself),
 * 409 `ambiguous_models` when a pattern of `models` would tie with another key's. With
 * `default: true` it becomes the workspace's default key, in the same write that takes the
 * default from the key that had it.
 */
export async function createVirtualKey(db: Db, secrets: SecretBox, input: CreateVirtualKeyInput): Promise<VirtualKey> {
  const { body, workspaceId } = input;
  const baseUrl = checkBaseUrl(body.base_url ?? DEFAULT_OPENAI_BASE_URL, input.upstreamRules);
  const id = newUuid();
  let options: Record<string, string> = {};
  if (body.provider === 'azure-openai') {
    const { api_version, deployment } = body;
    // The body's schema requires both for azure-openai.
    if (api_version === undefined || deployment === undefined)
      throw new Error('An azure-openai key without api_version or deployment');
    options = { api_version, deployment, model: body.model ?? deployment };
  }
  const fallbacks = await checkFallbacks(db, workspaceId, body.slug, body.fallbacks ?? []);
  const values = {
    id,
    workspaceId,
    slug: body.slug,
    provider: body.provider,
    baseUrl,
    secretCiphertext: await secrets.encrypt(body.api_key, id),
    options,
    models: body.models ?? [],
    isDefault: false,
    fallbacks,
    retry: retrySettings(RETRY_DEFAULTS, body.retry),
    createdAt: input.now,
    revokedAt: null,
  };
  const live = sql`(SELECT count(*) FROM ${virtualKeys} WHERE ${liveIn(workspaceId)})`;
  return withPatternsChecked(db, workspaceId, { id, models: values.models }, async (noTies) => {
    const insert = insertWhere(db, virtualKeys, values, sql`${live} < ${input.maxKeys} AND ${noTies}`)
      // The partial unique index (workspace, slug) WHERE revoked_at IS NULL decides, race-free.
      .onConflictDoNothing()
      .returning();
    const row = body.default
      ? (
          await db.batch([
            insert,
            ...takeDefault(
              db,
              workspaceId,
              id,
              sql`EXISTS (SELECT 1 FROM ${virtualKeys} WHERE ${eq(virtualKeys.id, id)})`,
            ),
          ])
        )[2][0]
      : (await insert)[0];
    if (row) return fromRow(row);
    if (await findActiveVirtualKey(db, workspaceId, body.slug)) {
      throw new ApiError('already_exists', `A virtual key with slug '${body.slug}' already exists in this workspace.`, {
        param: 'slug',
      });
    }
    const [held] = await db.select({ count: count() }).from(virtualKeys).where(liveIn(workspaceId));
    if ((held?.count ?? 0) >= input.maxKeys) {
      throw quotaExceeded(
        `This workspace has ${held?.count ?? input.maxKeys} live virtual keys; its cap is ${input.maxKeys}. Revoke one before creating another.`,
      );
    }
    return null;
  });
}

/**
 * The two statements that make `id` the workspace's default key when `condition` holds: the key
 * that has the default loses it, then `id` takes it (the partial unique index allows one live
 * default per workspace, so the order matters). The second returns the key.
 */
function takeDefault(db: Db, workspaceId: string, id: string, condition: SQL) {
  return [
    db
      .update(virtualKeys)
      .set({ isDefault: false })
      .where(and(liveIn(workspaceId), eq(virtualKeys.isDefault, true), ne(virtualKeys.id, id), condition)),
    db
      .update(virtualKeys)
      .set({ isDefault: true })
      .where(and(eq(virtualKeys.id, id), condition))
      .returning(),
  ] as const;
}

export interface UpdateVirtualKeyInput {
  workspaceId: string;
  slug: string;
  body: UpdateVirtualKeyBody;
  upstreamRules: UpstreamUrlOptions;
}

/**
 * Changes the workspace's live key with that slug, which keeps its slug, id and provider: its
 * `base_url` (checked by the upstream rules, as at creation), `models` (409 `ambiguous_models` on a
 * tie with another key), `default`, the provider key (`api_key`, encrypted afresh) and Azure's
 * `api_version`, `deployment` and `model`. 404 `virtual_key_not_found` for no such live key.
 */
export async function updateVirtualKey(db: Db, secrets: SecretBox, input: UpdateVirtualKeyInput): Promise<VirtualKey> {
  const { body, workspaceId } = input;
  const key = await findActiveVirtualKey(db, workspaceId, input.slug);
  if (!key) throw virtualKeyNotFound(input.slug);
  const misplaced = misplacedAzureField(key.provider, body);
  if (misplaced) throw new ApiError('unknown_parameter', misplaced.message, { param: misplaced.field });

  const changes: Partial<typeof virtualKeys.$inferInsert> = {};
  if (body.base_url !== undefined) changes.baseUrl = checkBaseUrl(body.base_url, input.upstreamRules);
  if (body.api_key !== undefined) changes.secretCiphertext = await secrets.encrypt(body.api_key, key.id);
  if (body.api_version !== undefined || body.deployment !== undefined || body.model !== undefined) {
    changes.options = {
      ...key.options,
      ...(body.api_version === undefined ? {} : { api_version: body.api_version }),
      ...(body.deployment === undefined ? {} : { deployment: body.deployment }),
      ...(body.model === undefined ? {} : { model: body.model }),
    };
  }
  if (body.models !== undefined) changes.models = body.models;
  if (body.fallbacks !== undefined) changes.fallbacks = await checkFallbacks(db, workspaceId, key.slug, body.fallbacks);
  if (body.retry !== undefined) changes.retry = retrySettings(key.retry, body.retry);
  if (body.default === false) changes.isDefault = false;
  // Drizzle refuses an empty SET; rewriting the slug with itself changes nothing.
  if (Object.keys(changes).length === 0) changes.slug = key.slug;

  // Patterns that are not being changed are not checked again: rotating a key never waits on them.
  return withPatternsChecked(db, workspaceId, { id: key.id, models: body.models ?? [] }, async (noTies) => {
    const stillLive = sql`${virtualKeys.id} = ${key.id} AND ${virtualKeys.revokedAt} IS NULL AND ${noTies}`;
    const update = db.update(virtualKeys).set(changes).where(stillLive).returning();
    // The default moves first (one live default per workspace, by a unique index), and only if
    // the update is going to be made.
    const row = body.default
      ? (
          await db.batch([
            ...takeDefault(db, workspaceId, key.id, sql`EXISTS (SELECT 1 FROM ${virtualKeys} WHERE ${stillLive})`),
            update,
          ])
        )[2][0]
      : (await update)[0];
    if (row) return fromRow(row);
    if (!(await findActiveVirtualKey(db, workspaceId, input.slug))) throw virtualKeyNotFound(input.slug);
    return null;
  });
}

/** How often a write that a tying key stopped, which was then gone when looked for, is tried again. */
const PATTERN_ATTEMPTS = 5;

/**
 * Runs `write` once the key's `models` are known not to tie with any other live key's (409
 * `ambiguous_models` naming the other key and a model both would claim). `write` gets the
 * condition to put in its statement, noTiesWith: checked where the key is written, so that two
 * keys written at once cannot both pass. Only a key that would tie stops a write: keys with other
 * patterns, written meanwhile, do not. A `write` that returns null wrote nothing for want of that
 * condition: the check runs again, and names the key now in the way.
 */
async function withPatternsChecked(
  db: Db,
  workspaceId: string,
  key: { id: string; models: string[] },
  write: (noTies: SQL) => Promise<VirtualKey | null>,
): Promise<VirtualKey> {
  for (let attempt = 0; attempt < PATTERN_ATTEMPTS; attempt++) {
    // A key without patterns cannot tie: nothing to check.
    let condition = sql`1`;
    if (key.models.length > 0) {
      const others = await db
        .select({ id: virtualKeys.id, slug: virtualKeys.slug, models: virtualKeys.models })
        .from(virtualKeys)
        .where(and(liveIn(workspaceId), withModels));
      refuseTies(key, others);
      condition = noTiesWith(workspaceId, key);
    }
    const written = await write(condition);
    if (written) return written;
    // Nothing to check against: whatever stopped the write was the write's to report.
    if (key.models.length === 0) break;
  }
  throw new ApiError(
    'concurrent_update',
    "The workspace's virtual keys kept changing while this one was checked against them; try again.",
  );
}

const withModels = sql`${virtualKeys.models} <> '[]'`;

/** 409 for the first pattern of `key` that ties with a pattern of another key. */
function refuseTies(key: { id: string; models: string[] }, others: { id: string; slug: string; models: string[] }[]) {
  for (const [index, pattern] of key.models.entries()) {
    for (const other of others) {
      if (other.id === key.id) continue;
      const rival = other.models.find((theirs) => conflicts(pattern, theirs));
      if (rival === undefined) continue;
      const example = sharedModel(pattern, rival);
      throw new ApiError(
        'ambiguous_models',
        `'models[${index}]' ('${pattern}') and '${rival}' of virtual key '${other.slug}' are equally specific for ` +
          `model '${example}', so a run of it would have no single key. Make one of the two patterns more specific ` +
          `(an exact name beats any glob; a glob with more characters besides '*' beats one with fewer), or remove one.`,
        { param: `models[${index}]` },
      );
    }
  }
}

/** True while no live key of the workspace but `key` has a pattern that ties with one of `key.models`. */
function noTiesWith(workspaceId: string, key: { id: string; models: string[] }): SQL {
  const theirs = sql`"their_pattern"."value"`;
  const ties = sql.join(
    key.models.map((pattern) => tiesWith(pattern, theirs)),
    sql` OR `,
  );
  return sql`NOT EXISTS (SELECT 1 FROM ${virtualKeys}, json_each(${virtualKeys.models}) AS "their_pattern"
    WHERE ${liveIn(workspaceId)} AND ${virtualKeys.id} <> ${key.id} AND (${ties}))`;
}

/**
 * Whether the pattern `theirs` (an SQL text) ties with `pattern`: conflicts() of
 * lib/model-patterns.ts in SQL, for patterns of visible ASCII (resources/virtual-keys/schemas.ts), where
 * SQLite's length counts what JavaScript's does. An exact name ties with itself alone; a glob with
 * a glob of as many literal characters whose prefix (before its first `*`) and suffix (after its
 * last) agree with its own, one extending the other. rtrim(t, t's characters but `*`) is t up to
 * its last `*`: SQLite has no search from the right.
 */
export function tiesWith(pattern: string, theirs: SQL): SQL {
  if (!isGlob(pattern)) return sql`${theirs} = ${pattern}`;
  const [prefix, suffix] = globEnds(pattern);
  const theirPrefix = sql`substr(${theirs}, 1, instr(${theirs}, '*') - 1)`;
  const theirSuffix = sql`substr(${theirs}, length(rtrim(${theirs}, replace(${theirs}, '*', ''))) + 1)`;
  const prefixes =
    prefix === ''
      ? sql`1`
      : sql`(substr(${theirPrefix}, 1, ${prefix.length}) = ${prefix} OR substr(${prefix}, 1, length(${theirPrefix})) = ${theirPrefix})`;
  const suffixes =
    suffix === ''
      ? sql`1`
      : sql`(substr(${theirSuffix}, -${suffix.length}) = ${suffix} OR ${theirSuffix} = '' OR substr(${suffix}, -length(${theirSuffix})) = ${theirSuffix})`;
  return sql`(instr(${theirs}, '*') > 0 AND length(replace(${theirs}, '*', '')) = ${specificity(pattern)} AND ${prefixes} AND ${suffixes})`;
}

/**
 * A key's fallbacks as stored, or 400 naming the first at fault: the key itself, a slug that names
 * no live key of the workspace, or one whose own fallbacks (followed through theirs) lead back to
 * the key. Checked when written; a key revoked later is passed over when a call gets to it, and a
 * call follows its key's own list only, each key once, so even a cycle that concurrent writes made
 * ends (resources/virtual-keys/fallbacks.ts).
 */
async function checkFallbacks(db: Db, workspaceId: string, self: string, fallbacks: string[]): Promise<string[]> {
  if (fallbacks.length === 0) return fallbacks;
  const live = await db
    .select({ slug: virtualKeys.slug, fallbacks: virtualKeys.fallbacks })
    .from(virtualKeys)
    .where(liveIn(workspaceId));
  const next = new Map(live.map((key) => [key.slug, key.fallbacks]));
  next.set(self, fallbacks);
  for (const [index, slug] of fallbacks.entries()) {
    const param = `fallbacks[${index}]`;
    if (slug === self) {
      throw new ApiError('invalid_value', `Invalid '${param}': a virtual key cannot fall back to itself.`, { param });
    }
    if (!live.some((key) => key.slug === slug)) {
      throw new ApiError('invalid_value', `Invalid '${param}': no live virtual key '${slug}' in this workspace.`, {
        param,
      });
    }
    const cycle = pathTo(next, slug, self);
    if (cycle) {
      throw new ApiError(
        'invalid_value',
        `Invalid '${param}': '${slug}' falls back to this key (${[self, ...cycle].join(' → ')}), a cycle.`,
        { param },
      );
    }
  }
  return fallbacks;
}

/** The slugs from `from` to `to` along the keys' fallbacks (depth first, each key once), or null. */
function pathTo(next: Map<string, string[]>, from: string, to: string): string[] | null {
  const seen = new Set<string>();
  const walk = (slug: string): string[] | null => {
    if (slug === to) return [slug];
    if (seen.has(slug)) return null;
    seen.add(slug);
    for (const fallback of next.get(slug) ?? []) {
      const path = walk(fallback);
      if (path) return [slug, ...path];
    }
    return null;
  };
  return walk(from);
}

/** `body` over `current` (null: the defaults), or 400 when the backoff's base exceeds its maximum. */
function retrySettings(current: RetrySettings, body: RetryBody | undefined): RetrySettings {
  if (body === undefined) return current;
  const settings =
    body === null
      ? RETRY_DEFAULTS
      : {
          attempts: body.attempts ?? current.attempts,
          on_statuses: body.on_statuses ?? current.on_statuses,
          on_network_errors: body.on_network_errors ?? current.on_network_errors,
          backoff_base_ms: body.backoff_base_ms ?? current.backoff_base_ms,
          backoff_max_ms: body.backoff_max_ms ?? current.backoff_max_ms,
          max_retry_after_ms: body.max_retry_after_ms ?? current.max_retry_after_ms,
        };
  if (settings.backoff_base_ms > settings.backoff_max_ms) {
    throw new ApiError(
      'invalid_value',
      `Invalid 'retry.backoff_base_ms': ${settings.backoff_base_ms} is over retry.backoff_max_ms (${settings.backoff_max_ms}).`,
      { param: 'retry.backoff_base_ms' },
    );
  }
  return settings;
}

/** The base URL as stored, or 400 naming `base_url`. */
function checkBaseUrl(baseUrl: string, rules: UpstreamUrlOptions): string {
  const problem =
    checkUpstreamUrl(baseUrl, rules) ??
    (new URL(baseUrl).search !== ''
      ? 'the URL must not have a query string; the endpoint path is appended to it.'
      : null);
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
  if (!row) throw virtualKeyNotFound(slug);
  return fromRow(row);
}

const virtualKeyNotFound = (slug: string) =>
  new ApiError('virtual_key_not_found', `No virtual key found with slug '${slug}' in this workspace.`, {
    param: 'slug',
  });

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
 * The live keys of the workspace that a run naming no key could go to: those with `models`, and
 * the default. One read on the partial index (workspace, slug) of live keys.
 */
const routableKeys = preparedQuery((db) =>
  db
    .select()
    .from(virtualKeys)
    .where(
      and(
        eq(virtualKeys.workspaceId, sql.placeholder('workspaceId')),
        isNull(virtualKeys.revokedAt),
        or(eq(virtualKeys.isDefault, true), withModels),
      ),
    )
    .prepare(),
);

/**
 * The virtual key that executes a run (or answers for an assistant) of the workspace, whose model
 * is `model`, in this order:
 *   1. the key that the x-gateway-virtual-key header names (`slug`): unknown, revoked and another
 *      workspace's are one 401 `invalid_virtual_key`, which does not repeat the slug, so other
 *      workspaces' slugs cannot be probed;
 *   2. else the key whose `models` match `model` most specifically (chooseVirtualKey);
 *   3. else the workspace's default key.
 * None: 400 `missing_virtual_key`, saying the three ways to configure one. One query either way.
 */
export async function resolveVirtualKey(
  db: Db,
  workspaceId: string,
  request: { slug: string | undefined; model: string },
): Promise<VirtualKey> {
  return (await virtualKeyChooser(db, workspaceId, request.slug))(request.model);
}

/**
 * resolveVirtualKey in two steps, for a caller that learns the model from a read made beside the
 * keys' (a vector store's embeddings model: one round trip for both): the one query, then the
 * choice for a model, which throws resolveVirtualKey's errors.
 */
export async function virtualKeyChooser(
  db: Db,
  workspaceId: string,
  slug: string | undefined,
): Promise<(model: string) => VirtualKey> {
  if (slug) {
    const key = await findActiveVirtualKey(db, workspaceId, slug);
    return () => {
      if (key) return key;
      throw new ApiError(
        'invalid_virtual_key',
        `The '${VIRTUAL_KEY_HEADER}' header names no live virtual key of this workspace.`,
        { param: VIRTUAL_KEY_HEADER },
      );
    };
  }
  const keys = (await routableKeys(db).all({ workspaceId })).map(fromRow);
  return (model) => {
    const key = chooseVirtualKey(keys, model);
    if (!key) throw new ApiError('missing_virtual_key', unservedModel(model, keys), { param: VIRTUAL_KEY_HEADER });
    return key;
  };
}

/** What the workspace's patterns a message lists, at most; the rest are counted. */
const LISTED_PATTERNS = 20;

/**
 * The 400 for a model that no key serves and no default takes: first what the workspace serves and
 * the closest of it (most such requests are typos), then how to route the model as it is.
 */
function unservedModel(model: string, keys: readonly VirtualKey[]): string {
  const patterns = [...new Set(keys.flatMap((key) => key.models))];
  const closest = closestModel(model, patterns);
  const listed = patterns
    .slice(0, LISTED_PATTERNS)
    .map((pattern) => `'${pattern}'`)
    .join(', ');
  const more = patterns.length > LISTED_PATTERNS ? ` and ${patterns.length - LISTED_PATTERNS} more` : '';
  const served =
    patterns.length === 0
      ? ' No virtual key of this workspace names models, and none is its default.'
      : ` Its virtual keys serve ${listed}${more}.`;
  return (
    `No virtual key of this workspace serves model '${model}'.${closest === null ? '' : ` Did you mean '${closest}'?`}${served} ` +
    `To run '${model}' as it is: name a key in the '${VIRTUAL_KEY_HEADER}' header, ` +
    `add the model to a key's models (POST /v1/virtual-keys/{slug} with {"models":[…,"${model}"]}), ` +
    `or make a key the workspace's default ({"default":true}).`
  );
}

/**
 * Of a workspace's live keys, the one for a run of `model` that names none: the key with the most
 * specific pattern matching `model` (lib/model-patterns.ts: an exact name, else the glob with the
 * most literal characters), else the default key, else null. Keys are written so that no two tie
 * (ambiguous_models); a tie that plain SQL made anyway is refused rather than settled by chance.
 */
export function chooseVirtualKey(keys: readonly VirtualKey[], model: string): VirtualKey | null {
  let best: { key: VirtualKey; score: number } | null = null;
  let tied: VirtualKey | null = null;
  for (const key of keys) {
    const score = Math.max(-1, ...key.models.filter((pattern) => matches(pattern, model)).map(specificity));
    if (score < 0) continue;
    if (best === null || score > best.score) {
      best = { key, score };
      tied = null;
    } else if (score === best.score) {
      tied = key;
    }
  }
  if (best && tied) {
    throw new ApiError(
      'ambiguous_models',
      `Virtual keys '${best.key.slug}' and '${tied.slug}' match model '${model}' equally specifically; ` +
        `change the models of one of them, or name a key in the '${VIRTUAL_KEY_HEADER}' header.`,
      { param: VIRTUAL_KEY_HEADER },
    );
  }
  return best?.key ?? keys.find((key) => key.isDefault) ?? null;
}

/** The header that names a virtual key by its slug. */

export async function findActiveVirtualKey(db: Db, workspaceId: string, slug: string): Promise<VirtualKey | null> {
  const [row] = await activeBySlug(db).all({ workspaceId, slug });
  return row ? fromRow(row) : null;
}

/** A key by id, revoked or not (a run keeps the id of its key; the caller checks `revokedAt`). */
export async function getVirtualKey(db: Db, id: string): Promise<VirtualKey | null> {
  const [row] = await keyById(db).all({ id });
  return row ? fromRow(row) : null;
}

// Prepared: read by every later turn of a run.
const keyById = preparedQuery((db) =>
  db
    .select()
    .from(virtualKeys)
    .where(eq(virtualKeys.id, sql.placeholder('id')))
    .limit(1)
    .prepare(),
);

/**
 * The key of run `runId`, revoked or not (as getVirtualKey): by the run's id, so that it is read
 * beside the run itself, in the same round trip (a submission of tool outputs). Null when there
 * is no such run, or its key is gone.
 */
export async function getRunVirtualKey(db: Db, runId: string): Promise<VirtualKey | null> {
  const [row] = await keyOfRun(db).all({ runId });
  return row ? fromRow(row) : null;
}

// Prepared: read by every submission of tool outputs.
const keyOfRun = preparedQuery((db) =>
  db
    .select()
    .from(virtualKeys)
    .where(
      eq(
        virtualKeys.id,
        sql`(SELECT ${runs.virtualKeyId} FROM ${runs} WHERE ${runs.id} = ${sql.placeholder('runId')})`,
      ),
    )
    .limit(1)
    .prepare(),
);

/** The provider's API key, for the upstream request only: never log it or put it in a response. */
export function decryptVirtualKeySecret(secrets: SecretBox, key: VirtualKey): Promise<string> {
  return secrets.decrypt(key.secretCiphertext, key.id);
}

/**
 * How a provider call is made with `key` (providers/chat.ts openChatCall), its `secret` decrypted:
 * the key's provider, base URL and options, the gateway's timeouts, and the fair `share` it took
 * (its wait counts against the first-byte timeout), aborted by `signal`. A run's turn and a
 * passed-through call make theirs alike.
 */
export function chatCallOptions(
  deps: Pick<Deps, 'config' | 'fetch' | 'slices' | 'metrics'>,
  key: VirtualKey,
  secret: string,
  share: Share,
  signal: AbortSignal,
): ChatCallOptions {
  return {
    fetch: deps.fetch,
    adapter: ADAPTERS[key.provider],
    baseUrl: key.baseUrl,
    options: key.options,
    secret,
    firstByteTimeoutMs: deps.config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
    queuedMs: share.waitedMs,
    sent: share.sent,
    idleTimeoutMs: deps.config.GATEWAY_UPSTREAM_IDLE_TIMEOUT_MS,
    signal,
    slices: deps.slices,
    timer: () => deps.metrics.providerCall(key.id),
  };
}
