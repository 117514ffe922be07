import { serverEvents } from './sse';

/**
 * The console's one way to the gateway: its public API, with the key as a Bearer token. The key
 * lives in this module's memory only, for the tab's life: never in storage, a URL or a cookie, so a
 * reload signs out, and a cross-site form (which cannot set an Authorization header) can change
 * nothing: CSRF is answered by construction (docs/console.md).
 */

import type { RunStatus } from '../../db/run-status-list';
import type { ProviderAttempt } from '../../db/json-columns';

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
/** A list of OpenAI's cursor pagination: `after` its last_id for the next page. */
export interface CursorList<Item> extends List<Item> {
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}
export interface Assistant {
  id: string;
  name: string | null;
  model: string;
  tools: { type: string; function?: { name: string } }[];
  created_at: number;
}
export interface Thread {
  id: string;
  created_at: number;
  metadata: Record<string, string>;
}
export interface Annotation {
  type: 'file_citation' | 'file_path';
  text: string;
  file_citation?: { file_id: string };
  file_path?: { file_id: string };
}
export interface Message {
  id: string;
  created_at: number;
  role: 'user' | 'assistant' | 'system' | 'developer';
  run_id: string | null;
  status: string;
  content: (
    | { type: 'text'; text: { value: string; annotations: Annotation[] } }
    | { type: 'image_url'; image_url: { url: string } }
    | { type: 'image_file'; image_file: { file_id: string } }
  )[];
  attachments: { file_id: string; tools: { type: string }[] }[] | null;
}
export interface TokenUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}
export interface RunError {
  code: string;
  message: string;
}
export interface Run {
  id: string;
  thread_id: string;
  assistant_id: string;
  status: RunStatus;
  model: string;
  created_at: number;
  started_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  cancelled_at: number | null;
  expires_at: number | null;
  last_error: RunError | null;
  incomplete_details: { reason: string } | null;
  usage: TokenUsage | null;
}
/** GET /v1/runs/{run_id}/trace: its log line once it ended, its provider attempts, its events (times in ms). */
export interface RunTrace {
  log: Record<string, string | number | null> | null;
  attempts: ProviderAttempt[];
  attempts_total: number;
  events: { at_ms: number; type: string; status?: string; step_id?: string; step_type?: string; attempt?: number }[];
  steps_omitted: boolean;
}
export type ToolCall =
  | { id: string; type: 'function'; function: { name: string; arguments: string; output: string | null } }
  | { id: string; type: 'file_search'; file_search: { results: { file_name: string; score: number }[] } }
  | {
      id: string;
      type: 'code_interpreter';
      code_interpreter: { input: string; outputs: ({ type: 'logs'; logs: string } | { type: 'image' })[] };
    };
export interface RunStep {
  id: string;
  type: 'message_creation' | 'tool_calls';
  status: string;
  created_at: number;
  completed_at: number | null;
  failed_at: number | null;
  cancelled_at: number | null;
  last_error: RunError | null;
  step_details:
    | { type: 'message_creation'; message_creation: { message_id: string } }
    | { type: 'tool_calls'; tool_calls: ToolCall[] };
  usage: TokenUsage | null;
}
export interface RunUsageResult {
  status: Run['status'];
  error_code: string | null;
  num_runs: number;
}
export interface BucketPage<Result> {
  data: { start_time: number; end_time: number; results: Result[] }[];
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
