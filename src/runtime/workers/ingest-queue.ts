import { vectorStoreFiles } from '../../db/schema';
import type { Deps } from '../../deps';
import type { Logger } from '../../logger';
import { claimableAt } from '../../retrieval/claims';
import type { IngestionHost } from '../../retrieval/host';

/**
 * Ingestion on Workers happens in a Worker of its own (ingest-worker.ts, wrangler.ingest.toml),
 * because the extraction and tokenizer libraries would not fit the gateway's bundle. The gateway
 * only announces work on a Queue; the files to ingest are the database's in-progress
 * vector_store_files rows, which the ingest Worker claims one by one. So a message carries nothing
 * but why it was sent, a lost or duplicated message costs nothing, and the ingest Worker's cron
 * sends one when files wait unclaimed (a lost message, a crash, a rate-limit window).
 */

export interface IngestWake {
  /** files_added: by the gateway; more: by a consumer that ran out of time; sweep: by the cron. */
  reason: 'files_added' | 'more' | 'sweep';
}

/** The gateway's host: one message per wake, sent after the response, through waitUntil. */
export function queueIngestionHost(queue: Queue<IngestWake>, log: Logger): IngestionHost {
  return {
    wake(context) {
      context.waitUntil(
        // Not lost if this fails: the ingest Worker's cron finds the files waiting.
        queue
          .send({ reason: 'files_added' })
          .catch((error: unknown) => log.error('ingestion queue send failed', { error })),
      );
    },
  };
}

/** The ingest Worker's cron: a message when a file is claimable now (retrieval/claims.ts). True when one was sent. */
export async function wakeForWaitingFiles(deps: Pick<Deps, 'db' | 'now'>, queue: Queue<IngestWake>): Promise<boolean> {
  const [row] = await deps.db
    .select({ seq: vectorStoreFiles.seq })
    .from(vectorStoreFiles)
    .where(claimableAt(deps.now()))
    .limit(1);
  if (row === undefined) return false;
  await queue.send({ reason: 'sweep' });
  return true;
}
