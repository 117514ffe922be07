import * as z from 'zod';

/**
 * Virtual keys: a workspace's stored provider credentials, selected per request by slug with
 * `x-gateway-virtual-key`. The API and the CLI validate with these same schemas.
 */

export const PROVIDERS = ['openai', 'azure-openai'] as const;
export type Provider = (typeof PROVIDERS)[number];

/** `openai` means any OpenAI-compatible Chat Completions server; this is OpenAI's own. */
export const DEFAULT_OPENAI_BASE_URL = 'https://api.openai.com/v1';

export const VIRTUAL_KEY_LIMITS = { slug: 64, baseUrl: 2048, apiKey: 4096 } as const;

const slug = z
  .string()
  .min(1)
  .max(VIRTUAL_KEY_LIMITS.slug)
  .regex(/^[a-z0-9][a-z0-9._-]*$/, {
    error: 'a slug starts with a lowercase letter or digit, followed by lowercase letters, digits, dots, underscores or hyphens.',
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

export const createVirtualKeyBody = z
  .strictObject({
    slug,
    provider: z.enum(PROVIDERS),
    /** Checked against the upstream rules by the service, which knows GATEWAY_ALLOW_PRIVATE_UPSTREAMS. */
    base_url: z.string().min(1).max(VIRTUAL_KEY_LIMITS.baseUrl).optional(),
    /** Some local servers ignore it but still need one: send any non-empty string ("none"). */
    api_key: z.string().min(1).max(VIRTUAL_KEY_LIMITS.apiKey),
    /** Azure OpenAI's `api-version` query parameter, e.g. `2024-10-21`. */
    api_version: urlSafe('An api_version').optional(),
    /** Azure OpenAI's deployment name (the model is chosen by the deployment). */
    deployment: urlSafe('A deployment name').optional(),
    /**
     * Azure OpenAI: the model the deployment serves, which rate-limit policies match and runs record
     * whatever model a request names. Default: the deployment's name.
     */
    model: z.string().min(1).max(256).optional(),
    /** Organisation keys name the workspace (id or slug); workspace keys may name their own. */
    workspace_id: z.string().min(1).max(255).optional(),
  })
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
    for (const field of AZURE_ONLY) {
      if (!azure && body[field] !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: [field],
          message: `Invalid '${field}': it applies to provider 'azure-openai' only.`,
          params: { code: 'unknown_parameter' },
        });
      }
    }
  });
export type CreateVirtualKeyBody = z.infer<typeof createVirtualKeyBody>;

const workspaceRef = z.string().min(1).max(255);

export const listVirtualKeysQuery = z.strictObject({
  workspace_id: workspaceRef.optional(),
  include_revoked: z
    .enum(['true', 'false'])
    .default('false')
    .transform((value) => value === 'true'),
});

export const revokeVirtualKeyQuery = z.strictObject({ workspace_id: workspaceRef.optional() });

/** A virtual key on the wire. The secret has no field here, so no mapper can leak it. */
export interface VirtualKeyJson {
  object: 'virtual_key';
  id: string;
  slug: string;
  provider: Provider;
  base_url: string;
  workspace_id: string;
  /** Unix seconds, like the Assistants objects. */
  created_at: number;
  revoked_at: number | null;
  api_version?: string;
  deployment?: string;
  /** Azure OpenAI: the model the deployment serves. */
  model?: string;
}
