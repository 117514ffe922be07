import type { Command, ServerCommand } from './command';

/**
 * Every command of the CLI: its name, usage, summary and options, which are what help shows and
 * what parsing needs. Its work is in the module of its group, imported only when it runs: help and
 * usage mistakes never load the database, zod or the services (each a few tens of milliseconds,
 * several times that on a busy machine).
 */

const identities = () => import('./identities');
const virtualKeys = () => import('./virtual-keys');
const usage = () => import('./usage');
const sandbox = () => import('./sandbox');

const organisationOption = { organisation: { type: 'string', short: 'o' } } as const;
const workspaceOption = { workspace: { type: 'string', short: 'w' } } as const;

/** The options `virtual-keys create` and `update` share, read by virtual-keys.ts's keyFields. */
const keyOptions = {
  'base-url': { type: 'string' },
  'api-version': { type: 'string' },
  deployment: { type: 'string' },
  model: { type: 'string' },
  models: { type: 'string' },
  fallbacks: { type: 'string' },
  retry: { type: 'string' },
  'api-key-stdin': { type: 'boolean' },
  'api-key-env': { type: 'string' },
  // Accepted only to be refused with an explanation.
  'api-key': { type: 'string' },
} as const;

export const commands: (Command | ServerCommand)[] = [
  {
    name: 'init',
    usage: 'init [--json]',
    summary: 'Create the first organisation, its default workspace and two API keys (once).',
    run: async (ctx) => (await identities()).init(ctx),
  },
  {
    name: 'workspaces create',
    usage: 'workspaces create --slug <slug> [--name <name>] [--organisation <id>] [--json]',
    summary: 'Create a workspace in an organisation.',
    options: { slug: { type: 'string' }, name: { type: 'string' }, ...organisationOption },
    run: async (ctx) => (await identities()).createWorkspaceCommand(ctx),
  },
  {
    name: 'workspaces list',
    usage: 'workspaces list [--organisation <id>] [--json]',
    summary: 'List workspaces.',
    options: organisationOption,
    run: async (ctx) => (await identities()).listWorkspacesCommand(ctx),
  },
  {
    name: 'api-keys create',
    usage:
      'api-keys create (--workspace <id|slug> | --organisation-key) [--name <name>] [--organisation <id>] [--json]',
    summary: 'Create an API key for a workspace, or an organisation key. The key is printed once.',
    options: {
      ...workspaceOption,
      'organisation-key': { type: 'boolean' },
      name: { type: 'string' },
      ...organisationOption,
    },
    run: async (ctx) => (await identities()).createApiKeyCommand(ctx),
  },
  {
    name: 'api-keys list',
    usage: 'api-keys list [--organisation <id>] [--json]',
    summary: 'List API keys (their prefixes; the keys themselves are not stored).',
    options: organisationOption,
    run: async (ctx) => (await identities()).listApiKeysCommand(ctx),
  },
  {
    name: 'api-keys revoke',
    usage: 'api-keys revoke <id> [--json]',
    summary: 'Revoke an API key: it stops working at once.',
    run: async (ctx) => (await identities()).revokeApiKeyCommand(ctx),
  },
  {
    name: 'virtual-keys create',
    usage:
      'virtual-keys create --workspace <id|slug> --slug <slug> --provider openai|azure-openai ' +
      '[--base-url <url>] [--api-version <v>] [--deployment <d>] [--model <m>] [--models <a,b*>] [--default] ' +
      "[--fallbacks <slug,slug>] [--retry '<json>'] (--api-key-stdin | --api-key-env <NAME>) [--json]",
    summary:
      "Store a provider's credentials in a workspace under a slug (x-gateway-virtual-key). The provider key is " +
      'read from standard input or from the environment variable NAME, never from a flag (shell history). ' +
      '--models: the models (exact names, * globs) whose runs go to it when they name no key; --default: the ' +
      "workspace's fallback key; --fallbacks: the keys a failed call moves to, in order; --retry: its retry " +
      'settings as the API takes them (docs/virtual-keys.md).',
    options: {
      ...workspaceOption,
      slug: { type: 'string' },
      provider: { type: 'string' },
      default: { type: 'boolean' },
      ...keyOptions,
    },
    run: async (ctx) => (await virtualKeys()).createVirtualKeyCommand(ctx),
  },
  {
    name: 'virtual-keys update',
    usage:
      'virtual-keys update --workspace <id|slug> <slug> [--base-url <url>] [--models <a,b*>] [--default | --no-default] ' +
      '[--api-key-stdin | --api-key-env <NAME>] [--api-version <v>] [--deployment <d>] [--model <m>] ' +
      "[--fallbacks <slug,slug>] [--retry '<json>'] [--json]",
    summary:
      'Change a virtual key, keeping its slug: its base URL, its models (--models "" clears them), whether it is ' +
      "the workspace's default, its provider key (rotated: from standard input or NAME, never a flag), and " +
      'Azure\'s api-version, deployment and model, its fallbacks (--fallbacks "" clears them) and retry settings ' +
      "(--retry 'null' restores the defaults).",
    options: { ...workspaceOption, default: { type: 'boolean' }, 'no-default': { type: 'boolean' }, ...keyOptions },
    run: async (ctx) => (await virtualKeys()).updateVirtualKeyCommand(ctx),
  },
  {
    name: 'virtual-keys list',
    usage: 'virtual-keys list [--workspace <id|slug>] [--include-revoked] [--json]',
    summary: 'List virtual keys, newest first (never their secrets).',
    options: { ...workspaceOption, 'include-revoked': { type: 'boolean' } },
    run: async (ctx) => (await virtualKeys()).listVirtualKeysCommand(ctx),
  },
  {
    name: 'virtual-keys revoke',
    usage: 'virtual-keys revoke --workspace <id|slug> <slug> [--json]',
    summary: 'Revoke a virtual key: runs can no longer use it, and its slug is free again.',
    options: workspaceOption,
    run: async (ctx) => (await virtualKeys()).revokeVirtualKeyCommand(ctx),
  },
  {
    name: 'usage',
    usage:
      'usage [--workspace <id|slug>] [--organisation <id>] [--since <date>] [--until <date>] [--bucket 1d|1h] ' +
      '[--group-by model,api_key_id,virtual_key,workspace_id,kind] [--limit <buckets>] [--json]',
    summary: "Tokens and requests per day or hour (GET /v1/usage): a workspace's, or its organisation's.",
    options: {
      ...workspaceOption,
      since: { type: 'string' },
      until: { type: 'string' },
      bucket: { type: 'string' },
      'group-by': { type: 'string' },
      limit: { type: 'string' },
      ...organisationOption,
    },
    run: async (ctx) => (await usage()).usageCommand(ctx),
  },
  {
    name: 'sandbox',
    usage: 'sandbox [--host <address>] [--port <port>]',
    summary:
      "Serve code_interpreter's sandbox over HTTP (docs/sandbox.md) for gateways without one of their own " +
      '(Workers, Node without bubblewrap), on HOST and PORT unless given; callers send GATEWAY_SANDBOX_SECRET, ' +
      'which must be set. Needs bubblewrap and Python with numpy, pandas and matplotlib; opens no database.',
    options: { host: { type: 'string' }, port: { type: 'string' } },
    serve: async (ctx) => (await sandbox()).serveSandbox(ctx),
  },
  {
    name: 'encryption-key rotate',
    usage: 'encryption-key rotate [--json]',
    summary:
      'Seal every provider secret sealed under GATEWAY_ENCRYPTION_KEY_PREVIOUS under GATEWAY_ENCRYPTION_KEY, then the ' +
      'check value (docs/operations.md says when). Exits 1 if a secret could not be moved.',
    run: async (ctx) => (await identities()).rotateEncryptionKeyCommand(ctx),
  },
  {
    name: 'migrate',
    usage: 'migrate [--json]',
    summary: 'Apply the migrations in drizzle/ to the database (done by every command too).',
    async run(ctx) {
      ctx.print(ctx.json ? JSON.stringify({ migrated: true }) : 'Database migrated.\n');
    },
  },
];
