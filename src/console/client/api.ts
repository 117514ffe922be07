/**
 * The console's one way to the gateway: its public API, with the key as a Bearer token. The key
 * lives in this module's memory only, for the tab's life: never in storage, a URL or a cookie, so a
 * reload signs out, and a cross-site form (which cannot set an Authorization header) can change
 * nothing: CSRF is answered by construction (docs/console.md).
 */

let key: string | null = null;

export function signIn(newKey: string): void {
  key = newKey;
}

export function signOut(): void {
  key = null;
}

export const signedIn = () => key !== null;

/** A refusal of the gateway, with its envelope's message and field. */
export class ApiFailure extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly param: string | null,
  ) {
    super(message);
  }
}

type Query = Record<string, string | number | undefined>;

export async function api<Answer>(
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  path: string,
  options: { query?: Query; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Answer> {
  if (key === null) throw new ApiFailure('Signed out.', 401, null);
  const url = new URL(`/v1${path}`, location.origin);
  for (const [name, value] of Object.entries(options.query ?? {})) {
    if (value !== undefined) url.searchParams.set(name, String(value));
  }
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, ...options.headers };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(url, {
    method,
    headers,
    body: options.body === undefined ? null : JSON.stringify(options.body),
    // Never a cookie, never a cached answer with another key's data.
    credentials: 'omit',
    cache: 'no-store',
  });
  const text = await response.text();
  const parsed: unknown = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const error = envelope(parsed);
    throw new ApiFailure(
      error?.message ?? `The gateway answered ${response.status}.`,
      response.status,
      error?.param ?? null,
    );
  }
  return parsed as Answer;
}

function envelope(body: unknown): { message: string; param: string | null } | null {
  if (typeof body !== 'object' || body === null || !('error' in body)) return null;
  const error = body.error;
  if (typeof error !== 'object' || error === null || !('message' in error) || typeof error.message !== 'string')
    return null;
  const param = 'param' in error && typeof error.param === 'string' ? error.param : null;
  return { message: error.message, param };
}

/** The wire objects the console reads (the gateway's OpenAPI document has them whole). */
export interface Workspace {
  id: string;
  organisation_id: string;
  slug: string;
  name: string;
}
export interface List<Item> {
  data: Item[];
}
export interface ApiKey {
  id: string;
  kind: 'organisation' | 'workspace';
  name: string;
  prefix: string;
  workspace_id: string | null;
  created_at: number;
  revoked_at: number | null;
}
export interface VirtualKey {
  slug: string;
  provider: string;
  base_url: string;
  models: string[];
  default: boolean;
  fallbacks: string[];
  created_at: number;
  revoked_at: number | null;
}
export interface Policy {
  id: string;
  name: string;
  type: 'requests' | 'tokens';
  unit: 'rpm' | 'rph' | 'rpd';
  value: number;
  status: 'active' | 'archived';
  conditions: { key: string; value: string }[];
  group_by: { key: string }[];
  created_by: 'organisation' | 'workspace';
}
/** A counter's group: its keys' values, or a hash when they were too long to keep. */
export interface CounterGroup {
  group: { key: string; value: string | null }[] | null;
  group_hash: string | null;
}
export interface PolicyCounters {
  window_start: string;
  window_end: string;
  groups: (CounterGroup & { used: number })[];
  total_groups: number;
  refusals: (CounterGroup & {
    created_at: string;
    api_key_id: string;
    api_key_prefix: string | null;
    virtual_key: string;
    requested: number;
    used: number;
    limit: number;
  })[];
}
export interface UsageResult {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
  num_requests: number;
  api_key_id: string | null;
  virtual_key: string | null;
  model: string | null;
}
export interface UsagePage {
  data: { start_time: number; end_time: number; results: UsageResult[] }[];
  has_more: boolean;
  next_page: string | null;
}
