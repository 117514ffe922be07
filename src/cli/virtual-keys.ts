import type * as z from 'zod';
import { validationError } from '../http/middleware/validate';
import { createVirtualKeyBody, updateVirtualKeyBody } from '../resources/virtual-keys/schemas';
import {
  createVirtualKey,
  listVirtualKeys,
  revokeVirtualKey,
  updateVirtualKey,
} from '../resources/virtual-keys/commands';
import type { VirtualKey } from '../db/schema';
import { upstreamRules } from '../resources/virtual-keys/upstream-rules';
import { listWorkspaces, type Workspace } from '../resources/identities/workspaces';
import { toVirtualKeyJson } from '../resources/virtual-keys/wire';
import { optionalString, requireString, UsageError, type CommandContext } from './command';
import { formatTable } from './output';

/**
 * The work of the commands for virtual keys (commands.ts lists them). `create` and `update` validate with the API's own schemas and
 * services, so the CLI and `POST /v1/virtual-keys[/{slug}]` accept and refuse the same things with
 * the same messages.
 */

/** A workspace by id or slug, in any organisation; a slug that several organisations use needs the id. */
export async function resolveWorkspace(ctx: CommandContext, ref: string): Promise<Workspace> {
  const matches = (await listWorkspaces(ctx.db)).filter((workspace) => workspace.id === ref || workspace.slug === ref);
  const [match, ...others] = matches;
  if (!match) throw new UsageError(`no workspace '${ref}' (see \`workspaces list\`)`);
  if (others.length > 0) throw new UsageError(`several organisations have a workspace '${ref}': pass its id`);
  return match;
}

/**
 * The provider's API key, from standard input or a named environment variable. Never from a flag:
 * command lines are kept in shell history and shown to other users by `ps`.
 */
async function readProviderKey(ctx: CommandContext): Promise<string>;
/** `optional`: neither source means no new key (an update that keeps the stored one). */
async function readProviderKey(ctx: CommandContext, optional: true): Promise<string | undefined>;
async function readProviderKey(ctx: CommandContext, optional = false): Promise<string | undefined> {
  if (ctx.values['api-key'] !== undefined) {
    throw new UsageError(
      '--api-key is not accepted: a key on the command line lands in shell history and process lists. ' +
        'Use --api-key-stdin or --api-key-env <NAME>.',
    );
  }
  const fromStdin = ctx.values['api-key-stdin'] === true;
  const variable = optionalString(ctx, 'api-key-env');
  if (fromStdin && variable !== undefined)
    throw new UsageError('pass only one of --api-key-stdin and --api-key-env <NAME>');
  if (fromStdin) return (await ctx.readStdin()).trim();
  if (variable === undefined) {
    if (optional) return undefined;
    throw new UsageError('pass exactly one of --api-key-stdin and --api-key-env <NAME>');
  }
  // What was given is never repeated: a key pasted where its variable's name belongs would go
  // from the shell's history to a terminal, a CI log or a ticket.
  if (!ENVIRONMENT_NAME.test(variable)) {
    throw new UsageError(
      '--api-key-env takes the name of an environment variable (letters, digits and underscores, such as OPENAI_API_KEY); ' +
        'what was given is not one, and is not shown here in case it is a key (if it was, it is in your shell history now: rotate it).',
    );
  }
  const value = ctx.env[variable];
  if (value === undefined) {
    throw new UsageError(
      'the environment variable that --api-key-env names is not set (its name is not shown here, in case it is a key)',
    );
  }
  return value;
}

/** A name a shell can export (POSIX: letters, digits and underscores, not starting with a digit). */
const ENVIRONMENT_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function tableRow(key: VirtualKey) {
  const json = toVirtualKeyJson(key);
  const iso = (seconds: number | null) => (seconds === null ? null : new Date(seconds * 1000).toISOString());
  return { ...json, created_at: iso(json.created_at), revoked_at: iso(json.revoked_at) };
}

const TABLE_COLUMNS = [
  'slug',
  'provider',
  'base_url',
  'models',
  'default',
  'workspace_id',
  'id',
  'created_at',
  'revoked_at',
];

/** `--models a,b*` (or `--fallbacks a,b`): the list, comma-separated; an empty value (`--models ''`) is the empty list. */
function listOption(ctx: CommandContext, name: 'models' | 'fallbacks'): string[] | undefined {
  const value = ctx.values[name];
  if (typeof value !== 'string') return undefined;
  return value
    .split(',')
    .map((pattern) => pattern.trim())
    .filter((pattern) => pattern !== '');
}

/** `--retry '{"attempts":3}'`: the API's `retry` object as JSON (its schema checks it), `null` for the defaults. */
function retryOption(ctx: CommandContext): unknown {
  const value = optionalString(ctx, 'retry');
  if (value === undefined) return undefined;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    throw new UsageError(`--retry takes a JSON object, such as '{"attempts":3}', or 'null'`);
  }
}

/** `--default` / `--no-default` (update only); neither leaves the key's default as it is. */
function defaultOption(ctx: CommandContext): boolean | undefined {
  const on = ctx.values.default === true;
  const off = ctx.values['no-default'] === true;
  if (on && off) throw new UsageError('pass only one of --default and --no-default');
  return on ? true : off ? false : undefined;
}

/** Validates CLI input with an API schema: a failure reads as the API's 400 would. */
function parseBody<Schema extends z.ZodType>(schema: Schema, input: Record<string, unknown>): z.infer<Schema> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) throw validationError(parsed.error.issues, input, 'json');
  return parsed.data;
}

/** What a person reads about a key's routing: the models it serves and whether it is the default. */
function routing(key: VirtualKey): string {
  const models = key.models.length === 0 ? '' : ` Runs of ${key.models.join(', ')} that name no key go to it.`;
  return `${models}${key.isDefault ? ' It is the default key of its workspace.' : ''}`;
}

/** The options shared by create and update, as the API's fields. */
function keyFields(ctx: CommandContext) {
  return {
    base_url: optionalString(ctx, 'base-url'),
    api_version: optionalString(ctx, 'api-version'),
    deployment: optionalString(ctx, 'deployment'),
    model: optionalString(ctx, 'model'),
    models: listOption(ctx, 'models'),
    fallbacks: listOption(ctx, 'fallbacks'),
    retry: retryOption(ctx),
  };
}

export async function createVirtualKeyCommand(ctx: CommandContext): Promise<void> {
  const apiKey = await readProviderKey(ctx);
  const workspace = await resolveWorkspace(ctx, requireString(ctx, 'workspace'));
  const body = parseBody(createVirtualKeyBody, {
    slug: optionalString(ctx, 'slug'),
    provider: optionalString(ctx, 'provider'),
    api_key: apiKey,
    ...keyFields(ctx),
    default: ctx.values.default === true ? true : undefined,
  });
  const key = await createVirtualKey(ctx.db, await ctx.secrets(), {
    workspaceId: workspace.id,
    body,
    upstreamRules: await upstreamRules(ctx.db, ctx.config, { now: ctx.now(), fresh: true }),
    maxKeys: ctx.config.GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE,
    now: ctx.now(),
  });
  ctx.print(
    ctx.json
      ? JSON.stringify(toVirtualKeyJson(key))
      : `Created virtual key '${key.slug}' (${key.provider}, ${key.baseUrl}) in workspace ${workspace.slug}.${routing(key)}\n` +
          `Send it as x-gateway-virtual-key: ${key.slug}\n`,
  );
}

export async function updateVirtualKeyCommand(ctx: CommandContext): Promise<void> {
  const slug = ctx.positionals[0];
  if (!slug) throw new UsageError('the slug of the virtual key to update is required');
  const apiKey = await readProviderKey(ctx, true);
  const workspace = await resolveWorkspace(ctx, requireString(ctx, 'workspace'));
  const body = parseBody(updateVirtualKeyBody, { api_key: apiKey, ...keyFields(ctx), default: defaultOption(ctx) });
  const key = await updateVirtualKey(ctx.db, await ctx.secrets(), {
    workspaceId: workspace.id,
    slug,
    body,
    upstreamRules: await upstreamRules(ctx.db, ctx.config, { now: ctx.now(), fresh: true }),
  });
  ctx.print(
    ctx.json
      ? JSON.stringify(toVirtualKeyJson(key))
      : `Updated virtual key '${key.slug}' (${key.provider}, ${key.baseUrl}) in workspace ${workspace.slug}.${routing(key)}\n`,
  );
}

export async function listVirtualKeysCommand(ctx: CommandContext): Promise<void> {
  const ref = optionalString(ctx, 'workspace');
  const keys = await listVirtualKeys(ctx.db, {
    workspaceId: ref === undefined ? undefined : (await resolveWorkspace(ctx, ref)).id,
    includeRevoked: ctx.values['include-revoked'] === true,
  });
  ctx.print(ctx.json ? JSON.stringify(keys.map(toVirtualKeyJson)) : formatTable(keys.map(tableRow), TABLE_COLUMNS));
}

export async function revokeVirtualKeyCommand(ctx: CommandContext): Promise<void> {
  const slug = ctx.positionals[0];
  if (!slug) throw new UsageError('the slug of the virtual key to revoke is required');
  const workspace = await resolveWorkspace(ctx, requireString(ctx, 'workspace'));
  const key = await revokeVirtualKey(ctx.db, workspace.id, slug, ctx.now());
  ctx.print(
    ctx.json
      ? JSON.stringify(toVirtualKeyJson(key))
      : `Revoked virtual key '${key.slug}' in workspace ${workspace.slug}.\n`,
  );
}
