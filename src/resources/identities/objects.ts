import * as z from 'zod';
import { everyOf, nullableSeconds, onDemand, seconds } from '../../http/objects';

/** Workspaces and API keys as the API answers them (see http/objects.ts). */

export const workspaceObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('workspace'),
      organisation_id: z.string(),
      slug: z.string(),
      name: z.string(),
      created_at: seconds,
    })
    .meta({ id: 'Workspace' }),
);

/** GET /v1/workspaces: every workspace the key may act on. */
export const workspaceList = everyOf(workspaceObject);

/** An API key as listed: never the key, only the prefix it is recognised by. */
export const apiKeyObject = onDemand(() =>
  z
    .strictObject({
      id: z.string(),
      object: z.literal('api_key'),
      kind: z.enum(['organisation', 'workspace']),
      name: z.string(),
      /** The key's first characters: enough to recognise it, never to use it. */
      prefix: z.string(),
      /** Null for an organisation key. */
      workspace_id: z.string().nullable(),
      created_at: seconds,
      revoked_at: nullableSeconds,
    })
    .meta({ id: 'ApiKey' }),
);

export const apiKeyList = everyOf(apiKeyObject);

/** POST /v1/api-keys: the new key, with its secret (`key`) shown this once. */
export const createdApiKey = onDemand(() => apiKeyObject().extend({ key: z.string() }).meta({ id: 'CreatedApiKey' }));

export type WorkspaceObject = z.infer<ReturnType<typeof workspaceObject>>;
export type ApiKeyObject = z.infer<ReturnType<typeof apiKeyObject>>;
