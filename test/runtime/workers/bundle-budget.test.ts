import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bundleSize, bundleWorker, TARGETS } from '../../../scripts/bundle-worker';

/**
 * The gateway Worker's bundle, made as `wrangler deploy` makes it, stays within its budget
 * (`npm run build:worker` prints its size). Wrangler bundles a dynamic import's module into the one
 * script: an import of ingestion's PDF and DOCX readers from a request's path once grew it from 159
 * to 877 KiB gzipped, past Workers Free's start-up allowance for nothing most requests use.
 */

const outdir = mkdtempSync(join(tmpdir(), 'bundle-budget-'));
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

describe("the gateway Worker's bundle", () => {
  it(`is within its budget of ${TARGETS.gateway.budgetKiB} KiB gzipped`, async () => {
    const path = await bundleWorker(TARGETS.gateway, outdir, 'ignore');
    const { gzipKiB } = bundleSize(path);
    expect(gzipKiB).toBeGreaterThan(50);
    expect(gzipKiB).toBeLessThanOrEqual(TARGETS.gateway.budgetKiB);
  }, 120_000);
});
