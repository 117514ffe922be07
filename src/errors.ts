import { jsonText } from './lib/json-text';

/**
 * The one error type, the closed list of error codes and the one envelope.
 *
 * Every failure the gateway reports leaves as OpenAI's error body,
 * `{"error":{"message","type","param","code"}}`, which the OpenAI SDKs parse into
 * `BadRequestError`, `AuthenticationError`, `RateLimitError`, ... by status and code. Code throws
 * `ApiError`; `onError` in app.ts renders it.
 */

type ErrorSpec = {
  status: 400 | 401 | 403 | 404 | 405 | 409 | 413 | 415 | 429 | 500 | 501 | 502 | 503 | 504 | 507;
  message?: string;
};

/** Every code the gateway can answer with, its HTTP status and, where it has one, a default message. */
export const ERROR_CODES = {
  // 400: the request is malformed or breaks a rule of the API.
  invalid_json: { status: 400 },
  missing_required_parameter: { status: 400 },
  invalid_type: { status: 400 },
  invalid_value: { status: 400 },
  unknown_parameter: { status: 400 },
  string_above_max_length: { status: 400 },
  string_below_min_length: { status: 400 },
  array_above_max_length: { status: 400 },
  array_below_min_length: { status: 400 },
  value_above_maximum: { status: 400 },
  value_below_minimum: { status: 400 },
  invalid_beta: { status: 400 },
  missing_virtual_key: { status: 400 },
  invalid_metadata_header: { status: 400 },
  unsupported_tool: { status: 400 },
  unsupported_content: { status: 400 },
  /** A multipart/form-data body (POST /v1/files) that does not parse, or was cut before its end. */
  invalid_multipart: { status: 400 },
  run_not_active: { status: 400 },
  /**
   * A run of the thread is queued, in progress, waiting for tool outputs or cancelling: until it
   * ends, the thread takes no new run or message and cannot be deleted (OpenAI's rule).
   */
  thread_has_active_run: { status: 400 },
  /** A workspace's budget is spent: its policies, virtual keys or assistants are at their cap. */
  quota_exceeded: { status: 400 },
  /** Files cannot be added to vector stores where the gateway has no ingestion (a Workers gateway without its ingestion queue). */
  ingestion_unavailable: { status: 400 },
  // 401: who is calling is unknown.
  missing_api_key: {
    status: 401,
    message:
      "You didn't provide an API key. Send your gateway API key as 'Authorization: Bearer <key>' or in the 'x-gateway-api-key' header.",
  },
  invalid_api_key: { status: 401, message: 'Incorrect, unknown or revoked API key provided.' },
  invalid_virtual_key: { status: 401 },
  // 403: the caller is known but may not act on this.
  workspace_forbidden: { status: 403 },
  organisation_forbidden: { status: 403 },
  /** A workspace key acting on a policy that its organisation's key created. */
  policy_forbidden: { status: 403 },
  /** What only an organisation key may read (GET /metrics: every workspace's figures), asked with a workspace key. */
  organisation_key_required: { status: 403 },
  // 404: nothing of that id in the caller's reach. Another tenant's resource is a 404 too.
  route_not_found: { status: 404 },
  /** A path under /v1 that the gateway does not serve (yet): OpenAI's Files, Vector stores, … */
  unsupported_endpoint: { status: 404 },
  workspace_not_found: { status: 404 },
  policy_not_found: { status: 404 },
  api_key_not_found: { status: 404 },
  virtual_key_not_found: { status: 404 },
  assistant_not_found: { status: 404 },
  thread_not_found: { status: 404 },
  message_not_found: { status: 404 },
  run_not_found: { status: 404 },
  run_step_not_found: { status: 404 },
  file_not_found: { status: 404 },
  vector_store_not_found: { status: 404 },
  vector_store_file_not_found: { status: 404 },
  file_batch_not_found: { status: 404 },
  chat_completion_not_found: { status: 404 },
  response_not_found: { status: 404 },
  /** A conversation (a thread, by either prefix) not in the workspace. */
  conversation_not_found: { status: 404 },
  /** A conversation's item: a message, or a tool call or output (fc_, fco_, fs_) of one of its run steps. */
  item_not_found: { status: 404 },
  /** A container not in the workspace (resources/containers/). */
  container_not_found: { status: 404 },
  /** A container's file: none at that id in that container. */
  container_file_not_found: { status: 404 },
  /** GET /v1/models/{model}: no virtual key of the workspace serves it. */
  model_not_found: { status: 404 },
  // 405, 409, 413, 415
  method_not_allowed: { status: 405 },
  already_exists: { status: 409 },
  /** A virtual key's `models` would tie with another key's for some model. */
  ambiguous_models: { status: 409 },
  /** What a write was checked against changed before it could be written, every time it was tried. */
  concurrent_update: { status: 409 },
  policy_archived: { status: 409 },
  payload_too_large: { status: 413 },
  unsupported_media_type: {
    status: 415,
    message: "The request body must be JSON, sent with 'Content-Type: application/json'.",
  },
  // 429: a rate-limit policy refused the request (its `type` is `requests` or `tokens`).
  rate_limit_exceeded: { status: 429 },
  // 500, 503: our fault; the message never shows internals.
  server_error: {
    status: 500,
    message: 'The server had an error while processing your request. Sorry about that!',
  },
  /**
   * The provider behind the virtual key refused a proxied call (POST /v1/chat/completions): answered
   * with the provider's own status (ApiErrorOptions.status), or 502 when it answered nothing usable
   * (a network failure, a malformed or oversized answer, an address the upstream rules refuse).
   */
  upstream_error: { status: 502 },
  /** The provider sent no first byte, or went silent, within GATEWAY_UPSTREAM_*_TIMEOUT_MS. */
  upstream_timeout: { status: 504 },
  shutting_down: { status: 503, message: 'The gateway is shutting down; retry on another instance.' },
  /** The database turned the request away under load (its busy refusal, a libSQL server's 429) past the retries: nothing was written. */
  database_busy: { status: 503, message: 'The database is busy; nothing was written. Retry in a moment.' },
  /** The database server did not answer in time (GATEWAY_DATABASE_TIMEOUT_MS): a write may or may not have been applied. */
  database_timeout: {
    status: 503,
    message:
      'The database did not answer in time; a write of this request may or may not have been applied. Retry in a moment.',
  },
  /** GET /metrics on Workers, whose isolates keep no useful figures: the message says where they are (docs/metrics.md). */
  metrics_unavailable: { status: 501 },
  /** The deployment lacks configuration it cannot serve without (a Worker's LIBSQL_URL, its key): the message names it. */
  gateway_misconfigured: { status: 503 },
  /**
   * Storing the file would leave the gateway's disk with less free space than it keeps
   * (GATEWAY_MIN_FREE_DISK_BYTES): nothing was stored. Not retried: sending the file again soon
   * finds the same disk, until its operator frees space.
   */
  insufficient_storage: {
    status: 507,
    message: "The gateway's storage is full: the file was not stored. Retry once its operator has freed space.",
  },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;
export type ErrorStatus = (typeof ERROR_CODES)[ErrorCode]['status'];

/** The `type` field: OpenAI's vocabulary. Rate limits say which budget ran out. */
export type ErrorType = 'invalid_request_error' | 'requests' | 'tokens' | 'server_error';

export interface ErrorBody {
  error: { message: string; type: ErrorType; param: string | null; code: ErrorCode };
}

export interface ApiErrorOptions {
  param?: string | null;
  /** Overrides the type derived from the status (rate limits: `requests` or `tokens`). */
  type?: ErrorType;
  /** Extra response headers, e.g. Retry-After on a 429. */
  headers?: Record<string, string>;
  cause?: unknown;
  /**
   * `upstream_error` only: the provider's own status (4xx or 5xx), which the client gets back as the
   * provider gave it, so that the SDKs raise what they would have raised talking to it directly.
   */
  status?: number;
}

export class ApiError extends Error {
  readonly code: ErrorCode;
  /** The code's status; for `upstream_error`, the provider's when it gave one. */
  readonly status: number;
  readonly type: ErrorType;
  readonly param: string | null;
  readonly headers: Record<string, string>;

  constructor(code: ErrorCode, message?: string, options: ApiErrorOptions = {}) {
    const spec: ErrorSpec = ERROR_CODES[code];
    super(message ?? spec.message ?? code, { cause: options.cause });
    this.name = 'ApiError';
    this.code = code;
    this.status = code === 'upstream_error' && options.status !== undefined ? options.status : spec.status;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
    this.type = options.type ?? (spec.status >= 500 ? 'server_error' : 'invalid_request_error');
  }

  get body(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  /**
   * Whether a client should try again. The OpenAI SDK retries 409 and every 5xx unless told
   * otherwise by `x-should-retry`; only rate limits and transient server states deserve it (a
   * full disk is not one, nor what a deployment does not implement).
   */
  get retryable(): boolean {
    return this.status === 429 || (this.status >= 500 && this.status !== 501 && this.code !== 'insufficient_storage');
  }
}

/** The answer for anything unexpected: generic, with no internals. */
export const serverError = (cause?: unknown) => new ApiError('server_error', undefined, { cause });

/** The envelope as a Response. Errors that retrying cannot fix say so to the SDKs' retry logic. */
export function errorResponse(error: ApiError): Response {
  const headers = new Headers(error.headers);
  headers.set('content-type', 'application/json');
  if (!error.retryable) headers.set('x-should-retry', 'false');
  return new Response(jsonText(error.body), { status: error.status, headers });
}
