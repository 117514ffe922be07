import { open, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findUpward } from '../../db/node';
import { fileStream } from './blob-store';

/**
 * src/http/openapi/assets of this package, found from this module's file upward: the module is
 * src/runtime/node/static-assets.ts under tsx and vitest, and part of dist/node.js once built. The Worker
 * serves the same directory as its static assets (wrangler.toml [assets]).
 */
const ASSETS = join('src', 'http', 'openapi', 'assets');
export const ASSETS_DIRECTORY = join(
  findUpward(dirname(fileURLToPath(import.meta.url)), join(ASSETS, 'openapi.json')),
  ASSETS,
);

/** A file of that directory, streamed as it is read; null for a name that is not a plain file name there. */
export async function nodeStaticAsset(name: string): Promise<ReadableStream<Uint8Array> | null> {
  if (!/^[\w.-]+$/.test(name) || name.startsWith('.')) return null;
  const file = await open(join(ASSETS_DIRECTORY, name), 'r').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return null;
    throw error;
  });
  return file && fileStream(file);
}

/**
 * The OpenAPI document, read from that directory each time it is asked for: imported, its 750 KB
 * of JSON were a module's object literal, some 6 MB of heap that every server held for a request
 * that few ever make (`npm run bench:memory-floor`, docs/development.md).
 */
export async function nodeOpenApiDocument(): Promise<object> {
  const document: unknown = JSON.parse(await readFile(join(ASSETS_DIRECTORY, 'openapi.json'), 'utf8'));
  if (typeof document !== 'object' || document === null)
    throw new Error('openapi/assets/openapi.json is not an object');
  return document;
}
