/**
 * Metadata's bounds, OpenAI's: at most 16 pairs, keys of at most 64 characters, string values of
 * at most 512. The API's metadata (http/schemas.ts) and the metadata header of rate limiting
 * (ratelimit/attributes.ts) are held to them.
 */
export const METADATA_LIMITS = { pairs: 16, keyLength: 64, valueLength: 512 } as const;
