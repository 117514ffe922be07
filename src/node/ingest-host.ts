import { claimNext, ingestClaimed, ingestLimits, nextClaimAt, type IngestDeps } from '../retrieval/ingest';
import type { IngestionHost } from '../retrieval/host';

/**
 * Ingestion in this process (retrieval/ingest.ts): at most GATEWAY_INGEST_CONCURRENCY files at a
 * time, each worker claiming the next file until none is free. Extraction and tokenizing pause on
 * the process's event-loop slices (deps.slices), so that a large file does not hold other
 * tenants' requests. Once idle, the host wakes itself when the earliest waiting file is due (a
 * lease of another process, a rate-limit window); node/start.ts also wakes it at start and
 * periodically, for what a crashed process left.
 */
export function inProcessIngestionHost(deps: IngestDeps): IngestionHost {
  const limits = ingestLimits(deps.config);
  let running = 0;
  /** Wakes so far: a worker that finds nothing to claim looks again if a wake came meanwhile. */
  let wakes = 0;
  let waitUntil: (task: Promise<unknown>) => void = () => undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const worker = async () => {
    try {
      for (;;) {
        const seen = wakes;
        const claim = await claimNext(deps);
        if (claim !== null) await ingestClaimed(deps, claim, limits);
        else if (seen === wakes) break;
      }
    } catch (error) {
      deps.log.error('ingestion worker failed', { error });
    } finally {
      running--;
      if (running === 0) await scheduleNext();
    }
  };

  const start = () => {
    wakes++;
    while (running < deps.config.GATEWAY_INGEST_CONCURRENCY) {
      running++;
      waitUntil(worker());
    }
  };

  const scheduleNext = async () => {
    const at = await nextClaimAt(deps).catch(() => null);
    if (at === null || running > 0) return;
    clearTimeout(timer);
    timer = setTimeout(start, Math.max(at - deps.now(), 0) + 50);
    timer.unref();
  };

  return {
    wake(context) {
      waitUntil = (task) => context.waitUntil(task);
      start();
    },
  };
}
