import { and, asc, eq, notInArray, sql, type SQL } from 'drizzle-orm';
import { batchWrites, type Statement } from '../db/client';
import { files, vectorStoreChunks, vectorStoreFiles, vectorStores, type VectorStoreFileError } from '../db/schema';
import { ApiError } from '../errors';
import type { BlobStore } from '../lib/blob-store';
import { UpstreamError } from '../providers/types';
import { claimableAt } from './claims';
import type { Chunk } from './chunk';
import type { Chunker } from './chunker';
import { BATCH_TEXTS, embedTexts, vectorBlob, type EmbedDeps, type EmbeddingKeyOf } from './embed';
import { ExtractionError, formatOf } from './extract';

/**
 * Ingesting one file of a vector store: read its bytes from the blob store, extract its text,
 * chunk it, embed the chunks (retrieval/embed.ts), then write every chunk and mark the file
 * `completed` in one batch, so that nothing half-indexed is ever searchable.
 *
 * The vector_store_files row is the job. A worker claims an in-progress row whose lease is
 * absent or past (`lease_expires_at`, which is also the claim's token: every write of the
 * ingestion is conditional on the row being in progress with the token it last wrote). While it
 * works on the file, reading and chunking it included, it looks at the row every KEEP_MS
 * (renewing the lease as it goes: ClaimKeeper), and stops the work and gives up without writing
 * as soon as the row is no longer its own: the file was removed, its batch cancelled, its store
 * deleted (their rows and chunks go in one batch, resources/vector-stores/queries.ts), or the lease was
 * lost. A crashed ingestion is claimed again once its lease passes, at most MAX_ATTEMPTS times;
 * the workspace's own rate-limit policies refusing an embedding call puts the file back until
 * their window resets, without counting it.
 */

export type IngestDeps = EmbedDeps & { blobs: BlobStore };

export const LEASE_MS = 5 * 60_000;
export const MAX_ATTEMPTS = 3;
/** How often a claim is looked at while its file is worked on: a deleted file stops within this. */
export const KEEP_MS = 2_000;
/** A document's text holds at most this many characters per token of its chunk budget. */
const CHARS_PER_TOKEN_BOUND = 10;

export interface IngestOptions {
  maxFileBytes: number;
  maxChunks: number;
  maxInflatedBytes: number;
  maxPages: number;
  /** Where documents are read and chunked (retrieval/chunker.ts). */
  chunker: Chunker;
  /** The key a store's chunks are embedded with (embed.ts). */
  embeddingKey: EmbeddingKeyOf;
}

export function ingestOptions(
  config: IngestDeps['config'],
  chunker: Chunker,
  embeddingKey: EmbeddingKeyOf,
): IngestOptions {
  return {
    maxFileBytes: config.GATEWAY_INGEST_MAX_FILE_BYTES,
    maxChunks: config.GATEWAY_INGEST_MAX_CHUNKS,
    maxInflatedBytes: config.GATEWAY_INGEST_MAX_INFLATED_BYTES,
    maxPages: config.GATEWAY_INGEST_MAX_PAGES,
    chunker,
    embeddingKey,
  };
}

/** A file claimed for ingestion: its row, with the lease it holds. */
export interface Claim {
  row: typeof vectorStoreFiles.$inferSelect;
  lease: number;
}

const held = (claim: Claim) =>
  and(
    eq(vectorStoreFiles.seq, claim.row.seq),
    eq(vectorStoreFiles.status, 'in_progress'),
    eq(vectorStoreFiles.leaseExpiresAt, claim.lease),
  );

/**
 * Claims the next file to ingest: in progress, its lease absent or past, of a workspace other than
 * `skipWorkspaces` (those at their share of the slots). Files whose lease passed MAX_ATTEMPTS times
 * fail first. Null when there is none.
 */
export async function claimNext(
  deps: Pick<IngestDeps, 'db' | 'now'>,
  skipWorkspaces: readonly string[] = [],
): Promise<Claim | null> {
  const now = deps.now();
  const free = claimableAt(now);
  const eligible =
    skipWorkspaces.length === 0 ? free : and(free, notInArray(vectorStoreFiles.workspaceId, [...skipWorkspaces]));
  await deps.db
    .update(vectorStoreFiles)
    .set({
      status: 'failed',
      leaseExpiresAt: null,
      lastError: { code: 'server_error', message: `The file's ingestion was interrupted ${MAX_ATTEMPTS} times.` },
    })
    .where(and(free, sql`${vectorStoreFiles.attempts} >= ${MAX_ATTEMPTS}`));
  const lease = now + LEASE_MS;
  const next = deps.db
    .select({ seq: vectorStoreFiles.seq })
    .from(vectorStoreFiles)
    .where(eligible)
    .orderBy(asc(vectorStoreFiles.leaseExpiresAt))
    .limit(1);
  const [row] = await deps.db
    .update(vectorStoreFiles)
    .set({ leaseExpiresAt: lease, attempts: sql`${vectorStoreFiles.attempts} + 1` })
    .where(and(eq(vectorStoreFiles.seq, sql`(${next})`), free))
    .returning();
  return row ? { row, lease } : null;
}

/** When the next file waiting for its lease (or its rate-limit window) becomes claimable; null if none waits. */
export async function nextClaimAt(deps: Pick<IngestDeps, 'db'>): Promise<number | null> {
  const [row] = await deps.db
    .select({ at: sql<number | null>`min(${vectorStoreFiles.leaseExpiresAt})` })
    .from(vectorStoreFiles)
    .where(eq(vectorStoreFiles.status, 'in_progress'));
  return row?.at ?? null;
}

/** Ingests the claimed file to its end: completed, failed, deferred (rate limits), or abandoned (no longer its own). */
export async function ingestClaimed(
  deps: IngestDeps,
  claim: Claim,
  options: IngestOptions,
): Promise<'completed' | 'failed' | 'deferred' | 'abandoned'> {
  const keeper = new ClaimKeeper(deps, claim);
  try {
    const chunks = await chunksOf(deps, claim, options, keeper.signal);
    const vectors = await embedChunks(deps, options.embeddingKey, claim, chunks, keeper.signal);
    // The lease is final from here: the writes below are conditional on it.
    if (!(await keeper.stop()) || vectors === null) return 'abandoned';
    return (await complete(deps, claim, chunks, vectors)) ? 'completed' : 'abandoned';
  } catch (error) {
    if (!(await keeper.stop())) return 'abandoned';
    if (error instanceof ApiError && error.code === 'rate_limit_exceeded') {
      return (await defer(deps, claim, error)) ? 'deferred' : 'abandoned';
    }
    const lastError = fileError(error);
    if (lastError.code === 'server_error' && !(error instanceof UpstreamError) && !(error instanceof ApiError)) {
      deps.log.error('ingestion failed', {
        vector_store_id: claim.row.vectorStoreId,
        file_id: claim.row.fileId,
        error,
      });
    }
    return (await fail(deps, claim, lastError)) ? 'failed' : 'abandoned';
  }
}

/** The file's text in chunks, by its store file's strategy, read and chunked by the chunker. */
async function chunksOf(deps: IngestDeps, claim: Claim, options: IngestOptions, signal: AbortSignal): Promise<Chunk[]> {
  const [file] = await deps.db.select().from(files).where(eq(files.id, claim.row.fileId)).limit(1);
  if (!file) throw new ExtractionError('invalid_file', 'The file was deleted before it could be indexed.');
  const format = formatOf(file.filename, file.contentType);
  if (format === null) {
    throw new ExtractionError(
      'unsupported_file',
      `Files of this type cannot be indexed (${file.filename}): send text, Markdown, JSON, code, HTML, PDF or DOCX.`,
    );
  }
  if (file.bytes > options.maxFileBytes) {
    throw new ExtractionError(
      'invalid_file',
      `The file is larger than ${options.maxFileBytes} bytes, the most a file may index.`,
    );
  }
  const bytes = await deps.blobs.get(file.blobKey);
  if (bytes === null) throw new ExtractionError('invalid_file', "The file's content is missing from the blob store.");
  const strategy = claim.row.chunkingStrategy;
  const sizes =
    strategy.type === 'static' ? strategy.static : { max_chunk_size_tokens: 800, chunk_overlap_tokens: 400 };
  const job = {
    format,
    maxBytes: options.maxFileBytes,
    limits: {
      maxChars: options.maxChunks * sizes.max_chunk_size_tokens * CHARS_PER_TOKEN_BOUND,
      maxInflatedBytes: options.maxInflatedBytes,
      maxPages: options.maxPages,
    },
    maxTokens: sizes.max_chunk_size_tokens,
    overlapTokens: sizes.chunk_overlap_tokens,
    maxChunks: options.maxChunks,
  };
  return options.chunker.chunk(bytes, job, signal);
}

/** The chunks' vectors, one embeddings call's worth at a time; null once the file is no longer this claim's. */
async function embedChunks(
  deps: IngestDeps,
  keyOf: EmbeddingKeyOf,
  claim: Claim,
  chunks: Chunk[],
  signal: AbortSignal,
): Promise<{ vectors: Float32Array[]; dimensions: number } | null> {
  const [store] = await deps.db
    .select()
    .from(vectorStores)
    .where(eq(vectorStores.id, claim.row.vectorStoreId))
    .limit(1);
  if (!store) return null;
  const target = {
    workspaceId: store.workspaceId,
    apiKeyId: claim.row.apiKeyId ?? '',
    virtualKeyId: store.virtualKeyId,
    model: store.embeddingModel,
    dimensions: store.embeddingDimensions,
  };
  const vectors: Float32Array[] = [];
  for (let start = 0; start < chunks.length; start += BATCH_TEXTS) {
    const answer = await embedTexts(
      deps,
      keyOf,
      target,
      chunks.slice(start, start + BATCH_TEXTS).map((chunk) => chunk.text),
      signal,
    );
    target.dimensions = answer.dimensions;
    vectors.push(...answer.vectors);
    if (signal.aborted) return null;
  }
  return { vectors, dimensions: target.dimensions ?? 0 };
}

/**
 * Holds a claim while its file is worked on: every KEEP_MS it looks whether the row is still the
 * claim's (stillHeld, which also moves the lease on), and aborts `signal` as soon as it is not, so
 * that the chunker and the embeddings call in hand stop there.
 */
class ClaimKeeper {
  readonly #deps: IngestDeps;
  readonly #claim: Claim;
  readonly #controller = new AbortController();
  readonly #timer: ReturnType<typeof setInterval>;
  #looking: Promise<void> | null = null;

  constructor(deps: IngestDeps, claim: Claim) {
    this.#deps = deps;
    this.#claim = claim;
    this.#timer = setInterval(() => {
      this.#looking ??= this.#look().finally(() => (this.#looking = null));
    }, KEEP_MS);
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  async #look(): Promise<void> {
    try {
      if (!(await stillHeld(this.#deps, this.#claim)))
        this.#controller.abort(new Error("the file is no longer this ingestion's"));
    } catch (error) {
      // The database failed this once: the next look tries again, and the lease has minutes left.
      this.#deps.log.warn('an ingestion could not look at its claim', { file_id: this.#claim.row.fileId, error });
    }
  }

  /** Stops looking, once the look in hand has ended (the claim's lease is then final); whether the claim is still held. */
  async stop(): Promise<boolean> {
    clearInterval(this.#timer);
    await this.#looking;
    return !this.#controller.signal.aborted;
  }
}

/**
 * Whether the row is still this claim's (a read: a cancelled or removed file stops being embedded
 * at once); the lease is moved on (a write) once a fifth of it has gone by.
 */
async function stillHeld(deps: IngestDeps, claim: Claim): Promise<boolean> {
  const now = deps.now();
  if (claim.lease - now > LEASE_MS - LEASE_MS / 5) {
    const [row] = await deps.db
      .select({ seq: vectorStoreFiles.seq })
      .from(vectorStoreFiles)
      .where(held(claim))
      .limit(1);
    return row !== undefined;
  }
  const lease = now + LEASE_MS;
  const [row] = await deps.db
    .update(vectorStoreFiles)
    .set({ leaseExpiresAt: lease })
    .where(held(claim))
    .returning({ seq: vectorStoreFiles.seq });
  if (row) claim.lease = lease;
  return row !== undefined;
}

/** Rows of chunks per INSERT: six parameters each, well under SQLite's 32,766. */
const ROWS_PER_INSERT = 200;

/**
 * The file completed with all its chunks, in one transaction, only while the claim holds: the
 * row is marked first, and each insert writes only if it is then this claim's completed row.
 */
async function complete(
  deps: IngestDeps,
  claim: Claim,
  chunks: Chunk[],
  embedded: { vectors: Float32Array[]; dimensions: number },
): Promise<boolean> {
  const { db } = deps;
  const { vectorStoreId, fileId } = claim.row;
  const encoder = new TextEncoder();
  const vectorOf = (index: number): Float32Array => {
    const vector = embedded.vectors[index];
    if (!vector) throw new Error(`No vector for chunk ${index} of ${chunks.length}`);
    return vector;
  };
  const usageBytes = chunks.reduce(
    (sum, chunk, index) => sum + encoder.encode(chunk.text).byteLength + vectorOf(index).byteLength,
    0,
  );
  const mine: SQL = sql`EXISTS (SELECT 1 FROM ${vectorStoreFiles} WHERE ${vectorStoreFiles.seq} = ${claim.row.seq} AND ${vectorStoreFiles.status} = 'completed' AND ${vectorStoreFiles.leaseExpiresAt} = ${claim.lease})`;
  const statements: Statement[] = [
    db.update(vectorStoreFiles).set({ status: 'completed', usageBytes, lastError: null }).where(held(claim)),
  ];
  for (let start = 0; start < chunks.length; start += ROWS_PER_INSERT) {
    const rows = chunks
      .slice(start, start + ROWS_PER_INSERT)
      .map(
        (chunk, offset) =>
          sql`(${vectorStoreId}, ${fileId}, ${start + offset}, ${chunk.text}, ${chunk.tokens}, ${vectorBlob(vectorOf(start + offset))})`,
      );
    statements.push(
      db.run(
        sql`INSERT INTO ${vectorStoreChunks} (vector_store_id, file_id, chunk_index, text, tokens, embedding)
            SELECT column1, column2, column3, column4, column5, column6 FROM (VALUES ${sql.join(rows, sql`, `)}) WHERE ${mine}`,
      ),
    );
  }
  statements.push(
    db
      .update(vectorStores)
      .set({ embeddingDimensions: sql`coalesce(${vectorStores.embeddingDimensions}, ${embedded.dimensions})` })
      .where(and(eq(vectorStores.id, vectorStoreId), sql`${mine}`)),
  );
  await batchWrites(db, statements);
  const [row] = await db
    .select({ status: vectorStoreFiles.status, lease: vectorStoreFiles.leaseExpiresAt })
    .from(vectorStoreFiles)
    .where(eq(vectorStoreFiles.seq, claim.row.seq))
    .limit(1);
  return row?.status === 'completed' && row.lease === claim.lease;
}

async function fail(deps: IngestDeps, claim: Claim, lastError: VectorStoreFileError): Promise<boolean> {
  const [row] = await deps.db
    .update(vectorStoreFiles)
    .set({ status: 'failed', lastError, leaseExpiresAt: null })
    .where(held(claim))
    .returning({ seq: vectorStoreFiles.seq });
  return row !== undefined;
}

/** Back in the queue once the refusing policy's window resets; the attempt does not count. */
async function defer(deps: IngestDeps, claim: Claim, error: ApiError): Promise<boolean> {
  const seconds = Number(error.headers['retry-after'] ?? '60');
  const retryAt = deps.now() + Math.min(Math.max(Number.isFinite(seconds) ? seconds : 60, 1), 24 * 3600) * 1000;
  const [row] = await deps.db
    .update(vectorStoreFiles)
    .set({ leaseExpiresAt: retryAt, attempts: sql`max(${vectorStoreFiles.attempts} - 1, 0)` })
    .where(held(claim))
    .returning({ seq: vectorStoreFiles.seq });
  return row !== undefined;
}

/** What a file's last_error says: the extraction's reason, the provider's, or a generic one. */
function fileError(error: unknown): VectorStoreFileError {
  if (error instanceof ExtractionError) return { code: error.code, message: error.message };
  if (error instanceof UpstreamError)
    return { code: 'server_error', message: `The embeddings provider failed: ${error.message}` };
  if (error instanceof ApiError) return { code: 'server_error', message: error.message };
  return { code: 'server_error', message: 'The file could not be indexed because of an internal error.' };
}
