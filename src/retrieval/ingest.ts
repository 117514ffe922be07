import { and, asc, eq, sql, type SQL } from 'drizzle-orm';
import { batchWrites, type Statement } from '../db/client';
import { files, vectorStoreChunks, vectorStoreFiles, vectorStores, type VectorStoreFileError } from '../db/schema';
import type { Deps } from '../deps';
import { concatBytes } from '../lib/bytes';
import { ApiError } from '../errors';
import { UpstreamError } from '../providers/types';
import type { VectorStoreFileRow } from '../services/vector-stores';
import { claimableAt } from './claims';
import { chunkText, TooManyChunks, type Chunk } from './chunk';
import { BATCH_TEXTS, embedTexts, vectorBlob, type EmbedDeps } from './embed';
import { extract, ExtractionError, formatOf, type Parsers } from './extract';

/**
 * Ingesting one file of a vector store: read its bytes from the blob store, extract its text,
 * chunk it, embed the chunks (retrieval/embed.ts), then write every chunk and mark the file
 * `completed` in one batch, so that nothing half-indexed is ever searchable.
 *
 * The vector_store_files row is the job. A worker claims an in-progress row whose lease is
 * absent or past (`lease_expires_at`, which is also the claim's token: every write of the
 * ingestion is conditional on the row being in progress with the token it last wrote), checks
 * the row between embedding calls (renewing the lease as it goes), and gives up without writing
 * as soon as the row is no longer its own: the file was removed, its batch cancelled, its store deleted (their rows and chunks go
 * in one batch, services/vector-stores.ts), or the lease was lost. A crashed ingestion is claimed
 * again once its lease passes, at most MAX_ATTEMPTS times; the workspace's own rate-limit policies
 * refusing an embedding call puts the file back until their window resets, without counting it.
 */

export type IngestDeps = EmbedDeps & Pick<Deps, 'blobs' | 'slices'>;

export const LEASE_MS = 5 * 60_000;
export const MAX_ATTEMPTS = 3;
/** A document's text holds at most this many characters per token of its chunk budget. */
const CHARS_PER_TOKEN_BOUND = 10;

export interface IngestOptions {
  maxFileBytes: number;
  maxChunks: number;
  /** Where HTML and DOCX are parsed (retrieval/extract.ts). */
  parsers: Parsers;
}

export function ingestOptions(config: IngestDeps['config'], parsers: Parsers): IngestOptions {
  return { maxFileBytes: config.GATEWAY_INGEST_MAX_FILE_BYTES, maxChunks: config.GATEWAY_INGEST_MAX_CHUNKS, parsers };
}

/** A file claimed for ingestion: its row, with the lease it holds. */
export interface Claim {
  row: VectorStoreFileRow;
  lease: number;
}

const held = (claim: Claim) =>
  and(eq(vectorStoreFiles.seq, claim.row.seq), eq(vectorStoreFiles.status, 'in_progress'), eq(vectorStoreFiles.leaseExpiresAt, claim.lease));

/**
 * Claims the next file to ingest: in progress, its lease absent or past. Files whose lease passed
 * MAX_ATTEMPTS times fail first. Null when there is none.
 */
export async function claimNext(deps: Pick<IngestDeps, 'db' | 'now'>): Promise<Claim | null> {
  const now = deps.now();
  const free = claimableAt(now);
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
    .where(free)
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
export async function ingestClaimed(deps: IngestDeps, claim: Claim, options: IngestOptions): Promise<'completed' | 'failed' | 'deferred' | 'abandoned'> {
  try {
    const chunks = await chunksOf(deps, claim, options);
    const vectors = await embedChunks(deps, claim, chunks);
    if (vectors === null) return 'abandoned';
    return (await complete(deps, claim, chunks, vectors)) ? 'completed' : 'abandoned';
  } catch (error) {
    if (error instanceof ApiError && error.code === 'rate_limit_exceeded') {
      return (await defer(deps, claim, error)) ? 'deferred' : 'abandoned';
    }
    const lastError = fileError(error);
    if (lastError.code === 'server_error' && !(error instanceof UpstreamError) && !(error instanceof ApiError)) {
      deps.log.error('ingestion failed', { vector_store_id: claim.row.vectorStoreId, file_id: claim.row.fileId, error });
    }
    return (await fail(deps, claim, lastError)) ? 'failed' : 'abandoned';
  }
}

/** The file's text in chunks, by its store file's strategy. */
async function chunksOf(deps: IngestDeps, claim: Claim, options: IngestOptions): Promise<Chunk[]> {
  const [file] = await deps.db.select().from(files).where(eq(files.id, claim.row.fileId)).limit(1);
  if (!file) throw new ExtractionError('invalid_file', 'The file was deleted before it could be indexed.');
  const format = formatOf(file.filename, file.contentType);
  if (format === null) {
    throw new ExtractionError('unsupported_file', `Files of this type cannot be indexed (${file.filename}): send text, Markdown, JSON, code, HTML, PDF or DOCX.`);
  }
  if (file.bytes > options.maxFileBytes) {
    throw new ExtractionError('invalid_file', `The file is larger than ${options.maxFileBytes} bytes, the most a file may index.`);
  }
  const bytes = await readBlob(deps, file.blobKey, options.maxFileBytes);
  const strategy = claim.row.chunkingStrategy;
  const sizes = strategy.type === 'static' ? strategy.static : { max_chunk_size_tokens: 800, chunk_overlap_tokens: 400 };
  const text = await extract(bytes, format, {
    maxChars: options.maxChunks * sizes.max_chunk_size_tokens * CHARS_PER_TOKEN_BOUND,
    slices: deps.slices,
    parsers: options.parsers,
  });
  try {
    return await chunkText(text, {
      maxTokens: sizes.max_chunk_size_tokens,
      overlapTokens: sizes.chunk_overlap_tokens,
      maxChunks: options.maxChunks,
      slices: deps.slices,
    });
  } catch (error) {
    if (error instanceof TooManyChunks) {
      throw new ExtractionError('invalid_file', `The file's text makes more than ${error.maxChunks} chunks, the most a file may index.`);
    }
    throw error;
  }
}

async function readBlob(deps: IngestDeps, key: string, maxBytes: number): Promise<Uint8Array> {
  const stream = await deps.blobs.get(key);
  if (stream === null) throw new ExtractionError('invalid_file', "The file's content is missing from the blob store.");
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const part of stream) {
    size += part.byteLength;
    if (size > maxBytes) {
      await stream.cancel().catch(() => undefined);
      throw new ExtractionError('invalid_file', `The file is larger than ${maxBytes} bytes, the most a file may index.`);
    }
    parts.push(part);
  }
  return concatBytes(parts);
}

/**
 * The chunks' vectors, one embeddings call's worth at a time, checking the claim between calls;
 * null as soon as the file is no longer this claim's.
 */
async function embedChunks(deps: IngestDeps, claim: Claim, chunks: Chunk[]): Promise<{ vectors: Float32Array[]; dimensions: number } | null> {
  const [store] = await deps.db.select().from(vectorStores).where(eq(vectorStores.id, claim.row.vectorStoreId)).limit(1);
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
    const answer = await embedTexts(deps, target, chunks.slice(start, start + BATCH_TEXTS).map((chunk) => chunk.text));
    target.dimensions = answer.dimensions;
    vectors.push(...answer.vectors);
    if (!(await stillHeld(deps, claim))) return null;
  }
  return { vectors, dimensions: target.dimensions ?? 0 };
}

/**
 * Whether the row is still this claim's (a read: a cancelled or removed file stops being embedded
 * at once); the lease is moved on (a write) once a fifth of it has gone by.
 */
async function stillHeld(deps: IngestDeps, claim: Claim): Promise<boolean> {
  const now = deps.now();
  if (claim.lease - now > LEASE_MS - LEASE_MS / 5) {
    const [row] = await deps.db.select({ seq: vectorStoreFiles.seq }).from(vectorStoreFiles).where(held(claim)).limit(1);
    return row !== undefined;
  }
  const lease = now + LEASE_MS;
  const [row] = await deps.db.update(vectorStoreFiles).set({ leaseExpiresAt: lease }).where(held(claim)).returning({ seq: vectorStoreFiles.seq });
  if (row) claim.lease = lease;
  return row !== undefined;
}

/** Rows of chunks per INSERT: six parameters each, well under SQLite's 32,766. */
const ROWS_PER_INSERT = 200;

/**
 * The file completed with all its chunks, in one transaction, only while the claim holds: the
 * row is marked first, and each insert writes only if it is then this claim's completed row.
 */
async function complete(deps: IngestDeps, claim: Claim, chunks: Chunk[], embedded: { vectors: Float32Array[]; dimensions: number }): Promise<boolean> {
  const { db } = deps;
  const { vectorStoreId, fileId } = claim.row;
  const encoder = new TextEncoder();
  const usageBytes = chunks.reduce((sum, chunk, index) => sum + encoder.encode(chunk.text).byteLength + embedded.vectors[index]!.byteLength, 0);
  const mine: SQL = sql`EXISTS (SELECT 1 FROM ${vectorStoreFiles} WHERE ${vectorStoreFiles.seq} = ${claim.row.seq} AND ${vectorStoreFiles.status} = 'completed' AND ${vectorStoreFiles.leaseExpiresAt} = ${claim.lease})`;
  const statements: Statement[] = [
    db.update(vectorStoreFiles).set({ status: 'completed', usageBytes, lastError: null }).where(held(claim)),
  ];
  for (let start = 0; start < chunks.length; start += ROWS_PER_INSERT) {
    const rows = chunks.slice(start, start + ROWS_PER_INSERT).map(
      (chunk, offset) => sql`(${vectorStoreId}, ${fileId}, ${start + offset}, ${chunk.text}, ${chunk.tokens}, ${vectorBlob(embedded.vectors[start + offset]!)})`,
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
  if (error instanceof UpstreamError) return { code: 'server_error', message: `The embeddings provider failed: ${error.message}` };
  if (error instanceof ApiError) return { code: 'server_error', message: error.message };
  return { code: 'server_error', message: 'The file could not be indexed because of an internal error.' };
}
