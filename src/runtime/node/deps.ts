import { upstreamShares, type Config } from '../../config';
import type { NodeDatabase } from '../../db/node';
import type { Deps } from '../../deps';
import { createLogger } from '../../logger';
import { nodeSlices } from './slices';
import { LibsqlCounterStore, PolicyCache } from '../../ratelimit';
import { SettingsCache } from '../../db/settings-cache';
import { settingsLoaders } from '../settings-loaders';
import { upstreamRules } from '../../resources/virtual-keys/upstream-rules';
import { nodeBlobStore } from './blob-store';
import { loadSecretBox } from './key-file';
import { inProcessIngestionHost } from './ingest-host';
import type { ChunkerEntry } from './chunker-pool';
import { inProcessRunHost } from './run-host';
import { requestBody } from './request-body';
import { nodeOpenApiDocument, nodeStaticAsset } from './static-assets';
import { upstreamFetch } from './upstream-fetch';
import { UpstreamUrlJudgements } from '../../lib/upstream-url';
import { loadOnce } from '../../lib/load-once';
import { ModelLists } from '../../providers/models';
import { RunExecutions } from '../../resources/runs/execution/executions';
import { configuredSandbox } from '../../sandbox/configured';
import { withKeptAvailability } from '../../sandbox/kept-availability';
import { localSandbox } from './sandbox';
import { gatewayMetrics, type Metrics } from '../../metrics/gateway';
import { readIngestionQueue } from '../../retrieval/claims';

/**
 * A response's events (Deps.responseEvents), a chunk of their own (scripts/build-node.mjs): a process
 * that streams no response never loads them, as it loads no lazy route group (resources/route-groups.ts).
 */
const responseStream = loadOnce(() => import('../../resources/responses/stream'));

/**
 * The Node deps around an open database. `overrides` lets tests swap the clock, the logger or the
 * secret box; without one, the box comes from loadSecretBox. `chunkerEntry`: the code the
 * ingestion's chunker processes run (chunker-pool.ts's chunkerEntry() by default).
 */
export async function createNodeDeps(
  config: Config,
  database: NodeDatabase,
  overrides: Partial<Deps> = {},
  chunkerEntry?: ChunkerEntry,
): Promise<Deps> {
  const log = overrides.log ?? createLogger(config.LOG_LEVEL);
  const deps: Omit<Deps, 'runHost' | 'ingestion'> = {
    db: database.db,
    config,
    log,
    secrets: overrides.secrets ?? (await loadSecretBox(config)),
    metrics: nodeMetrics(database),
    // Refusals are written by a timer that does not keep the process alive; a clean stop flushes them (start.ts).
    counters: new LibsqlCounterStore(database.countersClient, {
      log,
      refusals: { schedule: (task, ms) => void setTimeout(task, ms).unref() },
    }),
    policyCache: new PolicyCache(database.db),
    settings: new SettingsCache(database.db, settingsLoaders(database.db), { provisional: !database.embedded }),
    now: Date.now,
    slices: nodeSlices,
    blobs: nodeBlobStore(config),
    // The remote one at GATEWAY_SANDBOX_URL, else bubblewrap's here (its first use checks that it runs).
    sandbox: overrides.sandbox ?? withKeptAvailability(configuredSandbox(config, (limits) => localSandbox({ limits }))),
    fetch: upstreamFetch({ rules: () => upstreamRules(database.db, config, { now: deps.now() }) }),
    upstreamShares: upstreamShares(config),
    executions: new RunExecutions(),
    responseEvents: async (target, run, response) =>
      (await responseStream()).responseEvents(database.db)(target, run, response),
    upstreamUrls: new UpstreamUrlJudgements(),
    modelLists: new ModelLists(),
    requestBody,
    openApiDocument: nodeOpenApiDocument,
    staticAsset: nodeStaticAsset,
    libraries: { htmlToText: () => import('html-to-text'), multipart: () => import('multitars') },
    ...overrides,
  };
  return {
    ...deps,
    runHost: overrides.runHost ?? inProcessRunHost(deps),
    ingestion: overrides.ingestion === undefined ? inProcessIngestionHost(deps, chunkerEntry) : overrides.ingestion,
  };
}

/** The process's metrics, with its memory and the ingestion's queue read at each scrape. */
function nodeMetrics(database: NodeDatabase): Metrics {
  const metrics = gatewayMetrics();
  database.timings.reportTo(metrics.database);
  metrics.onScrape((gauges) => gauges.memory(process.memoryUsage()));
  metrics.onScrape(readIngestionQueue(database.db));
  return metrics;
}
