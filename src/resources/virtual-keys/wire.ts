import { toUnixSeconds } from '../../lib/time';
import type { VirtualKeyObject } from './objects';
import { servedModel } from './commands';
import type { VirtualKey } from '../../db/schema';

/** A virtual key as the API and the CLI show it: never its secret. */
export function toVirtualKeyJson(key: VirtualKey): VirtualKeyObject {
  return {
    object: 'virtual_key',
    id: key.id,
    slug: key.slug,
    provider: key.provider,
    base_url: key.baseUrl,
    workspace_id: key.workspaceId,
    created_at: toUnixSeconds(key.createdAt),
    revoked_at: key.revokedAt === null ? null : toUnixSeconds(key.revokedAt),
    models: key.models,
    default: key.isDefault,
    fallbacks: key.fallbacks,
    retry: key.retry,
    ...(key.provider === 'azure-openai'
      ? { api_version: key.options.api_version, deployment: key.options.deployment, model: servedModel(key, '') }
      : {}),
  };
}
