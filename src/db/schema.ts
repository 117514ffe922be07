import { sql } from 'drizzle-orm';
import { blob, index, integer, real, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';
import type { Provider } from '../providers/adapters';
import type { RetrySettings } from '../providers/attempts';
import type { Usage } from '../providers/types';
import { activeSql, holdsThreadSql, type RunStatus, type StepStatus } from './run-statuses';
import type {
  RequiredAction,
  ResponseFormat,
  ResponseOptions,
  RunError,
  RunIncompleteDetails,
  RunTrace,
  StepDetails,
  Tool,
  ToolChoice,
  ToolResources,
  TruncationStrategy,
} from './json-columns';

/**
 * Every table of the gateway. Conventions:
 * - times are integer milliseconds since the epoch; the API mappers turn them into Unix seconds
 *   (Assistants objects) or ISO 8601 (policies);
 * - resources listed newest-first or paged by cursor have an integer `seq` primary key (SQLite's
 *   rowid, so ordering by it is free and stable) and their public `id` as a unique column;
 * - JSON columns hold the API's own shapes, typed here (json-columns.ts) so that every reader gets them typed.
 * Migrations in drizzle/ are generated from this file (`npm run db:generate`) and append-only.
 */

const json = <T>(name: string) => text(name, { mode: 'json' }).$type<T>();
const ms = (name: string) => integer(name);

// ── Identities ───────────────────────────────────────────────────────────────────────────────

export const organisations = sqliteTable('organisations', {
  id: text('id').primaryKey(),
  name: text('name').notNull(),
  createdAt: ms('created_at').notNull(),
});

export const workspaces = sqliteTable(
  'workspaces',
  {
    id: text('id').primaryKey(),
    organisationId: text('organisation_id')
      .notNull()
      .references(() => organisations.id),
    slug: text('slug').notNull(),
    name: text('name').notNull(),
    createdAt: ms('created_at').notNull(),
    /** The embeddings model of the workspace's new vector stores; null: GATEWAY_EMBEDDINGS_MODEL. */
    embeddingsModel: text('embeddings_model'),
  },
  (t) => [uniqueIndex('workspaces_organisation_slug').on(t.organisationId, t.slug)],
);

export type ApiKeyKind = 'organisation' | 'workspace';

export const apiKeys = sqliteTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    kind: text('kind').$type<ApiKeyKind>().notNull(),
    organisationId: text('organisation_id')
      .notNull()
      .references(() => organisations.id),
    /** Set for workspace keys, null for organisation keys. */
    workspaceId: text('workspace_id').references(() => workspaces.id),
    name: text('name').notNull(),
    /** The first characters of the key, enough to recognise it in a list; never enough to use it. */
    prefix: text('prefix').notNull(),
    /** SHA-256 of the whole key, hex. The key itself is never stored. */
    hash: text('hash').notNull(),
    createdAt: ms('created_at').notNull(),
    revokedAt: ms('revoked_at'),
  },
  (t) => [uniqueIndex('api_keys_hash').on(t.hash), index('api_keys_organisation').on(t.organisationId)],
);

/**
 * The caller, as the auth middleware resolves `x-gateway-api-key` (resources/identities/api-keys.ts):
 * here, below the settings cache that keeps it (settings-cache.ts).
 */
export interface AuthenticatedKey {
  id: string;
  kind: ApiKeyKind;
  organisationId: string;
  /** The key's own workspace; null for organisation keys, which name one per call. */
  workspace: { id: string; slug: string } | null;
}

// ── Provider credentials ─────────────────────────────────────────────────────────────────────

export const virtualKeys = sqliteTable(
  'virtual_keys',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    slug: text('slug').notNull(),
    provider: text('provider').$type<Provider>().notNull(),
    baseUrl: text('base_url').notNull(),
    /** The provider's API key, AES-256-GCM under the gateway's encryption key (iv + ciphertext, base64). */
    secretCiphertext: text('secret_ciphertext').notNull(),
    /** Provider-specific settings that are not secret (Azure: api_version, deployment). */
    options: json<Record<string, string>>('options').notNull(),
    /**
     * The models this key serves, exact names or `*` globs (`gpt-4o*`): a run that names no virtual
     * key is executed by the key whose pattern matches its model most specifically.
     */
    models: json<string[]>('models')
      .notNull()
      .default(sql`'[]'`),
    /** The workspace's fallback key for runs that name none and match no `models` pattern. */
    isDefault: integer('is_default', { mode: 'boolean' }).notNull().default(false),
    /** Slugs of the workspace's keys a call moves to, in order, once this key's attempts failed (providers/attempts.ts). */
    fallbacks: json<string[]>('fallbacks')
      .notNull()
      .default(sql`'[]'`),
    /** How calls with this key are tried again; null: RETRY_DEFAULTS (one attempt). */
    retry: json<RetrySettings>('retry'),
    createdAt: ms('created_at').notNull(),
    revokedAt: ms('revoked_at'),
  },
  (t) => [
    // A slug names one live key; a revoked key's slug can be reused.
    uniqueIndex('virtual_keys_workspace_slug')
      .on(t.workspaceId, t.slug)
      .where(sql`revoked_at IS NULL`),
    // At most one live default key per workspace, race-free.
    uniqueIndex('virtual_keys_workspace_default')
      .on(t.workspaceId)
      .where(sql`is_default = 1 AND revoked_at IS NULL`),
  ],
);

/**
 * A virtual key as the gateway uses it, read from its row (resources/virtual-keys/commands.ts): here,
 * below the settings cache that keeps it (settings-cache.ts) and the run host that is handed it.
 */
export interface VirtualKey {
  id: string;
  workspaceId: string;
  slug: string;
  provider: Provider;
  /** Without a trailing slash: the provider adapter appends its endpoint path. */
  baseUrl: string;
  /**
   * Azure OpenAI: api_version, deployment and the model the deployment serves (stored since
   * `model` was added; the deployment's name stands in for it on older keys). Empty for `openai`.
   */
  options: { api_version?: string; deployment?: string; model?: string };
  /** Exact model names and `*` globs: runs of those models that name no key go to this one. */
  models: string[];
  /** The workspace's fallback for runs that name no key and match no key's `models`. */
  isDefault: boolean;
  /** Slugs of the keys a call that failed with this one moves to, in order (providers/attempts.ts). */
  fallbacks: string[];
  /** How a call with this key is tried again: every field present (RETRY_DEFAULTS where the row has none). */
  retry: RetrySettings;
  secretCiphertext: string;
  createdAt: number;
  revokedAt: number | null;
}

/**
 * One row: a known text sealed under the encryption key of the provider secrets by the first start
 * with a key, so that a later start with another key refuses to run (resources/identities/encryption-check.ts)
 * instead of failing every run that decrypts a provider key.
 */
export const encryptionCheck = sqliteTable('encryption_check', {
  id: integer('id').primaryKey(),
  sealed: text('sealed').notNull(),
  createdAt: ms('created_at').notNull(),
});

// ── Assistants, threads, messages, runs ──────────────────────────────────────────────────────

/** Message content as stored and answered: OpenAI's content parts. */
export type MessageContent =
  | { type: 'text'; text: { value: string; annotations: unknown[] } }
  | { type: 'image_url'; image_url: { url: string; detail?: string } }
  | { type: 'image_file'; image_file: { file_id: string; detail?: string } };

/** A file attached to a message, with the tools that may read it (file_search: it is in the thread's vector store). */
export interface MessageAttachment {
  file_id: string;
  tools: { type: string }[];
}

/** Why a message ended incomplete: the answer's cap (`max_tokens`), a filter, or its run's end. */
export interface MessageIncompleteDetails {
  reason: string;
}

export const assistants = sqliteTable(
  'assistants',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    createdAt: ms('created_at').notNull(),
    name: text('name'),
    description: text('description'),
    model: text('model').notNull(),
    instructions: text('instructions'),
    tools: json<Tool[]>('tools').notNull(),
    toolResources: json<ToolResources>('tool_resources'),
    metadata: json<Record<string, string>>('metadata').notNull(),
    temperature: real('temperature'),
    topP: real('top_p'),
    responseFormat: json<ResponseFormat>('response_format'),
    deletedAt: ms('deleted_at'),
  },
  (t) => [
    uniqueIndex('assistants_id').on(t.id),
    index('assistants_workspace').on(t.workspaceId, t.seq),
    // Counts a workspace's live assistants against its cap without reading the rows.
    index('assistants_live')
      .on(t.workspaceId)
      .where(sql`deleted_at IS NULL`),
  ],
);

/** An assistant as its row: what the settings cache keeps (settings-cache.ts) and the assistants' queries answer. */
export type AssistantRow = typeof assistants.$inferSelect;

export const threads = sqliteTable(
  'threads',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    createdAt: ms('created_at').notNull(),
    metadata: json<Record<string, string>>('metadata').notNull(),
    toolResources: json<ToolResources>('tool_resources'),
  },
  (t) => [
    uniqueIndex('threads_id').on(t.id),
    // GET /v1/threads: a workspace's threads, newest first.
    index('threads_workspace').on(t.workspaceId, t.seq),
  ],
);

export type MessageStatus = 'in_progress' | 'incomplete' | 'completed';

/**
 * Who wrote a message: the Assistants API writes user and assistant ones; a conversation's items
 * (resources/conversations/) also system and developer ones, which a run sends as system messages.
 */
export type MessageRole = 'user' | 'assistant' | 'system' | 'developer';

export const messages = sqliteTable(
  'messages',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    threadId: text('thread_id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    createdAt: ms('created_at').notNull(),
    role: text('role').$type<MessageRole>().notNull(),
    /** OpenAI's message content parts, e.g. `[{"type":"text","text":{"value":"…","annotations":[]}}]`. */
    content: json<MessageContent[]>('content').notNull(),
    status: text('status').$type<MessageStatus>().notNull(),
    assistantId: text('assistant_id'),
    runId: text('run_id'),
    attachments: json<MessageAttachment[]>('attachments').notNull(),
    metadata: json<Record<string, string>>('metadata').notNull(),
    incompleteDetails: json<MessageIncompleteDetails>('incomplete_details'),
    completedAt: ms('completed_at'),
    incompleteAt: ms('incomplete_at'),
  },
  (t) => [uniqueIndex('messages_id').on(t.id), index('messages_thread').on(t.threadId, t.seq)],
);

/** Without `seq`, as resources/runs/queries.ts explains. */
export type MessageRow = Omit<typeof messages.$inferSelect, 'seq'>;

export const runs = sqliteTable(
  'runs',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    /** A run of the Assistants API, or a response of the Responses API executed as one (table `responses`). */
    kind: text('kind').$type<RunKind>().notNull().default('run'),
    workspaceId: text('workspace_id').notNull(),
    threadId: text('thread_id').notNull(),
    /** The assistant it runs; for a response, the assistant its `prompt` names, or '' without one. */
    assistantId: text('assistant_id').notNull(),
    /** The virtual key that executes the run, also when tool outputs continue it later. */
    virtualKeyId: text('virtual_key_id').notNull(),
    /** The API key that created the run: rate-limit attribution. */
    apiKeyId: text('api_key_id').notNull(),
    status: text('status').$type<RunStatus>().notNull(),
    createdAt: ms('created_at').notNull(),
    startedAt: ms('started_at'),
    expiresAt: ms('expires_at'),
    cancelledAt: ms('cancelled_at'),
    failedAt: ms('failed_at'),
    completedAt: ms('completed_at'),
    requiredAction: json<RequiredAction>('required_action'),
    lastError: json<RunError>('last_error'),
    incompleteDetails: json<RunIncompleteDetails>('incomplete_details'),
    model: text('model').notNull(),
    instructions: text('instructions').notNull(),
    tools: json<Tool[]>('tools').notNull(),
    toolResources: json<ToolResources>('tool_resources'),
    metadata: json<Record<string, string>>('metadata').notNull(),
    usage: json<Usage>('usage'),
    maxPromptTokens: integer('max_prompt_tokens'),
    maxCompletionTokens: integer('max_completion_tokens'),
    truncationStrategy: json<TruncationStrategy>('truncation_strategy').notNull(),
    toolChoice: json<ToolChoice>('tool_choice').notNull(),
    parallelToolCalls: integer('parallel_tool_calls', { mode: 'boolean' }).notNull(),
    responseFormat: json<ResponseFormat>('response_format').notNull(),
    temperature: real('temperature'),
    topP: real('top_p'),
    /** A response's `reasoning.effort`, passed to the provider as `reasoning_effort`; null: not sent. */
    reasoningEffort: text('reasoning_effort'),
    /** Rate-limit context captured at admission, so that whoever ends a turn of the run charges its tokens. */
    rateLimit: json<TokenTicket>('rate_limit'),
    /**
     * Until when the process executing the run is known to be alive. A run in a non-terminal state
     * whose lease has passed was orphaned by a crash and is failed by the recovery sweep.
     */
    leaseExpiresAt: ms('lease_expires_at'),
    /**
     * Its log line's note and its provider attempts (json-columns.ts), written by the statement
     * that ends a turn or settles the run (runs/execution/settle.ts); null before its first turn ends.
     */
    trace: json<RunTrace>('trace'),
  },
  (t) => [
    uniqueIndex('runs_id').on(t.id),
    index('runs_thread').on(t.threadId, t.seq),
    // GET /v1/runs (a workspace's runs, newest first) and GET /v1/usage/runs (counted by when created).
    index('runs_workspace').on(t.workspaceId, t.kind, t.seq),
    index('runs_workspace_created').on(t.workspaceId, t.kind, t.createdAt),
    index('runs_active_lease').on(t.leaseExpiresAt).where(activeSql),
    // One active run per thread, as OpenAI enforces it: a second one fails to insert, in any
    // process and on any driver, however close together the two arrive.
    uniqueIndex('runs_one_active_per_thread').on(t.threadId).where(holdsThreadSql),
  ],
);

/**
 * A run as the app holds it: every column but `seq`, which orders the table's rows, is assigned by
 * the database on insert and is never read back (resources/runs/queries.ts); here, below the run
 * host that is handed it (deps.ts).
 */
export type RunRow = Omit<typeof runs.$inferSelect, 'seq'>;

export type RunKind = 'run' | 'response';

/**
 * What a response (resources/responses/) holds beyond its run, which has its id, status, settings,
 * usage and steps: where it sits (its thread: its conversation's, or a private thread of its own
 * holding its input and output, whose history goes on through `previousResponseId`'s), the input as
 * the client gave it, and the request's fields runs have none for. A response made with
 * `store: false` keeps this row alone once it ends (`stored` false, its thread gone), so that a
 * later `previous_response_id` naming it is told why it cannot go on from it.
 */
export const responses = sqliteTable(
  'responses',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    threadId: text('thread_id').notNull(),
    /** The conversation (a thread) it was made in; null for one on its private thread. */
    conversationId: text('conversation_id'),
    previousResponseId: text('previous_response_id'),
    stored: integer('stored', { mode: 'boolean' }).notNull(),
    background: integer('background', { mode: 'boolean' }).notNull(),
    /** The input items as given (ids added where they had none): `input_items` lists them. */
    input: json<Record<string, unknown>[]>('input').notNull(),
    /** The request's fields answered as given: text, reasoning, truncation, user, prompt, include, … */
    options: json<ResponseOptions>('options').notNull(),
    createdAt: ms('created_at').notNull(),
    /** The container its code_interpreter calls run in (resources/containers/), when it has the tool. */
    containerId: text('container_id'),
  },
  (t) => [uniqueIndex('responses_id').on(t.id), index('responses_thread').on(t.threadId)],
);

export type ResponseRow = Omit<typeof responses.$inferSelect, 'seq'>;

/**
 * A container (resources/containers/): a named sandbox session of the workspace, whose session is
 * opened with the container's id as its key and whose files (container_files) are kept as the
 * gateway's files, so that they outlive the session. `threadId` is set for a thread's own container:
 * the one its Assistants runs use, and the one a response's `auto` container is made as.
 * Expired once idle past `expiresAfterMinutes` from `lastActiveAt` (read, never swept: its row stays).
 */
export const containers = sqliteTable(
  'containers',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    name: text('name').notNull(),
    threadId: text('thread_id'),
    expiresAfterMinutes: integer('expires_after_minutes').notNull(),
    /** As given (OpenAI's `1g`…`64g`): answered, not enforced; the sandbox's own limits apply. */
    memoryLimit: text('memory_limit').$type<'1g' | '4g' | '16g' | '64g'>(),
    createdAt: ms('created_at').notNull(),
    lastActiveAt: ms('last_active_at').notNull(),
  },
  (t) => [
    uniqueIndex('containers_id').on(t.id),
    index('containers_workspace').on(t.workspaceId, t.seq),
    index('containers_thread').on(t.threadId, t.seq),
  ],
);

export type ContainerRow = Omit<typeof containers.$inferSelect, 'seq'>;

/**
 * A file of a container, at `path` (relative to /mnt/data, one per path: a file written again at a
 * path replaces its row): a gateway file (`fileId`), given by the user or written by the code.
 */
export const containerFiles = sqliteTable(
  'container_files',
  {
    seq: integer('seq').primaryKey(),
    containerId: text('container_id').notNull(),
    fileId: text('file_id').notNull(),
    path: text('path').notNull(),
    source: text('source').$type<'user' | 'assistant'>().notNull(),
    bytes: integer('bytes').notNull(),
    createdAt: ms('created_at').notNull(),
  },
  (t) => [
    uniqueIndex('container_files_path').on(t.containerId, t.path),
    index('container_files_file').on(t.containerId, t.fileId),
    index('container_files_container').on(t.containerId, t.seq),
  ],
);

export type ContainerFileRow = Omit<typeof containerFiles.$inferSelect, 'seq'>;

export const runSteps = sqliteTable(
  'run_steps',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    runId: text('run_id').notNull(),
    threadId: text('thread_id').notNull(),
    assistantId: text('assistant_id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    type: text('type').$type<'message_creation' | 'tool_calls'>().notNull(),
    status: text('status').$type<StepStatus>().notNull(),
    stepDetails: json<StepDetails>('step_details').notNull(),
    createdAt: ms('created_at').notNull(),
    completedAt: ms('completed_at'),
    cancelledAt: ms('cancelled_at'),
    failedAt: ms('failed_at'),
    expiredAt: ms('expired_at'),
    lastError: json<RunError>('last_error'),
    usage: json<Usage>('usage'),
    /**
     * What the model reasoned before this step's message or calls, as its provider streamed it
     * (`reasoning_content` or `reasoning`): a response's `reasoning` item, which the Assistants API
     * never shows and no prompt sends back.
     */
    reasoning: text('reasoning'),
  },
  (t) => [uniqueIndex('run_steps_id').on(t.id), index('run_steps_run').on(t.runId, t.seq)],
);

/** A run's step as the app holds it: every column but `seq` (see RunRow). */
export type StepRow = Omit<typeof runSteps.$inferSelect, 'seq'>;

/**
 * A step of one of a thread's runs as a prompt places it among the messages (a message's creation,
 * or tool calls and their outputs), with the time its run was created: what a history read gives
 * (resources/threads/history.ts), and what a run that called tools hands back (deps.ts, Answered).
 */
export type HistoryStep = Pick<typeof runSteps.$inferSelect, 'id' | 'runId' | 'type' | 'status' | 'stepDetails'> & {
  runCreatedAt: number;
};

/** A thread's history, as a turn's prompt is built from it (resources/runs/execution/prompt.ts). */
export interface History {
  /** The thread's messages, oldest first. */
  messages: MessageRow[];
  /** Steps of the thread's runs, each run's in the order they happened, runs oldest first. */
  steps: HistoryStep[];
}

// ── Files and retrieval ──────────────────────────────────────────────────────────────────────

export type FilePurpose =
  | 'assistants'
  | 'assistants_output'
  | 'batch'
  | 'batch_output'
  | 'fine-tune'
  | 'fine-tune-results'
  | 'vision'
  | 'user_data'
  | 'evals';

/** An uploaded file: its row here, its bytes in the blob store (deps.blobs) under `blobKey`. */
export const files = sqliteTable(
  'files',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    purpose: text('purpose').$type<FilePurpose>().notNull(),
    filename: text('filename').notNull(),
    bytes: integer('bytes').notNull(),
    /** The part's Content-Type as uploaded (extraction falls back on the filename's extension). */
    contentType: text('content_type'),
    blobKey: text('blob_key').notNull(),
    createdAt: ms('created_at').notNull(),
    expiresAt: ms('expires_at'),
  },
  (t) => [
    uniqueIndex('files_id').on(t.id),
    index('files_workspace').on(t.workspaceId, t.seq),
    index('files_workspace_purpose').on(t.workspaceId, t.purpose, t.seq),
    // The sweeps ask which blobs a row holds (resources/files/sweep.ts).
    index('files_blob_key').on(t.blobKey),
  ],
);

/**
 * The bytes an upload under way holds against its workspace's quota (resources/files/reservation.ts), taken
 * before they are written and counted with the files' own by every check of the quota; its key
 * is the blob being written. Live while `expires_at` is ahead: the upload renews it, and one whose
 * process died lapses, which frees its bytes and lets the sweeps delete what it wrote; a deleted
 * file's bytes are covered by a lapsed one until they are gone (resources/files/sweep.ts). `seq` orders the
 * uploads and `waiting` says which one waits for room: a younger upload short of room gives up
 * while an older one waits (reservation.ts).
 */
export const fileReservations = sqliteTable(
  'file_reservations',
  {
    seq: integer('seq').primaryKey(),
    blobKey: text('blob_key').notNull(),
    workspaceId: text('workspace_id').notNull(),
    bytes: integer('bytes').notNull(),
    expiresAt: ms('expires_at').notNull(),
    waiting: integer('waiting', { mode: 'boolean' }).notNull().default(false),
  },
  (t) => [
    uniqueIndex('file_reservations_blob_key').on(t.blobKey),
    index('file_reservations_workspace').on(t.workspaceId),
    index('file_reservations_expires_at').on(t.expiresAt),
  ],
);

export type VectorStoreStatus = 'expired' | 'in_progress' | 'completed';
export type VectorStoreFileStatus = 'in_progress' | 'completed' | 'cancelled' | 'failed';
export type ExpiresAfter = { anchor: 'last_active_at'; days: number };
export type ChunkingStrategy =
  { type: 'static'; static: { max_chunk_size_tokens: number; chunk_overlap_tokens: number } } | { type: 'other' };
export type VectorStoreFileError = { code: 'server_error' | 'unsupported_file' | 'invalid_file'; message: string };
export type FileAttributes = Record<string, string | number | boolean>;

/**
 * A vector store. `embeddingModel` and `embeddingDimensions` are fixed when its first file is
 * embedded (or at creation), so that every vector in it and every query against it agree;
 * `virtualKeyId` is the virtual key that embeds for it, resolved at creation as a run's is.
 */
export const vectorStores = sqliteTable(
  'vector_stores',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    name: text('name'),
    metadata: json<Record<string, string>>('metadata').notNull(),
    expiresAfter: json<ExpiresAfter>('expires_after'),
    expiresAt: ms('expires_at'),
    createdAt: ms('created_at').notNull(),
    lastActiveAt: ms('last_active_at').notNull(),
    embeddingModel: text('embedding_model').notNull(),
    embeddingDimensions: integer('embedding_dimensions'),
    virtualKeyId: text('virtual_key_id'),
    deletedAt: ms('deleted_at'),
  },
  (t) => [uniqueIndex('vector_stores_id').on(t.id), index('vector_stores_workspace').on(t.workspaceId, t.seq)],
);

/**
 * A file in a vector store, and the job that ingests it: `in_progress` rows are the ingestion
 * queue (claimed with a lease, as runs are, so a crashed ingestion is taken up again).
 */
export const vectorStoreFiles = sqliteTable(
  'vector_store_files',
  {
    seq: integer('seq').primaryKey(),
    vectorStoreId: text('vector_store_id').notNull(),
    fileId: text('file_id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    batchId: text('batch_id'),
    status: text('status').$type<VectorStoreFileStatus>().notNull(),
    usageBytes: integer('usage_bytes').notNull().default(0),
    chunkingStrategy: json<ChunkingStrategy>('chunking_strategy').notNull(),
    attributes: json<FileAttributes>('attributes').notNull(),
    lastError: json<VectorStoreFileError>('last_error'),
    createdAt: ms('created_at').notNull(),
    attempts: integer('attempts').notNull().default(0),
    leaseExpiresAt: ms('lease_expires_at'),
    /** The API key that added the file: its embedding calls count against that key in rate-limit policies. */
    apiKeyId: text('api_key_id'),
  },
  (t) => [
    uniqueIndex('vector_store_files_store_file').on(t.vectorStoreId, t.fileId),
    index('vector_store_files_store').on(t.vectorStoreId, t.status, t.seq),
    index('vector_store_files_batch').on(t.batchId, t.seq),
    index('vector_store_files_file').on(t.fileId),
    index('vector_store_files_pending')
      .on(t.leaseExpiresAt)
      .where(sql`status = 'in_progress'`),
  ],
);

export const vectorStoreFileBatches = sqliteTable(
  'vector_store_file_batches',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    vectorStoreId: text('vector_store_id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    /** cancelled once cancelled; otherwise the batch's status is its files' (in_progress until none is). */
    cancelledAt: ms('cancelled_at'),
    createdAt: ms('created_at').notNull(),
  },
  (t) => [
    uniqueIndex('vector_store_file_batches_id').on(t.id),
    index('vector_store_file_batches_store').on(t.vectorStoreId),
  ],
);

/**
 * The chunks of a store's files: text, and the embedding as a libSQL F32 vector blob (any
 * dimension: the store records it). vector_store_chunks_fts (migration 0004, FTS5, kept by
 * triggers) indexes the same text for keyword search. A chunk is searchable only while its
 * vector_store_files row is `completed`: a file half-ingested, or failed, is never found.
 */
export const vectorStoreChunks = sqliteTable(
  'vector_store_chunks',
  {
    id: integer('id').primaryKey(),
    vectorStoreId: text('vector_store_id').notNull(),
    fileId: text('file_id').notNull(),
    chunkIndex: integer('chunk_index').notNull(),
    text: text('text').notNull(),
    tokens: integer('tokens').notNull(),
    embedding: blob('embedding').$type<Uint8Array>().notNull(),
  },
  (t) => [index('vector_store_chunks_store_file').on(t.vectorStoreId, t.fileId, t.chunkIndex)],
);

// ── Stored chat completions ──────────────────────────────────────────────────────────────────

/**
 * A chat completion made with `store: true` (resources/chat-completions/stored.ts): the provider
 * behind a virtual key keeps none, so the gateway does. `id` is the provider's completion id when it
 * was a safe one, else the gateway's, unique within its workspace only: a provider cannot learn
 * another workspace's ids by reusing them. `completion` is the answer's object as the provider
 * sent it (a stream's assembled from its chunks), `messages` the request's, each as the client sent
 * it; `metadata` the request's until an update replaces it.
 */
export const storedChatCompletions = sqliteTable(
  'stored_chat_completions',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    createdAt: ms('created_at').notNull(),
    /** The model the request named: what a list filters by. */
    model: text('model').notNull(),
    metadata: json<Record<string, string>>('metadata').notNull(),
    completion: json<Record<string, unknown>>('completion').notNull(),
    messages: json<({ role: string } & Record<string, unknown>)[]>('messages').notNull(),
  },
  (t) => [
    uniqueIndex('stored_chat_completions_id').on(t.workspaceId, t.id),
    index('stored_chat_completions_workspace').on(t.workspaceId, t.seq),
  ],
);

export type StoredChatCompletionRow = typeof storedChatCompletions.$inferSelect;

// ── Usage ────────────────────────────────────────────────────────────────────────────────────

/**
 * What a usage row counts: runs; responses (runs of kind `response`); embeddings calls (retrieval's, and those passed through, POST
 * /v1/embeddings); chat completions, legacy completions and moderations passed through.
 */
export const USAGE_KINDS = ['run', 'response', 'embeddings', 'chat_completions', 'completions', 'moderations'] as const;
export type UsageKind = (typeof USAGE_KINDS)[number];

/**
 * Tokens per hour, workspace, API key, virtual key, model and kind: what GET /v1/usage adds up.
 * Runs and responses are counted by a trigger (migrations 0006, 0015: a run's `kind`) in the statement that ends them, with the usage
 * that statement writes, so the table matches the runs exactly whatever ends them; in the hour the
 * run was created. Embeddings and chat completions calls are counted by their callers, through
 * db/usage-counts.ts. `requests`: runs ended, or calls made.
 */
export const usage = sqliteTable(
  'usage',
  {
    workspaceId: text('workspace_id').notNull(),
    /** The start of the hour, ms since the epoch (UTC). */
    hour: ms('hour').notNull(),
    kind: text('kind').$type<UsageKind>().notNull(),
    model: text('model').notNull(),
    apiKeyId: text('api_key_id').notNull(),
    virtualKeyId: text('virtual_key_id').notNull(),
    requests: integer('requests').notNull().default(0),
    promptTokens: integer('prompt_tokens').notNull().default(0),
    completionTokens: integer('completion_tokens').notNull().default(0),
    totalTokens: integer('total_tokens').notNull().default(0),
  },
  (t) => [uniqueIndex('usage_key').on(t.workspaceId, t.hour, t.kind, t.model, t.apiKeyId, t.virtualKeyId)],
);

/**
 * The approximate-nearest-neighbour index of a large store (retrieval/vector-index.ts): a table of
 * its own, `vector_store_ann_<id's random part>` (chunk id, F32_BLOB embedding, a libsql_vector_idx),
 * kept in step with vector_store_chunks by two triggers of the store, and back-filled in short
 * batches with the chunks older than the index (ids up to `backfill_until`). Searched only once
 * `ready_at` is set; until then the store is scanned exactly.
 */
export const vectorStoreIndexes = sqliteTable('vector_store_indexes', {
  vectorStoreId: text('vector_store_id').primaryKey(),
  dimensions: integer('dimensions').notNull(),
  /** The largest chunk id when the index was created: the triggers copy every later chunk. */
  backfillUntil: integer('backfill_until').notNull(),
  /** The back-fill's cursor: every chunk of the store with an id up to this one is in the index. */
  backfilledTo: integer('backfilled_to').notNull(),
  readyAt: ms('ready_at'),
  createdAt: ms('created_at').notNull(),
});

// ── Rate limits ──────────────────────────────────────────────────────────────────────────────

/** A policy's vocabulary: the API's, the columns' and enforcement's (ratelimit/). */
export const POLICY_TYPES = ['requests', 'tokens'] as const;
export const POLICY_UNITS = ['rpm', 'rph', 'rpd'] as const;
export const POLICY_STATUSES = ['active', 'archived'] as const;
export type PolicyType = (typeof POLICY_TYPES)[number];
export type PolicyUnit = (typeof POLICY_UNITS)[number];
export type PolicyStatus = (typeof POLICY_STATUSES)[number];

/**
 * What a run's tokens are charged to, captured at admission and stored on the run (see
 * ratelimit/enforce.ts): the tokens policies it matched, with its group in each, and the
 * reservation its current turn holds in their counters.
 */
export interface TokenTicket {
  workspace_id: string;
  policies: { policy_id: string; unit: PolicyUnit; group: string }[];
  /** Tokens reserved in each policy's counter at admission, released when the turn ends. */
  reserved?: number;
  /** When (ms since the epoch) the reservation was taken: its window is where it is released. */
  reserved_at?: number;
  /** The run's total tokens before this turn: the turn is charged the rest. */
  base_tokens?: number;
}

export const rateLimitPolicies = sqliteTable(
  'rate_limit_policies',
  {
    seq: integer('seq').primaryKey(),
    id: text('id').notNull(),
    organisationId: text('organisation_id')
      .notNull()
      .references(() => organisations.id),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    type: text('type').$type<PolicyType>().notNull(),
    unit: text('unit').$type<PolicyUnit>().notNull(),
    value: real('value').notNull(),
    status: text('status').$type<PolicyStatus>().notNull(),
    conditions: json<{ key: string; value: string }[]>('conditions').notNull(),
    groupBy: json<{ key: string }[]>('group_by').notNull(),
    createdAt: ms('created_at').notNull(),
    lastUpdatedAt: ms('last_updated_at').notNull(),
    /**
     * The kind of API key that created the policy. An organisation's policy binds its workspace:
     * only an organisation key may change or archive it. Policies older than the column are
     * `workspace` (migration 0002), as anyone in their workspace could change them then.
     */
    createdBy: text('created_by').$type<ApiKeyKind>().notNull().default('workspace'),
    /**
     * The workspace's policy version (rate_limit_policy_versions) at the row's last change, set by
     * the triggers of migration 0002: a cache at version v reloads only the rows above it.
     */
    version: integer('version').notNull().default(0),
  },
  (t) => [
    uniqueIndex('rate_limit_policies_id').on(t.id),
    // Lists are newest first within a workspace or an organisation, filtered by status.
    index('rate_limit_policies_workspace').on(t.workspaceId, t.status, t.seq),
    index('rate_limit_policies_organisation').on(t.organisationId, t.status, t.seq),
    // Incremental reloads: a workspace's rows changed since a version.
    index('rate_limit_policies_workspace_version').on(t.workspaceId, t.version),
  ],
);

/**
 * A number per workspace that grows with every change to its rate-limit policies, so that each
 * process can keep the active policies cached and still see a change made anywhere (another
 * gateway, the CLI, plain SQL) on the very next request, at the price of one primary-key read.
 * Bumped by triggers on rate_limit_policies (migrations 0001 and 0002), in the same transaction as
 * the change itself: no writer can forget it. No row means version 0 and no policies.
 *
 * The same triggers keep the workspace's active policies counted (how many, and the bytes of their
 * names, conditions and group_by), which the caps check in O(1), and note the version at which a
 * row left the workspace (deleted, or moved to another): an incremental reload cannot see a row
 * that is gone, so a cache older than that reloads everything.
 */
export const rateLimitPolicyVersions = sqliteTable('rate_limit_policy_versions', {
  workspaceId: text('workspace_id').primaryKey(),
  version: integer('version').notNull(),
  activeCount: integer('active_count').notNull().default(0),
  activeBytes: integer('active_bytes').notNull().default(0),
  fullReloadVersion: integer('full_reload_version').notNull().default(0),
});

/**
 * The generation of the settings every request reads, one number for the whole database: bumped
 * by triggers (migration 0009) on every change to api_keys, workspaces, assistants, virtual_keys
 * and rate_limit_policies, in the transaction of the change, whoever makes it (this gateway,
 * another, the CLI, plain SQL). SettingsCache keeps those rows in memory for one generation, and
 * the policy cache skips its version read while it holds: a request reads this one row first, and
 * a change governs the very next request. One row (id 0); none means no caching.
 */
export const settingsGeneration = sqliteTable('settings_generation', {
  id: integer('id').primaryKey(),
  value: integer('value').notNull(),
});

/**
 * One row per counter: a policy, one combination of its group_by values and one fixed window.
 * `key` encodes all three; `window_end` lets expired windows be pruned.
 */
export const rateLimitCounters = sqliteTable(
  'rate_limit_counters',
  {
    key: text('key').primaryKey(),
    used: real('used').notNull(),
    windowEnd: ms('window_end').notNull(),
  },
  (t) => [index('rate_limit_counters_window_end').on(t.windowEnd)],
);

/**
 * Requests a rate-limit policy refused, the last MAX_REFUSALS of each policy (ratelimit/stored-refusals.ts),
 * for GET /v1/policies/rate-limits/{id}/counters: shared by every process on the database, and
 * kept across restarts. Written about once a second per process from a bounded buffer, never on a
 * refused request's path; diagnostics, not acknowledged data.
 */
export const rateLimitRefusals = sqliteTable(
  'rate_limit_refusals',
  {
    seq: integer('seq').primaryKey(),
    policyId: text('policy_id').notNull(),
    at: ms('at').notNull(),
    /** The counter's group (ratelimit/enforce.ts's counterOf). */
    group: text('group').notNull(),
    apiKeyId: text('api_key_id').notNull(),
    /** The virtual key's slug, never a secret. */
    virtualKey: text('virtual_key').notNull(),
    requested: real('requested').notNull(),
    used: real('used').notNull(),
    limit: real('limit').notNull(),
  },
  (t) => [index('rate_limit_refusals_policy').on(t.policyId, t.seq)],
);
