/**
 * The keys a policy's conditions and group_by may use: the attributes of a request that the
 * gateway knows when it admits it. The README documents the same list.
 *
 * - `api_key`: the calling API key's id
 * - `workspace_id`: the workspace's id
 * - `virtual_key`: the virtual key's slug
 * - `provider`: the virtual key's provider (`openai`, `azure-openai`)
 * - `model`: the run's effective model
 * - `metadata.<name>`: a metadata value, from the `x-gateway-metadata` header merged over the run's
 *   own `metadata`
 */
export const ATTRIBUTE_KEYS = ['api_key', 'workspace_id', 'virtual_key', 'provider', 'model'] as const;
export type AttributeKey = (typeof ATTRIBUTE_KEYS)[number] | `metadata.${string}`;

export const METADATA_PREFIX = 'metadata.';
/** Metadata keys are bounded as a run's metadata keys are: at most 64 characters. */
export const METADATA_KEY_MAX = 64;

/** A condition value of `*` matches any present value of its key. */
export const ANY_VALUE = '*';

export function isAttributeKey(key: string): key is AttributeKey {
  if (ATTRIBUTE_KEYS.some((known) => known === key)) return true;
  if (!key.startsWith(METADATA_PREFIX)) return false;
  const name = key.slice(METADATA_PREFIX.length);
  return name.length > 0 && name.length <= METADATA_KEY_MAX;
}

export const ATTRIBUTE_KEYS_DESCRIPTION = `${ATTRIBUTE_KEYS.map((key) => `'${key}'`).join(', ')} or 'metadata.<name>' (name of 1 to ${METADATA_KEY_MAX} characters)`;
