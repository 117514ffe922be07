import * as z from 'zod';
import { everyOf, nullableSeconds, onDemand, seconds } from '../../http/objects';
import { PROVIDERS } from '../../providers/adapters';

/** Virtual keys as the API answers them (see http/objects.ts). */

export const virtualKeyObject = onDemand(() =>
  z
    .strictObject({
      object: z.literal('virtual_key'),
      id: z.string(),
      slug: z.string(),
      provider: z.enum(PROVIDERS),
      base_url: z.string(),
      workspace_id: z.string(),
      created_at: seconds,
      revoked_at: nullableSeconds,
      /** Azure OpenAI only: its API version, deployment, and the model the deployment serves. */
      api_version: z.string().optional(),
      deployment: z.string().optional(),
      model: z.string().optional(),
      /** Exact model names and `*` globs whose runs this key executes when they name no key. */
      models: z.array(z.string()),
      /** Whether this is the workspace's default key. */
      default: z.boolean(),
      /** Slugs of the keys a call moves to, in order, once this key's attempts failed. */
      fallbacks: z.array(z.string()),
      /** How calls with this key are tried again, every setting shown. */
      retry: z.strictObject({
        attempts: z.int(),
        on_statuses: z.array(z.int()),
        on_network_errors: z.boolean(),
        backoff_base_ms: z.int(),
        backoff_max_ms: z.int(),
        max_retry_after_ms: z.int(),
      }),
    })
    .meta({ id: 'VirtualKey' }),
);

/** GET /v1/virtual-keys: every key of the scope, in one page. */
export const virtualKeyList = everyOf(virtualKeyObject);

export type VirtualKeyObject = z.infer<ReturnType<typeof virtualKeyObject>>;
