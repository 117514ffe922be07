import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

/**
 * `npm run build:console`: the console's script and style sheet (src/console/client/) built by
 * esbuild into src/http/openapi/assets, the directory the gateway serves its own files from (on
 * Node read from the package, on Workers through the [assets] binding, outside the Worker's
 * bundle), under names that carry their content's hash, and src/console/assets.ts, which names
 * them for the page. Both are committed, as openapi.json is, so that neither `npm start` nor a
 * deploy needs a build step; `--check` builds in memory and fails when the committed files are not
 * what the sources build to (test/console/build.test.ts runs it). Fails too when the two files
 * gzipped pass the console's budget (docs/console.md).
 */

export const CONSOLE_BUDGET_GZIP_BYTES = 16 * 1024;

const ROOT = join(import.meta.dirname, '..');
const ASSETS = join(ROOT, 'src', 'http', 'openapi', 'assets');
const MANIFEST = join(ROOT, 'src', 'console', 'assets.ts');
const OLD_ASSET = /^console-[0-9a-f]{12}\.(js|css)$/;

export interface ConsoleBuild {
  files: { name: string; bytes: Uint8Array }[];
  manifest: string;
  gzipBytes: number;
}

export async function buildConsole(): Promise<ConsoleBuild> {
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: ['src/console/client/main.ts', 'src/console/client/console.css'],
    bundle: true,
    minify: true,
    format: 'esm',
    target: 'es2022',
    outdir: 'out',
    write: false,
    legalComments: 'none',
    logLevel: 'warning',
    // The same bytes on every machine: no source map, no path in the output.
    sourcemap: false,
  });
  const script = result.outputFiles.find((file) => file.path.endsWith('.js'));
  const style = result.outputFiles.find((file) => file.path.endsWith('.css'));
  if (!script || !style) throw new Error('esbuild built no script or no style sheet for the console.');
  const named = (bytes: Uint8Array, extension: string) => ({
    name: `console-${createHash('sha256').update(bytes).digest('hex').slice(0, 12)}.${extension}`,
    bytes,
    integrity: `sha384-${createHash('sha384').update(bytes).digest('base64')}`,
  });
  const js = named(script.contents, 'js');
  const css = named(style.contents, 'css');
  const manifest = `// Written by \`npm run build:console\` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: '${js.name}',
    integrity: '${js.integrity}',
  },
  style: {
    file: '${css.name}',
    integrity: '${css.integrity}',
  },
} as const;
`;
  const gzipBytes = gzipSync(js.bytes, { level: 9 }).length + gzipSync(css.bytes, { level: 9 }).length;
  return { files: [js, css], manifest, gzipBytes };
}

/** What differs between a build and the committed files: empty when they agree. */
export function staleFiles(built: ConsoleBuild): string[] {
  const stale = built.files
    .filter((file) => {
      try {
        return !Buffer.from(readFileSync(join(ASSETS, file.name))).equals(Buffer.from(file.bytes));
      } catch {
        return true;
      }
    })
    .map((file) => `src/http/openapi/assets/${file.name}`);
  let manifest = '';
  try {
    manifest = readFileSync(MANIFEST, 'utf8');
  } catch {
    // Missing: stale as well.
  }
  if (manifest !== built.manifest) stale.push('src/console/assets.ts');
  return stale;
}

function write(built: ConsoleBuild): void {
  for (const old of readdirSync(ASSETS).filter((name) => OLD_ASSET.test(name))) rmSync(join(ASSETS, old));
  for (const file of built.files) writeFileSync(join(ASSETS, file.name), file.bytes);
  writeFileSync(MANIFEST, built.manifest);
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  const built = await buildConsole();
  const budget = `${built.gzipBytes} bytes gzipped, budget ${CONSOLE_BUDGET_GZIP_BYTES}`;
  if (built.gzipBytes > CONSOLE_BUDGET_GZIP_BYTES) {
    console.error(`The console is over its budget: ${budget} (docs/console.md).`);
    process.exit(1);
  }
  if (process.argv.includes('--check')) {
    const stale = staleFiles(built);
    if (stale.length > 0) {
      console.error(`Not what src/console/client builds to: ${stale.join(', ')}. Run \`npm run build:console\`.`);
      process.exit(1);
    }
    console.log(`The console's built files are current (${budget}).`);
  } else {
    write(built);
    console.log(`Wrote ${built.files.map((file) => file.name).join(', ')} and src/console/assets.ts (${budget}).`);
  }
}
