import { eq, type SQL } from 'drizzle-orm';
import type { ResultSet } from '@libsql/client';
import {
  batchRawResults,
  batchWrites,
  besideRow,
  insertWhere,
  rawOf,
  rowOf,
  type BuiltStatement,
  type RawStatement,
} from '../../db/client';
import {
  vectorStoreFileBatches,
  vectorStoreFiles,
  vectorStores,
  workspaces,
  type ChunkingStrategy,
  type FileAttributes,
} from '../../db/schema';
import type { Actor, RequestContext } from '../../actor';
import type { Deps } from '../../deps';
import type { Settings } from '../../db/settings-cache';
import { liveBeside } from '../identities/middleware/api-key-auth';
import { ApiError } from '../../errors';
import { newId } from '../../lib/ids';
import type {
  ChunkingStrategyInput,
  CreateFileBatchBody,
  CreateVectorStoreBody,
  CreateVectorStoreFileBody,
} from './schemas';
import { virtualKeyChooser } from '../virtual-keys/commands';
import {
  checkFiles,
  expiresAt,
  getStoreFile,
  getVectorStore,
  insertStoreFiles,
  storeFileRead,
  touchVectorStore,
  type FileBatchRow,
  type FileToAdd,
  type VectorStoreFileRow,
  type VectorStoreRow,
} from './queries';

/**
 * The vector store use-cases that write more than one row or start ingestion: creating a store
 * (alone, or inline with a thread), adding a file or a batch of files. Each checks every file
 * before writing anything, writes in one batch, then wakes ingestion (deps.ingestion).
 */

export type StoreCommandDeps = Pick<Deps, 'db' | 'config' | 'now' | 'ingestion'>;

/** The strategy as stored and answered: OpenAI answers `auto` as the static sizes it stands for. */
export function storedChunking(input: ChunkingStrategyInput | undefined): ChunkingStrategy {
  if (input?.type === 'static') return { type: 'static', static: { ...input.static } };
  return { type: 'static', static: { max_chunk_size_tokens: 800, chunk_overlap_tokens: 400 } };
}

/** The files of a request, each with its attributes and chunking, named for errors (`file_ids[2]`). */
export function filesToAdd(
  fileIds: readonly string[],
  options: { chunking?: ChunkingStrategyInput; attributes?: FileAttributes | null; param: (index: number) => string },
): FileToAdd[] {
  const chunking: ChunkingStrategy = storedChunking(options.chunking);
  return fileIds.map((fileId, index) => ({
    fileId,
    attributes: options.attributes ?? {},
    chunking,
    param: options.param(index),
  }));
}

/** `file_ids[2]`: the parameter of the third of a list. */
export const itemOf = (list: string) => (index: number) => `${list}[${index}]`;

/**
 * A new store's row and the statements that write it with its files, for the caller's batch
 * (a store created inline with a thread is written with the thread). The embeddings model is the
 * workspace's, else GATEWAY_EMBEDDINGS_MODEL; its virtual key is resolved as a run's is.
 */
export async function prepareVectorStore(
  deps: StoreCommandDeps,
  actor: Actor,
  input: {
    name?: string | null;
    metadata?: Record<string, string> | null;
    expiresAfter?: CreateVectorStoreBody['expires_after'];
    files: FileToAdd[];
  },
  condition?: SQL,
): Promise<{ store: VectorStoreRow; statements: BuiltStatement[] }> {
  const [first] = input.files;
  if (first) ingestionHost(deps, first.param);
  // Read side by side (one round trip to a database server), their errors told in this order.
  const reads = [
    first ? checkFiles(deps.db, actor.workspaceId, input.files) : undefined,
    embeddingsModel(deps, actor.workspaceId),
    virtualKeyChooser(deps.db, actor.workspaceId, actor.virtualKeySlug),
  ] as const;
  for (const read of reads) read?.catch(() => undefined);
  await reads[0];
  const model = await reads[1];
  const key = (await reads[2])(model);
  const at = deps.now();
  const store: VectorStoreRow = {
    id: newId('vs'),
    workspaceId: actor.workspaceId,
    name: input.name ?? null,
    metadata: input.metadata ?? {},
    expiresAfter: input.expiresAfter ?? null,
    expiresAt: expiresAt(input.expiresAfter ?? null, at),
    createdAt: at,
    lastActiveAt: at,
    embeddingModel: model,
    embeddingDimensions: null,
    virtualKeyId: key.id,
    deletedAt: null,
  };
  // Its files are written only with it (insertStoreFiles checks that the store exists).
  const statements: BuiltStatement[] = [
    condition ? insertWhere(deps.db, vectorStores, store, condition) : deps.db.insert(vectorStores).values(store),
    ...insertStoreFiles(deps.db, store, input.files, { batchId: null, apiKeyId: actor.apiKeyId, at }),
  ];
  return { store, statements };
}

/**
 * POST /v1/vector_stores: the new store, and how many files it queued (each file once), all in
 * progress. On settings assumed unchanged, whether the key is live is read beside what the store
 * needs (its files, its embeddings model and virtual key), and asked before anything is told.
 */
export async function createVectorStore(
  deps: StoreCommandDeps,
  actor: Actor,
  settings: Settings,
  body: CreateVectorStoreBody,
  context: RequestContext,
): Promise<{ store: VectorStoreRow; queued: number }> {
  const files = filesToAdd(body.file_ids ?? [], { chunking: body.chunking_strategy, param: itemOf('file_ids') });
  const { store, statements } = await liveBeside(
    settings,
    prepareVectorStore(deps, actor, {
      name: body.name,
      metadata: body.metadata,
      expiresAfter: body.expires_after,
      files,
    }),
  );
  await batchWrites(deps.db, statements);
  if (files.length > 0) wakeIngestion(deps, context);
  return { store, queued: new Set(files.map((file) => file.fileId)).size };
}

/**
 * POST /v1/vector_stores/{id}/files: the file queued for ingestion (as it was, if already in the
 * store), read back in the write's transaction.
 */
export async function addStoreFile(
  deps: StoreCommandDeps,
  actor: Actor,
  settings: Settings,
  storeId: string,
  body: CreateVectorStoreFileBody,
  context: RequestContext,
): Promise<VectorStoreFileRow> {
  const files = filesToAdd([body.file_id], {
    chunking: body.chunking_strategy,
    attributes: body.attributes,
    param: () => 'file_id',
  });
  const store = await storeAndFiles(deps, actor, settings, storeId, files);
  const readBack = rawOf(storeFileRead(deps.db, store.id, body.file_id));
  const { after } = await addFiles(deps, actor, store, files, null, context, readBack);
  const [row] = after?.rows ?? [];
  // None when the store went meanwhile: its 404, read as getStoreFile says it.
  return row ? rowOf(vectorStoreFiles, row) : getStoreFile(deps.db, store.id, body.file_id);
}

/**
 * POST /v1/vector_stores/{id}/file_batches: `file_ids` with the batch's attributes and chunking, or
 * `files` each with its own; the batch, and how many files it queued (those not in the store yet).
 */
export async function createFileBatch(
  deps: StoreCommandDeps,
  actor: Actor,
  settings: Settings,
  storeId: string,
  body: CreateFileBatchBody,
  context: RequestContext,
): Promise<{ batch: FileBatchRow; queued: number }> {
  const files = body.files
    ? body.files.flatMap((file, index) =>
        filesToAdd([file.file_id], {
          chunking: file.chunking_strategy,
          attributes: file.attributes,
          param: () => `files[${index}].file_id`,
        }),
      )
    : filesToAdd(body.file_ids ?? [], {
        chunking: body.chunking_strategy,
        attributes: body.attributes,
        param: itemOf('file_ids'),
      });
  const store = await storeAndFiles(deps, actor, settings, storeId, files);
  const batch: FileBatchRow = {
    id: newId('vsfb'),
    vectorStoreId: store.id,
    workspaceId: store.workspaceId,
    cancelledAt: null,
    createdAt: deps.now(),
  };
  const { queued } = await addFiles(deps, actor, store, files, batch, context);
  return { batch, queued };
}

/**
 * The store `storeId` of the caller's workspace, with `files` checked to be the workspace's, read
 * side by side and, on settings assumed unchanged, with whether the key is live (one round trip to
 * a database server); their errors in this order: the key's, the store's 404, then the files'.
 */
async function storeAndFiles(
  deps: StoreCommandDeps,
  actor: Actor,
  settings: Settings,
  storeId: string,
  files: FileToAdd[],
): Promise<VectorStoreRow> {
  ingestionHost(deps, files[0]?.param ?? 'file_ids');
  const reads = besideRow(
    getVectorStore(deps.db, actor.workspaceId, storeId),
    checkFiles(deps.db, actor.workspaceId, files),
  );
  const [store] = await liveBeside(settings, reads);
  return store;
}

/**
 * A store to add files to is also a store's activity; the batch row goes with its files, in one
 * transaction. `after`: a read made last in it (the file added, as it is then), its result answered
 * with how many files were queued (those not in the store already).
 */
async function addFiles(
  deps: StoreCommandDeps,
  actor: Actor,
  store: VectorStoreRow,
  files: FileToAdd[],
  batch: FileBatchRow | null,
  context: RequestContext,
  after?: RawStatement,
): Promise<{ queued: number; after: ResultSet | undefined }> {
  const at = deps.now();
  const inserts = insertStoreFiles(deps.db, store, files, { batchId: batch?.id ?? null, apiKeyId: actor.apiKeyId, at });
  const lead = batch ? [rawOf(deps.db.insert(vectorStoreFileBatches).values(batch))] : [];
  const results = await batchRawResults(deps.db, [
    ...lead,
    ...inserts.map(rawOf),
    rawOf(touchVectorStore(deps.db, store, at)),
    ...(after ? [after] : []),
  ]);
  wakeIngestion(deps, context);
  const queued = results
    .slice(lead.length, lead.length + inserts.length)
    .reduce((sum, result) => sum + result.rowsAffected, 0);
  return { queued, after: after ? results.at(-1) : undefined };
}

export function wakeIngestion(deps: Pick<Deps, 'ingestion'>, context: Pick<RequestContext, 'waitUntil'>): void {
  deps.ingestion?.wake(context);
}

/** The host that will ingest the files; where there is none (Workers without the queue), a 400 naming `param`. */
export function ingestionHost(deps: Pick<Deps, 'ingestion'>, param: string): void {
  if (deps.ingestion === null) {
    throw new ApiError(
      'ingestion_unavailable',
      'This gateway cannot add files to vector stores: its Workers deployment has no ingestion queue ' +
        '(the INGEST_QUEUE binding, consumed by the ingest Worker: see the README, "Cloudflare Workers").',
      { param },
    );
  }
}

async function embeddingsModel(deps: StoreCommandDeps, workspaceId: string): Promise<string> {
  const [row] = await deps.db
    .select({ model: workspaces.embeddingsModel })
    .from(workspaces)
    .where(eq(workspaces.id, workspaceId))
    .limit(1);
  return row?.model ?? deps.config.GATEWAY_EMBEDDINGS_MODEL;
}
