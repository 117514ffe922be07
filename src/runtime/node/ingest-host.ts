import {
  claimNext,
  ingestClaimed,
  ingestOptions,
  nextClaimAt,
  type Claim,
  type IngestDeps,
} from '../../retrieval/ingest';
import type { IngestionHost } from '../../retrieval/host';
import { chunkerPool, type ChunkerEntry } from './chunker-pool';
import { embeddingKey } from '../../resources/virtual-keys/embedding-key';

/**
 * Ingestion in this process (retrieval/ingest.ts): at most GATEWAY_INGEST_CONCURRENCY files at a
 * time, and at most GATEWAY_INGEST_CONCURRENCY_PER_WORKSPACE of one workspace, so that a tenant
 * whose embeddings provider never answers, or who adds a hundred large files, holds only its own
 * share of the slots. Each worker claims the next file of a workspace below its share until none
 * is left; claims are made one at a time, so that two workers never both take a workspace's last
 * place. Documents are read and chunked in processes of their own (chunker-pool.ts). Once idle,
 * the host wakes itself when the earliest waiting file is due (a lease of another process, a
 * rate-limit window); runtime/node/start.ts also wakes it at start and periodically, for what a crashed
 * process left.
 */
export function inProcessIngestionHost(deps: IngestDeps, chunkerEntry?: ChunkerEntry): IngestionHost {
  const { config } = deps;
  const chunker = chunkerPool({
    processes: config.GATEWAY_INGEST_CONCURRENCY,
    maxCpuMs: config.GATEWAY_INGEST_MAX_CPU_SECONDS * 1000,
    maxMemoryMb: config.GATEWAY_INGEST_MAX_MEMORY_MB,
    entry: chunkerEntry,
  });
  const options = ingestOptions(config, chunker, embeddingKey);
  let running = 0;
  /** Wakes so far: a worker that finds nothing to claim looks again if a wake came meanwhile. */
  let wakes = 0;
  /** Files in hand, by workspace. */
  const inHand = new Map<string, number>();
  let claiming: Promise<unknown> = Promise.resolve();
  let waitUntil: (task: Promise<unknown>) => void = () => undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;

  /** The next file of a workspace below its share, counted in hand before the next claim is made. */
  const claim = (): Promise<Claim | null> => {
    const claimed = claiming.then(async () => {
      const full = [...inHand]
        .filter(([, files]) => files >= config.GATEWAY_INGEST_CONCURRENCY_PER_WORKSPACE)
        .map(([workspace]) => workspace);
      const next = await claimNext(deps, full);
      if (next) inHand.set(next.row.workspaceId, (inHand.get(next.row.workspaceId) ?? 0) + 1);
      return next;
    });
    claiming = claimed.catch(() => undefined);
    return claimed;
  };

  const done = (workspaceId: string) => {
    const files = (inHand.get(workspaceId) ?? 1) - 1;
    if (files === 0) inHand.delete(workspaceId);
    else inHand.set(workspaceId, files);
  };

  const worker = async () => {
    try {
      for (;;) {
        const seen = wakes;
        const next = await claim();
        if (next !== null) {
          try {
            await ingestClaimed(deps, next, options);
          } finally {
            done(next.row.workspaceId);
          }
          // A place of that workspace is free: a worker that stopped for want of files may find one now.
          start();
        } else if (seen === wakes) break;
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
    while (running < config.GATEWAY_INGEST_CONCURRENCY) {
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
