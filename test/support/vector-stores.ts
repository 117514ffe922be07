import { defined } from './defined';
import type { Db } from '../../src/db/client';
import type { FileAttributes, VectorStoreFileStatus } from '../../src/db/schema';
import { files, vectorStoreChunks, vectorStoreFiles, vectorStores } from '../../src/db/schema';
import { newId } from '../../src/lib/ids';
import { embedTexts, vectorBlob } from '../../src/retrieval/embed';
import { embeddingKey } from '../../src/resources/virtual-keys/embedding-key';
import type { Tenant, TestGateway } from './gateway';

/**
 * A vector store of a tenant with files and chunks, written with the real database and embedded
 * with the real embedTexts (against the gateway's upstream: the fake's deterministic
 * /v1/embeddings). Stands in for ingestion (built on another branch) until it lands: the rows
 * are the ones ingestion writes, so search reads what it will read then.
 */

export interface SeedFile {
  filename: string;
  /** The file's chunks, in order. */
  chunks: string[];
  attributes?: FileAttributes;
  /** Default `completed`: only those are searchable. */
  status?: VectorStoreFileStatus;
}

export interface SeededStore {
  id: string;
  /** The file ids, in the order of `files`. */
  fileIds: string[];
}

export const EMBEDDINGS_MODEL = 'text-embedding-3-small';

/** The store test/support/workers-global-setup.ts writes for the workerd tests, of the gateway's default dimensions. */
export const SEARCH_DIMENSIONS = 512;
export const SEARCH_FILES: SeedFile[] = [
  {
    filename: 'policies.md',
    chunks: ['Refunds are granted within 30 days of purchase.', 'Shipping takes five business days.'],
  },
  { filename: 'office.txt', chunks: ['Our office is in Paris, near the river.'] },
];

/** The tenant needs a virtual key for EMBEDDINGS_MODEL (its default key, or one whose models match). */
export async function seedStore(gateway: TestGateway, tenant: Tenant, seedFiles: SeedFile[]): Promise<SeededStore> {
  const texts = seedFiles.flatMap((file) => file.chunks);
  const target = {
    workspaceId: tenant.workspace.id,
    apiKeyId: tenant.workspaceKeyId,
    virtualKeyId: null,
    model: EMBEDDINGS_MODEL,
    dimensions: null,
  };
  const embedded = texts.length > 0 ? await embedTexts(gateway.deps, embeddingKey, target, texts) : null;
  return insertStore(gateway.database.db, tenant.workspace.id, seedFiles, embedded, gateway.clock.now());
}

/**
 * The rows of a store whose chunks' vectors are given (in the order of the files' chunks), for a
 * database the test reaches without the app's deps (test/support/workers-global-setup.ts, for the workerd tests).
 */
export async function insertStore(
  db: Db,
  workspaceId: string,
  seedFiles: SeedFile[],
  embedded: { vectors: Float32Array[]; dimensions: number; virtualKeyId: string | null } | null,
  at: number,
): Promise<SeededStore> {
  const id = newId('vs');
  await db.insert(vectorStores).values({
    id,
    workspaceId,
    name: 'seeded',
    metadata: {},
    createdAt: at,
    lastActiveAt: at,
    embeddingModel: EMBEDDINGS_MODEL,
    embeddingDimensions: embedded?.dimensions ?? null,
    virtualKeyId: embedded?.virtualKeyId ?? null,
  });
  const fileIds: string[] = [];
  let next = 0;
  for (const file of seedFiles) {
    const fileId = newId('file');
    fileIds.push(fileId);
    const bytes = file.chunks.join('\n').length;
    await db.insert(files).values({
      id: fileId,
      workspaceId,
      purpose: 'assistants',
      filename: file.filename,
      bytes,
      contentType: 'text/plain',
      blobKey: `seeded/${fileId}`,
      createdAt: at,
    });
    await db.insert(vectorStoreFiles).values({
      vectorStoreId: id,
      fileId,
      workspaceId,
      status: file.status ?? 'completed',
      usageBytes: bytes,
      chunkingStrategy: { type: 'static', static: { max_chunk_size_tokens: 800, chunk_overlap_tokens: 400 } },
      attributes: file.attributes ?? {},
      createdAt: at,
    });
    if (file.chunks.length > 0) {
      await db.insert(vectorStoreChunks).values(
        file.chunks.map((text, chunkIndex) => ({
          vectorStoreId: id,
          fileId,
          chunkIndex,
          text,
          tokens: text.split(/\s+/).length,
          embedding: vectorBlob(defined(defined(embedded).vectors[next++])),
        })),
      );
    }
  }
  return { id, fileIds };
}
