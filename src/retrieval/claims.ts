import { and, eq, isNull, lte, or, type SQL } from 'drizzle-orm';
import { vectorStoreFiles } from '../db/schema';

/**
 * Which vector store files an ingestion may claim at `now`: in progress, with no lease or a lease
 * that has passed. Its own module, free of the extraction libraries, so that the gateway Worker
 * (which only announces work: runtime/workers/ingest-queue.ts) shares it with ingestion itself (ingest.ts).
 */
export function claimableAt(now: number): SQL {
  const claimable = and(
    eq(vectorStoreFiles.status, 'in_progress'),
    or(isNull(vectorStoreFiles.leaseExpiresAt), lte(vectorStoreFiles.leaseExpiresAt, now)),
  );
  if (!claimable) throw new Error('and() of two conditions is a condition');
  return claimable;
}
