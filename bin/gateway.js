#!/usr/bin/env node
// @ts-check
// The `gateway` command of the package, and what `npm run gateway` runs: the admin CLI, compiled
// (dist/cli.js). In a checkout, dist/ is built first when a source changed since its last build
// (scripts/build-node.mjs, which otherwise only compares a stamp), in this process: a second node
// would cost a start of its own. Source maps on, as --enable-source-maps would: stack traces name
// src/ lines.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = new URL('..', import.meta.url);
const builder = new URL('scripts/build-node.mjs', root);
if (existsSync(builder) && existsSync(new URL('src', root))) {
  const { buildNode } = await import(builder.href);
  await buildNode(fileURLToPath(root));
}
const cli = new URL('dist/cli.js', root);
if (!existsSync(cli)) {
  console.error('The CLI is not built: run `npm run build:node` in the package first.');
  process.exit(1);
}
process.setSourceMapsEnabled(true);
await import(cli.href);
