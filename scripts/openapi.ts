import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../src/db/node';
import { createNodeApp } from '../src/runtime/node/app';
import { nodeConfig } from '../src/runtime/node/config';
import { createNodeDeps } from '../src/runtime/node/deps';
import { DOCUMENT_PATH, openApiDocument, serialiseDocument } from '../src/http/openapi/generate';

/**
 * `npm run openapi`: regenerates src/http/openapi/assets/openapi.json from the app's routes and their
 * validating schemas (src/http/openapi/generate.ts). Run it after changing a route or a request schema;
 * test/http/openapi/document.test.ts fails until the file matches.
 */

const dataDir = mkdtempSync(join(tmpdir(), 'gateway-openapi-'));
try {
  const config = nodeConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'error' });
  const database = await openDatabase(config);
  const { app } = createNodeApp(await createNodeDeps(config, database));
  writeFileSync(DOCUMENT_PATH, serialiseDocument(await openApiDocument(app)));
  database.close();
  console.log(`Wrote ${DOCUMENT_PATH}`);
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}
