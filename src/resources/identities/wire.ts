import { toUnixSeconds } from '../../lib/time';
import type { ApiKeyRecord } from './api-keys';
import type { ApiKeyObject, WorkspaceObject } from './objects';
import type { Workspace } from './workspaces';

export function toWorkspaceJson(workspace: Workspace): WorkspaceObject {
  return {
    id: workspace.id,
    object: 'workspace',
    organisation_id: workspace.organisationId,
    slug: workspace.slug,
    name: workspace.name,
    created_at: toUnixSeconds(workspace.createdAt),
  };
}

export function toApiKeyJson(key: ApiKeyRecord): ApiKeyObject {
  return {
    id: key.id,
    object: 'api_key',
    kind: key.kind,
    name: key.name,
    prefix: key.prefix,
    workspace_id: key.workspaceId,
    created_at: toUnixSeconds(key.createdAt),
    revoked_at: key.revokedAt === null ? null : toUnixSeconds(key.revokedAt),
  };
}
