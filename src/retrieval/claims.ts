import { and, eq, isNull, lte, or, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client';
import { vectorStoreFiles } from '../db/schema';
import type { ScrapeGauges } from '../metrics/gateway';

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

/** The most files `ingestionQueue` counts: a scrape reads at most that many index entries. */
export const QUEUE_COUNT_CAP = 10_000;

/**
 * The files in progress at `now`, up to QUEUE_COUNT_CAP: `waiting` for a claim (claimableAt), or
 * `ingesting` under a live lease. One read of the partial index on in-progress files.
 */
export async function ingestionQueue(db: Db, now: number): Promise<{ waiting: number; ingesting: number }> {
  const inProgress = db
    .select({ lease: vectorStoreFiles.leaseExpiresAt })
    .from(vectorStoreFiles)
    .where(eq(vectorStoreFiles.status, 'in_progress'))
    .limit(QUEUE_COUNT_CAP)
    .as('in_progress');
  const [row] = await db
    .select({
      all: sql<number>`count(*)`,
      waiting: sql<number>`coalesce(sum(${inProgress.lease} IS NULL OR ${inProgress.lease} <= ${now}), 0)`,
    })
    .from(inProgress);
  const all = Number(row?.all ?? 0);
  const waiting = Number(row?.waiting ?? 0);
  return { waiting, ingesting: all - waiting };
}

/** The queue's reading at each scrape (Metrics.onScrape), on Node and Workers alike. */
export function readIngestionQueue(db: Db): (gauges: ScrapeGauges) => Promise<void> {
  return async (gauges) => {
    const queue = await ingestionQueue(db, Date.now());
    gauges.ingestionQueue('waiting', queue.waiting);
    gauges.ingestionQueue('ingesting', queue.ingesting);
  };
}
