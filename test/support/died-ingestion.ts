import type { Db } from '../../src/db/client';
import { vectorStoreFiles } from '../../src/db/schema';

/**
 * A vector store file as an ingest invocation that claimed it and died leaves it: in progress, one
 * attempt, its lease past. Nothing sends the queue a message for it; the ingest Worker's cron does.
 * Runtime-neutral: for the workerd tests and the reliability suite.
 */
export async function insertDiedIngestion(
  db: Db,
  file: { vectorStoreId: string; fileId: string; workspaceId: string },
): Promise<void> {
  await db.insert(vectorStoreFiles).values({
    ...file,
    batchId: null,
    status: 'in_progress',
    chunkingStrategy: { type: 'other' },
    attributes: {},
    createdAt: Date.now(),
    attempts: 1,
    leaseExpiresAt: Date.now() - 1000,
    apiKeyId: null,
  });
}
