import { ApiError } from '../errors';
import { METADATA_LIMITS } from '../lib/metadata';
import { ATTRIBUTE_KEYS, METADATA_PREFIX } from './vocabulary';

/** The request as policies see it: the values of the vocabulary's keys (see vocabulary.ts). */
export interface RequestAttributes {
  /** The calling API key's id. */
  api_key: string;
  workspace_id: string;
  /** The virtual key's slug. */
  virtual_key: string;
  /** The virtual key's provider: `openai` or `azure-openai`. */
  provider: string;
  /** The run's effective model. */
  model: string;
  /** The x-gateway-metadata header merged over the run's metadata (see requestMetadata). */
  metadata: Record<string, string>;
}

export const METADATA_HEADER = 'x-gateway-metadata';

const invalidHeader = (reason: string) =>
  new ApiError('invalid_metadata_header', `Invalid '${METADATA_HEADER}' header: ${reason}.`, {
    param: METADATA_HEADER,
  });

/**
 * The x-gateway-metadata header: a JSON object of string values, bounded like a run's metadata
 * (at most 16 pairs, keys of at most 64 characters, values of at most 512). Absent or empty: `{}`.
 * Header values are bytes: non-ASCII text must be sent as JSON `\u` escapes.
 */
export function parseMetadataHeader(value: string | undefined): Record<string, string> {
  if (value === undefined || value.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw invalidHeader('expected a JSON object of string values, got text that is not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    const got = parsed === null ? 'null' : Array.isArray(parsed) ? 'an array' : `a ${typeof parsed}`;
    throw invalidHeader(`expected a JSON object of string values, got ${got}`);
  }
  // JSON.parse defines every key as an own property, `__proto__` included, so this object is safe
  // to return and to spread.
  const entries = Object.entries(parsed);
  if (entries.length > METADATA_LIMITS.pairs) {
    throw invalidHeader(`at most ${METADATA_LIMITS.pairs} key-value pairs are allowed, got ${entries.length}`);
  }
  for (const [key, item] of entries) {
    if (typeof item !== 'string') {
      throw invalidHeader(
        `the value of ${JSON.stringify(key)} must be a string, got ${item === null ? 'null' : typeof item}`,
      );
    }
    if (key.length > METADATA_LIMITS.keyLength) {
      throw invalidHeader(
        `key ${JSON.stringify(key.slice(0, 16))}… is longer than ${METADATA_LIMITS.keyLength} characters`,
      );
    }
    if (item.length > METADATA_LIMITS.valueLength) {
      throw invalidHeader(
        `the value of ${JSON.stringify(key)} is longer than ${METADATA_LIMITS.valueLength} characters`,
      );
    }
  }
  return parsed as Record<string, string>;
}

/**
 * The metadata policies match on: the header's pairs merged over the run's own metadata, the header
 * winning a key both have. Throws invalid_metadata_header (400) for a malformed header.
 */
export function requestMetadata(
  runMetadata: Record<string, string> | null | undefined,
  header: string | undefined,
): Record<string, string> {
  return { ...runMetadata, ...parseMetadataHeader(header) };
}

/**
 * The attributes as condition keys to values (`model`, `metadata.team`, …). A key that is not in
 * the map is absent: it matches no condition, not even `*`.
 */
export function attributeValues(attributes: RequestAttributes): Map<string, string> {
  const values = new Map<string, string>();
  for (const key of ATTRIBUTE_KEYS) {
    const value: unknown = attributes[key];
    if (typeof value === 'string') values.set(key, value);
  }
  for (const [name, value] of Object.entries(attributes.metadata ?? {})) {
    if (typeof value === 'string') values.set(METADATA_PREFIX + name, value);
  }
  return values;
}
