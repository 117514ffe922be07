import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { exitCode, ROOT, spawnWrangler } from './wrangler';

/**
 * `npm run build:worker`: bundles the Worker exactly as `wrangler deploy` would, without uploading
 * (into dist/), then prints the bundle's gzipped size and fails above the budget. Workers' free
 * plan allows 3 MB compressed; the budget keeps cold starts short.
 */

const BUDGET_KIB = 300;
// Its own directory: dist/ also holds the Node build (scripts/build-node.mjs).
const outdir = join(ROOT, 'dist', 'worker');

rmSync(outdir, { recursive: true, force: true });
const code = await exitCode(spawnWrangler(['deploy', '--env=', '--dry-run', '--minify', '--outdir', outdir]));
if (code !== 0) process.exit(code);

// wrangler names the bundle after `main` (src/worker.ts).
const bundle = readFileSync(join(outdir, 'worker.js'));
const gzipKiB = gzipSync(bundle, { level: 9 }).length / 1024;
const rawKiB = bundle.length / 1024;
console.log(`dist/worker/worker.js: ${rawKiB.toFixed(1)} KiB, ${gzipKiB.toFixed(1)} KiB gzipped (budget ${BUDGET_KIB} KiB)`);
if (gzipKiB > BUDGET_KIB) {
  console.error(`The Worker bundle is over its budget of ${BUDGET_KIB} KiB gzipped.`);
  process.exit(1);
}
