import { serverEvents } from './sse';

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

interface Call {
  query?: Query;
  /** JSON, or a form sent as multipart (an upload). */
  body?: unknown;
  headers?: Record<string, string>;
  /** The workspace acted on, for routes that take it in `x-gateway-workspace-id` (an organisation key must name one). */
  workspace?: string;
}

async function send(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, options: Call): Promise<Response> {
  if (key === null) throw new ApiFailure('Signed out.', 401, null);
  const url = new URL(`/v1${path}`, location.origin);
  for (const [name, value] of Object.entries(options.query ?? {})) {
    if (value !== undefined) url.searchParams.set(name, String(value));
  }
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, ...options.headers };
  if (options.workspace !== undefined) headers['x-gateway-workspace-id'] = options.workspace;
  // A form goes as multipart, its boundary in the content type fetch writes.
  const body =
    options.body instanceof FormData ? options.body : options.body === undefined ? null : JSON.stringify(options.body);
  if (typeof body === 'string') headers['content-type'] = 'application/json';
  const response = await fetch(url, {
    method,
    headers,
    body,
    // Never a cookie, never a cached answer with another key's data.
    credentials: 'omit',
    cache: 'no-store',
  });
  if (!response.ok) {
    const text = await response.text();
    let parsed: unknown = null;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Not the gateway's envelope (a proxy's page): the status says it.
    }
    const error = envelope(parsed);
    throw new ApiFailure(
      error?.message ?? `The gateway answered ${response.status}.`,
      response.status,
      error?.param ?? null,
    );
  }
  return response;
}

export async function api<Answer>(
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  path: string,
  options: Call = {},
): Promise<Answer> {
  const text = await (await send(method, path, options)).text();
  return (text ? JSON.parse(text) : null) as Answer;
}

/**
 * A POST answered with `text/event-stream`: its events as they arrive, each event's data parsed as
 * JSON (`Data`: what the caller reads of it), until the stream's `done`.
 */
export async function* streamed<Data>(
  path: string,
  options: Call,
): AsyncGenerator<{ event: string; data: Data }, void, undefined> {
  const response = await send('POST', path, options);
  if (!response.body) return;
  for await (const { event, data } of serverEvents(response.body)) {
    if (event === 'done') return;
    yield { event, data: JSON.parse(data) as Data };
  }
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
export interface FileObject {
  id: string;
  bytes: number;
  created_at: number;
  filename: string;
  purpose: string;
}
export interface FileCounts {
  in_progress: number;
  completed: number;
  failed: number;
  cancelled: number;
  total: number;
}
export interface VectorStore {
  id: string;
  name: string | null;
  created_at: number;
  usage_bytes: number;
  file_counts: FileCounts;
  status: 'expired' | 'in_progress' | 'completed';
}
export interface VectorStoreFile {
  id: string;
  status: 'in_progress' | 'completed' | 'cancelled' | 'failed';
  last_error: { code: string; message: string } | null;
}
export interface SearchResult {
  file_id: string;
  filename: string;
  score: number;
  content: { type: 'text'; text: string }[];
}
export interface Assistant {
  id: string;
  name: string | null;
  model: string;
}
/** What the playground reads of a run's stream events' data: a run, a message delta, an error. */
export interface RunEventData {
  id?: string;
  thread_id?: string;
  last_error?: { code: string; message: string } | null;
  delta?: { content?: { type: string; text?: { value?: string } }[] };
  error?: { message: string };
}
