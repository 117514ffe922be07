import type { Db } from '../db/client';
import type { SettingsLoaders } from '../db/settings-cache';
import { authenticateApiKey, KeyHashes } from '../resources/identities/api-keys';
import { getAssistant } from '../resources/assistants/queries';
import { resolveVirtualKey } from '../resources/virtual-keys/commands';

/**
 * The resources' reads behind the settings cache's lookups (db/settings-cache.ts), for either
 * runtime's deps. Each call has hashes of its own, kept as long as the cache it is built for.
 */
export function settingsLoaders(db: Db): SettingsLoaders {
  const keyHashes = new KeyHashes();
  return {
    apiKey: (presented) => authenticateApiKey(db, keyHashes, presented),
    assistant: (workspaceId, id) => getAssistant(db, workspaceId, id),
    virtualKey: (workspaceId, request) => resolveVirtualKey(db, workspaceId, request),
  };
}
