import type { Db } from '../../db/client';
import type { EmbedDeps, EmbeddingKey, EmbeddingTarget } from '../../retrieval/embed';
import { decryptVirtualKeySecret, getVirtualKey, resolveVirtualKey } from './commands';
import type { VirtualKey } from '../../db/schema';

/**
 * The key a vector store's texts are embedded with (retrieval/embed.ts's EmbeddingKeyOf), its
 * secret decrypted: handed to retrieval by its callers, since retrieval does not know resources.
 */
export async function embeddingKey(
  deps: Pick<EmbedDeps, 'db' | 'secrets'>,
  target: EmbeddingTarget,
): Promise<EmbeddingKey> {
  const key = await storeKey(deps.db, target);
  const secret = await decryptVirtualKeySecret(deps.secrets, key);
  return { id: key.id, slug: key.slug, provider: key.provider, baseUrl: key.baseUrl, options: key.options, secret };
}

/** The store's key while it is live; otherwise the one the workspace would use now for the model. */
async function storeKey(db: Db, target: EmbeddingTarget): Promise<VirtualKey> {
  if (target.virtualKeyId) {
    const key = await getVirtualKey(db, target.virtualKeyId);
    if (key && key.revokedAt === null && key.workspaceId === target.workspaceId) return key;
  }
  return resolveVirtualKey(db, target.workspaceId, { slug: undefined, model: target.model });
}
