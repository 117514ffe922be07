#!/usr/bin/env node
// The `gateway` command of the package: the admin CLI, compiled (scripts/build-node.mjs).
import { existsSync } from 'node:fs';

const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(cli)) {
  console.error('The CLI is not built: run `npm run build:node` in the package first.');
  process.exit(1);
}
await import(cli.href);
