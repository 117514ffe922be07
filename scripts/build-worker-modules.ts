import { readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

/**
 * `npm run build:worker-modules`: the gateway Worker's modules beside its script, which it imports
 * only when a request needs them (Deps.libraries: html-to-text for a message's HTML file, multitars for an upload).
 * Wrangler bundles every import, dynamic ones too, into the script, except a file that its rules
 * name as a module of its own (wrangler.toml: `find_additional_modules`, `rules`): each library is
 * built here into one such file, src/runtime/workers/lazy/<name>.mjs, uploaded beside the script
 * and evaluated on its first import, so that the script's start-up does not pay for it. Committed,
 * as the console's files are, so that neither a deploy nor `wrangler dev` needs this step;
 * `--check` fails when the committed files are not what the locked libraries build to
 * (test/runtime/workers/bundle-budget.test.ts runs it).
 */

const ROOT = join(import.meta.dirname, '..');
const LAZY = join(ROOT, 'src', 'runtime', 'workers', 'lazy');

/** The libraries, by the module's name; each file's types are its `.d.mts` beside it (hand-written). */
export const WORKER_MODULES = { 'html-to-text': 'html-to-text', multitars: 'multitars' } as const;

export interface WorkerModule {
  path: string;
  bytes: Uint8Array;
}

export async function buildWorkerModules(): Promise<WorkerModule[]> {
  return Promise.all(
    Object.entries(WORKER_MODULES).map(async ([name, library]) => {
      const result = await build({
        absWorkingDir: ROOT,
        entryPoints: [library],
        bundle: true,
        minify: true,
        format: 'esm',
        platform: 'neutral',
        mainFields: ['module', 'main'],
        target: 'es2022',
        write: false,
        outfile: join(LAZY, `${name}.mjs`),
        legalComments: 'none',
        logLevel: 'warning',
        sourcemap: false,
      });
      const file = result.outputFiles[0];
      if (!file) throw new Error(`esbuild built nothing for ${library}.`);
      return { path: join(LAZY, `${name}.mjs`), bytes: file.contents };
    }),
  );
}

/** The modules whose committed file differs from the build: empty when they agree. */
export function staleModules(built: WorkerModule[]): string[] {
  return built
    .filter((module) => {
      try {
        return !Buffer.from(readFileSync(module.path)).equals(Buffer.from(module.bytes));
      } catch {
        return true;
      }
    })
    .map((module) => relative(ROOT, module.path));
}

/** The modules gzipped, together, in KiB: what they add to the upload beside the script. */
export function modulesGzipKiB(built: WorkerModule[]): number {
  return built.reduce((sum, module) => sum + gzipSync(module.bytes, { level: 9 }).length, 0) / 1024;
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  const built = await buildWorkerModules();
  if (process.argv.includes('--check')) {
    const stale = staleModules(built);
    if (stale.length > 0) {
      console.error(`Not what the libraries build to (run npm run build:worker-modules): ${stale.join(', ')}`);
      process.exit(1);
    }
  } else {
    for (const module of built) writeFileSync(module.path, module.bytes);
  }
  for (const module of built) {
    const gzipKiB = gzipSync(module.bytes, { level: 9 }).length / 1024;
    console.log(
      `${relative(ROOT, module.path)}: ${(module.bytes.length / 1024).toFixed(1)} KiB, ${gzipKiB.toFixed(1)} KiB gzipped`,
    );
  }
}
