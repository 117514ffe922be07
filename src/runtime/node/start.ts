import type { Config } from '../../config';
import { migrateDatabase, openDatabase, type NodeDatabase } from '../../db/node';
import type { Deps } from '../../deps';
import { FILE_PURGE_INTERVAL_MS, purgeExpiredFiles } from '../../resources/files/commands';
import { sweepStoredBlobs, sweepUploads } from '../../resources/files/sweep';
import { maintainVectorIndexes } from '../../retrieval/vector-index';
import { sweepRuns } from '../../resources/runs/execution/recovery';
import { checkEncryptionKey } from '../../resources/identities/encryption-check';
import { initialise, type InitResult } from '../../resources/identities/organisations';
import { leaseMs } from '../../resources/runs/queries';
import { createNodeApp } from './app';
import { nodeBlobStore } from './blob-store';
import { createNodeDeps } from './deps';
import { checkDataDir } from './data-dir';
import { encryptionKeySource, loadSecretBox } from './key-file';
import { otlpExport } from './otlp-export';
import { trimMemoryWhenIdle } from './memory-trim';
import { listen } from './server';

/**
 * The gateway on Node, started: what node.ts (the entry), the demo and the reliability suites run.
 * Nothing here runs on import.
 */

const INDEX_PASS_MS = 500;
const ORPHAN_SWEEP_INTERVAL_MS = 60 * 60 * 1000;
const INDEX_IDLE_MS = 30_000;

export interface RunningGateway {
  url: string;
  deps: Deps;
  database: NodeDatabase;
  /** Keys created by this start, when the database was empty. */
  initialised: InitResult | null;
  /** Stops listening, waits for background work (up to `drainMs`), closes the database. */
  close(drainMs?: number): Promise<void>;
}

/**
 * Opens and migrates the database, listens on HOST:PORT, initialises an empty database, and settles
 * runs and uploads left behind by a crash of this or another process, now and periodically (and
 * deletes expired files and file bytes nothing holds, less often).
 */
export async function startGateway(config: Config, overrides: Partial<Deps> = {}): Promise<RunningGateway> {
  // The data directory and the key first: either stops the start before the database is touched.
  checkDataDir(config.DATA_DIR);
  const secrets = overrides.secrets ?? (await loadSecretBox(config));
  const database = await openDatabase(config);
  try {
    await migrateDatabase(database.db);
    await checkEncryptionKey(database.db, secrets, {
      keySource: encryptionKeySource(config),
      now: (overrides.now ?? Date.now)(),
    });
  } catch (error) {
    database.close();
    throw error;
  }
  const deps = await createNodeDeps(config, database, { ...overrides, secrets });
  for (const warning of database.warnings) deps.log.warn(warning);
  const { fetch, tasks } = createNodeApp(deps);
  let requests = 0;
  // The port before the first organisation: its keys are shown once, by the start that made them,
  // so that start must be one that can serve (a taken port must fail it before any key exists). A
  // request in between finds no key, as on any gateway before its first start.
  const { server, url, answering } = await listen((request) => {
    requests++;
    return fetch(request);
  }, config).catch((error: unknown) => {
    database.close();
    throw error;
  });
  const initialised = await initialise(database.db, deps.now()).catch((error: unknown) => {
    server.close();
    database.close();
    throw error;
  });
  deps.log.info('listening', { url, database: database.location });
  // Checked once at start (the local sandbox starts Python once to see that it imports its
  // libraries), so that the log says whether runs may use code_interpreter, and why not.
  void deps.sandbox.availability().then((availability) => deps.log.info('code_interpreter', availability));
  const stopTrimming = trimMemoryWhenIdle({
    // Start-up grows the young generation to its largest (its modules' schemas, the migrations) and
    // leaves garbage: given back with the first quiet, about 10 MB of an idle gateway's RSS.
    firstBaselineBytes: 0,
    // npm start's flags hold the heap close to what it holds live (--heap-growing-percent=50) and the
    // young generation to 8 MB: a burst that leaves 8 MB to give back is worth the collections.
    growthBytes: 8 * 1024 * 1024,
    activity: () => requests,
    busy: () => tasks.size > 0 || answering() > 0,
    trimmed: ({ heapBytesBefore, heapBytesAfter }) =>
      deps.log.debug('memory given back after a burst', {
        heap_mb_before: mb(heapBytesBefore),
        heap_mb_after: mb(heapBytesAfter),
      }),
  });

  /** Runs `task` now and every `ms`, in the background (tracked: close() waits for it), logging a failure. */
  const periodically = (ms: number, what: string, task: () => Promise<unknown>) => {
    const run = () => tasks.track(task().catch((error: unknown) => deps.log.error(`${what} failed`, { error })));
    run();
    const timer = setInterval(run, ms);
    timer.unref();
    return timer;
  };
  // Twice per lease: a run whose executor died is settled at most 1.5 leases after its last renewal.
  // Files of vector stores left in progress by a crash of this or another process (their lease
  // passes), and any queued while no worker ran, are looked at with each sweep.
  const sweeper = periodically(leaseMs(config) / 2, 'run recovery sweep', async () => {
    deps.ingestion?.wake({ waitUntil: (task) => tasks.track(task) });
    const settled = await sweepRuns(deps);
    if (settled > 0) deps.log.warn('settled runs left behind', { count: settled });
  });
  // Uploads whose reservation lapsed (a crash, a kill -9 of this or another process) and deletes
  // that failed: found through an index, so as often as the runs' sweep (resources/files/sweep.ts).
  const uploadSweeper = periodically(leaseMs(config) / 2, 'uploads sweep', async () => {
    const swept = await sweepUploads(deps);
    if (swept > 0) deps.log.warn('deleted what uploads left behind', { count: swept });
  });
  const purger = periodically(FILE_PURGE_INTERVAL_MS, 'expired files sweep', async () => {
    const purged = await purgeExpiredFiles(deps);
    if (purged > 0) deps.log.info('deleted expired files', { count: purged });
  });
  // The metrics to an OpenTelemetry collector, when one is configured (docs/metrics.md).
  const exportMetrics = otlpExport(config, deps.metrics, Date.now());
  const exporter = exportMetrics
    ? periodically(config.OTEL_METRIC_EXPORT_INTERVAL, 'OTLP metrics export', exportMetrics)
    : undefined;
  // Everything under DATA_DIR/files that nothing holds: walks every workspace's files, so at start
  // and hourly only.
  const stored = nodeBlobStore(config);
  const orphanSweeper = periodically(ORPHAN_SWEEP_INTERVAL_MS, 'orphan blobs sweep', async () => {
    const removed = await sweepStoredBlobs(deps, stored.list());
    if (removed > 0) deps.log.warn('deleted file bytes that nothing held', { count: removed });
  });

  // Vector indexes of large stores (retrieval/vector-index.ts): while one is back-filled, a pass of
  // INDEX_PASS_MS every other INDEX_PASS_MS, so the writer is free half the time; otherwise a look
  // for stores past the threshold (and deleted ones) every INDEX_IDLE_MS.
  let indexer: NodeJS.Timeout | undefined;
  let closing = false;
  const index = () =>
    tasks.track(
      maintainVectorIndexes(deps, { budgetMs: INDEX_PASS_MS }).then(
        (building) => {
          if (!closing) indexer = setTimeout(index, building ? INDEX_PASS_MS : INDEX_IDLE_MS).unref();
        },
        (error: unknown) => {
          deps.log.error('vector index maintenance failed', { error });
          if (!closing) indexer = setTimeout(index, INDEX_IDLE_MS).unref();
        },
      ),
    );
  index();

  return {
    url,
    deps,
    database,
    initialised,
    async close(drainMs = 10_000) {
      stopTrimming();
      for (const timer of [sweeper, uploadSweeper, purger, orphanSweeper, exporter]) clearInterval(timer);
      closing = true;
      clearTimeout(indexer);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Idle keep-alive connections would hold close() open; streams in flight end on their own.
        if ('closeIdleConnections' in server) server.closeIdleConnections();
      });
      if (!(await tasks.drain(drainMs))) {
        deps.log.warn('background tasks still running at exit', { count: tasks.size });
      }
      await deps.sandbox.close();
      // The rate-limit refusals not written yet (ratelimit/stored-refusals.ts): only a crash loses them.
      await deps.counters.flush();
      database.close();
    },
  };
}

const mb = (bytes: number) => Math.round(bytes / 1024 / 102.4) / 10;
