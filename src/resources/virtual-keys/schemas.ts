import * as z from 'zod';
import { PROVIDERS, type Provider } from '../../providers/adapters';
import { RETRY_LIMITS } from '../../providers/attempts';

/**
 * Virtual keys: a workspace's stored provider credentials, selected per run by slug with
 * `x-gateway-virtual-key`, else by the run's model (`models`), else the workspace's `default`
 * (resources/virtual-keys/commands.ts, resolveVirtualKey). The API and the CLI validate with these same schemas.
 */

/** `openai` means any OpenAI-compatible Chat Completions server; this is OpenAI's own. */
export const DEFAULT_OPENAI_BASE_URL = 'https://api.openai.com/v1';

export const VIRTUAL_KEY_LIMITS = { slug: 64, baseUrl: 2048, apiKey: 4096, models: 32, modelPattern: 256 } as const;

const slug = z
  .string()
  .min(1)
  .max(VIRTUAL_KEY_LIMITS.slug)
  .regex(/^[a-z0-9][a-z0-9._-]*$/, {
    error:
      'a slug starts with a lowercase letter or digit, followed by lowercase letters, digits, dots, underscores or hyphens.',
  });

// Both end up in the upstream URL (a query value and a path segment), so they stay URL-safe.
const urlSafe = (what: string) =>
  z
    .string()
    .min(1)
    .max(64)
    .regex(/^[A-Za-z0-9._-]+$/, { error: `${what} has letters, digits, dots, underscores and hyphens only.` })
    .refine((value) => value !== '.' && value !== '..', { error: `${what} cannot be '.' or '..'.` });

/** What Azure OpenAI needs besides the key. */
const AZURE_FIELDS = ['base_url', 'api_version', 'deployment'] as const;
/** What only Azure OpenAI takes. */
const AZURE_ONLY = ['api_version', 'deployment', 'model'] as const;

/**
 * The first Azure-only field sent for another provider, with the message that refuses it: the
 * create schema and the update (which learns the provider from the stored key) say the same.
 */
export function misplacedAzureField(
  provider: Provider,
  body: Partial<Record<(typeof AZURE_ONLY)[number], unknown>>,
): { field: string; message: string } | null {
  if (provider === 'azure-openai') return null;
  const field = AZURE_ONLY.find((name) => body[name] !== undefined);
  return field ? { field, message: `Invalid '${field}': it applies to provider 'azure-openai' only.` } : null;
}

/**
 * Exact model names or `*` globs (lib/model-patterns.ts), visible ASCII without spaces, each listed
 * once. Conflicts with other keys' patterns are the service's to find: they need the database.
 */
const modelPatterns = z
  .array(
    z
      .string()
      .min(1)
      .max(VIRTUAL_KEY_LIMITS.modelPattern)
      .regex(/^[\x21-\x7e]+$/, {
        error: 'a model pattern has visible ASCII characters only, no spaces; `*` matches any characters.',
      }),
  )
  .max(VIRTUAL_KEY_LIMITS.models)
  .superRefine((patterns, ctx) => {
    const seen = new Set<string>();
    for (const [index, pattern] of patterns.entries()) {
      if (seen.has(pattern)) {
        ctx.addIssue({
          code: 'custom',
          path: [index],
          message: `Invalid 'models[${index}]': '${pattern}' is listed twice.`,
        });
      }
      seen.add(pattern);
    }
  });

/**
 * The keys a call moves to once this one's attempts failed, in order: slugs of the workspace's live
 * keys, each once. That they exist, are not the key itself and make no cycle is the service's to
 * check: it needs the database.
 */
const fallbacks = z
  .array(slug)
  .max(RETRY_LIMITS.fallbacks)
  .superRefine((slugs, ctx) => {
    for (const [index, name] of slugs.entries()) {
      if (slugs.indexOf(name) !== index) {
        ctx.addIssue({
          code: 'custom',
          path: [index],
          message: `Invalid 'fallbacks[${index}]': '${name}' is listed twice.`,
        });
      }
    }
  });

const milliseconds = (max: number) => z.int().min(0).max(max);

/**
 * How calls with the key are tried again (providers/attempts.ts): what is not sent takes its
 * default on create and stays as it was on update; null restores every default.
 */
const retry = z
  .strictObject({
    attempts: z.int().min(1).max(RETRY_LIMITS.attempts).optional(),
    on_statuses: z
      .array(z.int().min(400).max(599))
      .max(RETRY_LIMITS.statuses)
      .refine((statuses) => new Set(statuses).size === statuses.length, { error: 'a status is listed twice.' })
      .optional(),
    on_network_errors: z.boolean().optional(),
    backoff_base_ms: milliseconds(RETRY_LIMITS.backoffMs).optional(),
    backoff_max_ms: milliseconds(RETRY_LIMITS.backoffMs).optional(),
    max_retry_after_ms: milliseconds(RETRY_LIMITS.retryAfterMs).optional(),
  })
  .nullable();
export type RetryBody = z.infer<typeof retry>;

/** Fields that a key is created with and that an update may change. */
const changeable = {
  /** Checked against the upstream rules by the service, which knows GATEWAY_ALLOW_PRIVATE_UPSTREAMS. */
  base_url: z.string().min(1).max(VIRTUAL_KEY_LIMITS.baseUrl).optional(),
  /** Azure OpenAI's `api-version` query parameter, e.g. `2024-10-21`. */
  api_version: urlSafe('An api_version').optional(),
  /** Azure OpenAI's deployment name (the model is chosen by the deployment). */
  deployment: urlSafe('A deployment name').optional(),
  /**
   * Azure OpenAI: the model the deployment serves, which rate-limit policies match and runs record
   * whatever model a request names. Default: the deployment's name.
   */
  model: z.string().min(1).max(256).optional(),
  /** The models whose runs this key executes when they name no key (lib/model-patterns.ts). */
  models: modelPatterns.optional(),
  /** The workspace's fallback key for runs that name no key and match no `models`; one at most. */
  default: z.boolean().optional(),
  /** Slugs of the workspace's keys a call moves to, in order, once this key's attempts failed. */
  fallbacks: fallbacks.optional(),
  retry: retry.optional(),
  /** Organisation keys name the workspace (id or slug); workspace keys may name their own. */
  workspace_id: z.string().min(1).max(255).optional(),
};

/** Some local servers ignore it but still need one: send any non-empty string ("none"). */
const apiKey = z.string().min(1).max(VIRTUAL_KEY_LIMITS.apiKey);

export const createVirtualKeyBody = z
  .strictObject({ slug, provider: z.enum(PROVIDERS), api_key: apiKey, ...changeable })
  .superRefine((body, ctx) => {
    const azure = body.provider === 'azure-openai';
    for (const field of AZURE_FIELDS) {
      if (azure && body[field] === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: [field],
          message: `Missing required parameter: '${field}'. Provider 'azure-openai' needs ${AZURE_FIELDS.join(', ')}.`,
          params: { code: 'missing_required_parameter' },
        });
      }
    }
    const misplaced = misplacedAzureField(body.provider, body);
    if (misplaced) {
      ctx.addIssue({
        code: 'custom',
        path: [misplaced.field],
        message: misplaced.message,
        params: { code: 'unknown_parameter' },
      });
    }
  });
export type CreateVirtualKeyBody = z.infer<typeof createVirtualKeyBody>;

/**
 * `POST /v1/virtual-keys/{slug}`: any of the changeable fields, and `api_key` to rotate the
 * provider key. The slug and the provider are fixed (unknown parameters here); the Azure-only
 * fields are checked against the stored key's provider by the service.
 */
export const updateVirtualKeyBody = z.strictObject({ api_key: apiKey.optional(), ...changeable });
export type UpdateVirtualKeyBody = z.infer<typeof updateVirtualKeyBody>;

const workspaceRef = z.string().min(1).max(255);

export const listVirtualKeysQuery = z.strictObject({
  workspace_id: workspaceRef.optional(),
  include_revoked: z
    .enum(['true', 'false'])
    .default('false')
    .transform((value) => value === 'true'),
});

export const revokeVirtualKeyQuery = z.strictObject({ workspace_id: workspaceRef.optional() });
