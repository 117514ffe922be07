import { join, relative } from 'node:path';
import { bundleSize, bundleWorker, TARGETS } from './bundle-worker';
import { ROOT } from './wrangler';

/**
 * `npm run build:worker`: bundles the gateway Worker exactly as `wrangler deploy` would, without
 * uploading (into dist/worker/), then prints the bundle's gzipped size and fails above the budget. Workers'
 * free plan allows 3 MB compressed; the budget keeps cold starts short.
 * `npm run build:ingest-worker` (argument `ingest`): the same for the ingest Worker
 * (wrangler.ingest.toml, into dist/ingest/), which carries the extraction and tokenizer libraries.
 */

const ingest = process.argv[2] === 'ingest';
const target = ingest ? TARGETS.ingest : TARGETS.gateway;
let path: string;
try {
  // Directories of their own: dist/ also holds the Node build (scripts/build-node.mjs).
  path = await bundleWorker(target, join(ROOT, ingest ? 'dist/ingest' : 'dist/worker'));
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
}
const { rawKiB, gzipKiB } = bundleSize(path);
console.log(
  `${relative(ROOT, path)}: ${rawKiB.toFixed(1)} KiB, ${gzipKiB.toFixed(1)} KiB gzipped (budget ${target.budgetKiB} KiB)`,
);
if (gzipKiB > target.budgetKiB) {
  console.error(`The Worker bundle is over its budget of ${target.budgetKiB} KiB gzipped.`);
  process.exit(1);
}
