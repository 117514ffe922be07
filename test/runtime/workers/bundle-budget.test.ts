import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bundleSize, bundleWorker, TARGETS } from '../../../scripts/bundle-worker';
import { buildWorkerModules, modulesGzipKiB, staleModules } from '../../../scripts/build-worker-modules';

/**
 * The gateway Worker's bundle, made as `wrangler deploy` makes it, stays within its budget
 * (`npm run build:worker` prints its size). Wrangler bundles a dynamic import's module into the one
 * script: an import of ingestion's PDF and DOCX readers from a request's path once grew it from 159
 * to 877 KiB gzipped, past Workers Free's start-up allowance for nothing most requests use. What
 * few requests use is a module beside the script (scripts/build-worker-modules.ts), imported by a
 * path the runtime resolves from the script's place.
 */

const outdir = mkdtempSync(join(tmpdir(), 'bundle-budget-'));
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

describe("the gateway Worker's bundle", () => {
  it(`is within its budget of ${TARGETS.gateway.budgetKiB} KiB gzipped (${TARGETS.gateway.uploadBudgetKiB} with the modules beside it), its modules beside it where its imports name them`, async () => {
    const path = await bundleWorker(TARGETS.gateway, outdir, 'ignore');
    const { gzipKiB } = bundleSize(path);
    expect(gzipKiB).toBeGreaterThan(50);
    expect(gzipKiB).toBeLessThanOrEqual(TARGETS.gateway.budgetKiB);
    // Every import left to the runtime names a module uploaded beside the script, from the script's place.
    const imported = [...readFileSync(path, 'utf8').matchAll(/\bimport\("([^"]+)"\)/g)].map((match) => match[1]);
    expect(imported).toContain('./runtime/workers/lazy/html-to-text.mjs');
    for (const specifier of imported) expect(existsSync(join(dirname(path), specifier ?? '')), specifier).toBe(true);
    // wrangler.toml's [alias] keeps Drizzle's Postgres column classes out (src/runtime/workers/drizzle-pg-enum.ts).
    expect(readFileSync(path, 'utf8')).not.toContain('PgColumnBuilder');
    // and @libsql/client's Hrana client, which the Worker does not use (src/runtime/workers/libsql-client-http.ts).
    expect(readFileSync(path, 'utf8')).not.toContain('Stream was gracefully closed');
    // ... and gives the script the route groups themselves, not Node's stubs (src/runtime/workers/route-groups.ts):
    // wrangler inlines their dynamic imports, 9 KiB more.
    expect(readFileSync(path, 'utf8')).not.toContain('Update its OPERATIONS');
    // The script and the modules beside it, which only some requests load: the upload.
    const upload = gzipKiB + modulesGzipKiB(await buildWorkerModules());
    expect(upload).toBeLessThanOrEqual(TARGETS.gateway.uploadBudgetKiB);
  }, 120_000);

  it('carries modules beside it that are what the locked libraries build to (npm run build:worker-modules)', async () => {
    expect(staleModules(await buildWorkerModules())).toEqual([]);
  });
});
