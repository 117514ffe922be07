import { claimNext, ingestClaimed, ingestOptions, nextClaimAt, type IngestDeps } from '../retrieval/ingest';
import { threadParsers } from './extract-thread';
import type { IngestionHost } from '../retrieval/host';

/**
 * Ingestion in this process (retrieval/ingest.ts): at most GATEWAY_INGEST_CONCURRENCY files at a
 * time, each worker claiming the next file until none is free. HTML and DOCX are parsed on a
 * thread of their own (extract-thread.ts); PDF pages and tokenizing pause on the process's
 * event-loop slices (deps.slices): a large file does not hold other tenants' requests. Once idle, the host wakes itself when the earliest waiting file is due (a
 * lease of another process, a rate-limit window); node/start.ts also wakes it at start and
 * periodically, for what a crashed process left.
 */
/** A document the extraction thread has not parsed in this time fails; its heap is bounded too. */
const PARSE_TIMEOUT_MS = 120_000;
const PARSE_HEAP_MB = 512;

export function inProcessIngestionHost(deps: IngestDeps): IngestionHost {
  // HTML and DOCX parse on a thread of their own; PDFs page by page and text here, pausing on deps.slices.
  const options = ingestOptions(deps.config, threadParsers({ timeoutMs: PARSE_TIMEOUT_MS, maxHeapMb: PARSE_HEAP_MB }));
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
        if (claim !== null) await ingestClaimed(deps, claim, options);
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
