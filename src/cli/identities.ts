import { createApiKey, listApiKeys, revokeApiKey, type ApiKeyRecord } from '../resources/identities/api-keys';
import { initialise, listOrganisations } from '../resources/identities/organisations';
import { createWorkspace, findWorkspace, listWorkspaces } from '../resources/identities/workspaces';
import { rotateEncryptionKey } from '../resources/identities/encryption-check';
import { CommandFailed, optionalString, requireString, UsageError, type CommandContext } from './command';
import { formatInitResult, formatTable } from './output';

/** The work of the commands for organisations, workspaces and API keys (commands.ts lists them). */

/** The organisation a command acts on: the one given, or the only one there is. */
export async function resolveOrganisation(ctx: CommandContext): Promise<string> {
  const given = optionalString(ctx, 'organisation');
  const organisations = await listOrganisations(ctx.db);
  if (given) {
    if (!organisations.some((org) => org.id === given)) throw new UsageError(`no organisation with id ${given}`);
    return given;
  }
  const [only, ...others] = organisations;
  if (!only) throw new UsageError('the database has no organisation yet: run `init` first');
  if (others.length === 0) return only.id;
  throw new UsageError('there are several organisations: pass --organisation <id>');
}

const apiKeyJson = (key: ApiKeyRecord) => ({
  id: key.id,
  kind: key.kind,
  name: key.name,
  prefix: key.prefix,
  organisation_id: key.organisationId,
  workspace_id: key.workspaceId,
  created_at: new Date(key.createdAt).toISOString(),
  revoked_at: key.revokedAt === null ? null : new Date(key.revokedAt).toISOString(),
});

export async function init(ctx: CommandContext): Promise<void> {
  const result = await initialise(ctx.db, ctx.now());
  if (result) return ctx.print(ctx.json ? JSON.stringify(result) : formatInitResult(result));
  // The keys were shown once and are not stored: the ids, and how to make new keys.
  const [organisation] = await listOrganisations(ctx.db);
  const workspaces = organisation ? await listWorkspaces(ctx.db, organisation.id) : [];
  const workspace = workspaces.find((candidate) => candidate.slug === 'default') ?? workspaces[0];
  const commands = [
    { command: `gateway api-keys create --workspace ${workspace?.slug ?? '<slug>'}`, makes: 'a workspace key' },
    { command: 'gateway api-keys create --organisation-key', makes: 'an organisation key' },
  ];
  const message =
    'Already initialised: nothing created. Its first API keys were shown once and are not stored; create new ones with the create_keys commands.';
  if (ctx.json) {
    ctx.print(
      JSON.stringify({
        already_initialised: true,
        organisation_id: organisation?.id ?? null,
        workspace_id: workspace?.id ?? null,
        workspace_slug: workspace?.slug ?? null,
        create_keys: commands.map(({ command }) => command),
        message,
      }),
    );
    return;
  }
  const width = Math.max(...commands.map(({ command }) => command.length));
  ctx.print(
    [
      'Already initialised: nothing created.',
      '',
      `  organisation_id  ${organisation?.id ?? '-'}`,
      `  workspace_id     ${workspace ? `${workspace.id} (slug: ${workspace.slug})` : '-'}`,
      '',
      'Its first API keys were shown once and are not stored. New ones (`npm run gateway -- …` from a checkout):',
      ...commands.map(({ command, makes }) => `  ${command.padEnd(width)}  ${makes}`),
      '',
    ].join('\n'),
  );
}

export async function createWorkspaceCommand(ctx: CommandContext): Promise<void> {
  const workspace = await createWorkspace(ctx.db, {
    organisationId: await resolveOrganisation(ctx),
    slug: requireString(ctx, 'slug'),
    name: optionalString(ctx, 'name'),
    now: ctx.now(),
  });
  const json = workspaceJson(workspace);
  ctx.print(ctx.json ? JSON.stringify(json) : formatTable([json], ['id', 'slug', 'name', 'organisation_id']));
}

export async function listWorkspacesCommand(ctx: CommandContext): Promise<void> {
  const rows = (await listWorkspaces(ctx.db, optionalString(ctx, 'organisation'))).map(workspaceJson);
  ctx.print(ctx.json ? JSON.stringify(rows) : formatTable(rows, ['id', 'slug', 'name', 'organisation_id']));
}

export async function createApiKeyCommand(ctx: CommandContext): Promise<void> {
  const organisationId = await resolveOrganisation(ctx);
  const workspaceRef = optionalString(ctx, 'workspace');
  const forOrganisation = ctx.values['organisation-key'] === true;
  if (!workspaceRef === !forOrganisation) {
    throw new UsageError('pass exactly one of --workspace <id|slug> and --organisation-key');
  }
  let workspaceId: string | null = null;
  if (workspaceRef) {
    const workspace = await findWorkspace(ctx.db, organisationId, workspaceRef);
    if (!workspace) throw new UsageError(`no workspace '${workspaceRef}' in organisation ${organisationId}`);
    workspaceId = workspace.id;
  }
  const { record, plaintext } = await createApiKey(ctx.db, {
    kind: forOrganisation ? 'organisation' : 'workspace',
    organisationId,
    workspaceId,
    name: optionalString(ctx, 'name') ?? '',
    now: ctx.now(),
  });
  const json = { ...apiKeyJson(record), key: plaintext };
  if (ctx.json) ctx.print(JSON.stringify(json));
  else {
    ctx.print(`Created ${record.kind} key ${record.id}. It is shown this once:\n\n  ${plaintext}\n\n`);
  }
}

export async function listApiKeysCommand(ctx: CommandContext): Promise<void> {
  const rows = (await listApiKeys(ctx.db, optionalString(ctx, 'organisation'))).map(apiKeyJson);
  ctx.print(
    ctx.json
      ? JSON.stringify(rows)
      : formatTable(rows, ['id', 'kind', 'prefix', 'name', 'workspace_id', 'created_at', 'revoked_at']),
  );
}

export async function revokeApiKeyCommand(ctx: CommandContext): Promise<void> {
  const id = ctx.positionals[0];
  if (!id) throw new UsageError('the id of the key to revoke is required');
  const key = apiKeyJson(await revokeApiKey(ctx.db, id, ctx.now()));
  ctx.print(ctx.json ? JSON.stringify(key) : `Revoked ${key.kind} key ${key.id} (${key.prefix}…).\n`);
}

function workspaceJson(workspace: {
  id: string;
  slug: string;
  name: string;
  organisationId: string;
  createdAt: number;
}) {
  return {
    id: workspace.id,
    slug: workspace.slug,
    name: workspace.name,
    organisation_id: workspace.organisationId,
    created_at: new Date(workspace.createdAt).toISOString(),
  };
}

/**
 * `encryption-key rotate`: the secrets under the previous key sealed under the current one. Exits 1
 * when some could not be moved: replaced meanwhile (run it again) or unreadable under both keys.
 */
export async function rotateEncryptionKeyCommand(ctx: CommandContext): Promise<void> {
  const secrets = await ctx.secrets();
  if (!secrets.rotating) {
    throw new UsageError(
      'set GATEWAY_ENCRYPTION_KEY_PREVIOUS to the key being replaced and GATEWAY_ENCRYPTION_KEY to the new one',
    );
  }
  const rotation = await rotateEncryptionKey(ctx.db, secrets);
  if (ctx.json) ctx.print(JSON.stringify(rotation));
  else {
    ctx.print(
      [
        `Resealed under the new key: ${rotation.resealed}; already under it: ${rotation.current}.`,
        ...(rotation.changed > 0
          ? [`Replaced while resealed, not moved: ${rotation.changed}; run the rotation again.`]
          : []),
        ...(rotation.unreadable.length > 0
          ? [`Opened under neither key, left as they are: ${rotation.unreadable.join(', ')}.`]
          : []),
      ].join('\n'),
    );
  }
  const left = rotation.changed + rotation.unreadable.length;
  if (left > 0)
    throw new CommandFailed(
      `${left} provider secret(s) not moved to the new key: keep GATEWAY_ENCRYPTION_KEY_PREVIOUS`,
    );
}
