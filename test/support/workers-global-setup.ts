import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { bundleWorker, TARGETS } from '../../scripts/bundle-worker';
import { startSqld } from '../../scripts/sqld';
import { DatabaseProxy } from './database-proxy';
import { migrateDatabase, openDatabase } from '../../src/db/node';
import { generateKeyBase64 } from '../../src/lib/secrets';
import { createApiKey, revokeApiKey } from '../../src/resources/identities/api-keys';
import { initialise } from '../../src/resources/identities/organisations';
import { createWorkspace } from '../../src/resources/identities/workspaces';
import { deflatedBlanks, pdf } from './documents';
import { fakeEmbedding, startFakeUpstream, type FakeUpstreamServer } from './fake-upstream';
import { insertStore, SEARCH_DIMENSIONS, SEARCH_FILES } from './vector-stores';
import { startSandboxServer } from './sandbox-server';

/**
 * Runs in Node, once per `vitest run` that includes the workers project: a real libSQL server
 * (sqld) on a free loopback port, migrated and given a tenant, for the Worker under test to reach
 * as its LIBSQL_URL (through a DatabaseProxy, which a test can ask to hold a thread's statements). The keys are created here with the app's own services, then handed to the
 * tests (`inject('workersTenant')`), because code inside workerd cannot open a Node database.
 * Also the fake Chat Completions server, in Node (it serves over node:http), for the runs, a second
 * one that drops the connections it has answered on (test/workers/runs-and-rate-limits.test.ts), the ingest
 * Worker's bundle, which vitest.config.ts runs beside the gateway, and `gateway sandbox`'s server where
 * this host has a sandbox (test/workers/sandbox.test.ts calls it from workerd).
 */

export default async function setup(project: TestProject) {
  const bundleDir = mkdtempSync(join(tmpdir(), 'ingest-worker-'));
  const bundled = bundleWorker(TARGETS.ingest, bundleDir, 'ignore');
  // A PDF of 200 KB whose content stream inflates to 200 MiB, past the ingest Worker's bound; made here, in Node.
  const pdfBomb = deflatedBlanks(200 * 1024 * 1024).then((content) =>
    pdf({ deflatedContent: content, pages: ['After the bomb'] }).toString('base64'),
  );
  pdfBomb.catch(() => undefined);
  // Awaited below; a failure before then is not unhandled.
  bundled.catch(() => undefined);
  const sqld = await startSqld();
  // The Worker's way to the database: holds what a test asks it to (test/workers/run-on-thread.test.ts).
  const proxy = await DatabaseProxy.start({ target: sqld.url });
  const fake = await startFakeUpstream().catch(async (error: unknown) => {
    await proxy.close();
    await sqld.stop();
    throw error;
  });
  let dropping: FakeUpstreamServer | undefined;
  let sandbox: Awaited<ReturnType<typeof startSandboxServer>> = null;
  const stop = async () => {
    await fake.close();
    await dropping?.close();
    await sandbox?.close();
    await proxy.close();
    await sqld.stop();
    rmSync(bundleDir, { recursive: true, force: true });
  };
  try {
    dropping = await startFakeUpstream({ dropReusedConnections: true });
    sandbox = await startSandboxServer();
    const database = await openDatabase({ DATA_DIR: sqld.dir, LIBSQL_URL: sqld.url });
    try {
      await migrateDatabase(database.db);
      const now = Date.now();
      const created = await initialise(database.db, now);
      if (!created) throw new Error('A fresh sqld database was already initialised');
      const doomed = await createApiKey(database.db, {
        kind: 'workspace',
        organisationId: created.organisation_id,
        workspaceId: created.workspace_id,
        name: 'revoked',
        now,
      });
      await revokeApiKey(database.db, doomed.record.id, now);
      // Test files run in parallel on this one database: the runs get a workspace of their own, so
      // that the policies they create stay out of the policy tests' lists and counts.
      const runsWorkspace = await createWorkspace(database.db, {
        organisationId: created.organisation_id,
        slug: 'runs',
        now,
      });
      const runsKey = await createApiKey(database.db, {
        kind: 'workspace',
        organisationId: created.organisation_id,
        workspaceId: runsWorkspace.id,
        name: 'runs',
        now,
      });
      // A workspace whose default virtual key test/workers/responses.test.ts makes: its SDK is
      // configured by base URL and key alone, as an application's is, without changing the other
      // workspaces' defaults.
      const responsesWorkspace = await createWorkspace(database.db, {
        organisationId: created.organisation_id,
        slug: 'responses',
        now,
      });
      const responsesKey = await createApiKey(database.db, {
        kind: 'workspace',
        organisationId: created.organisation_id,
        workspaceId: responsesWorkspace.id,
        name: 'responses',
        now,
      });
      // A workspace with a vector store, for the searches in workerd (test/workers/file-search.test.ts):
      // its vectors are the fake provider's, as its /v1/embeddings answers them for the store's model.
      const searchWorkspace = await createWorkspace(database.db, {
        organisationId: created.organisation_id,
        slug: 'search',
        now,
      });
      const searchKey = await createApiKey(database.db, {
        kind: 'workspace',
        organisationId: created.organisation_id,
        workspaceId: searchWorkspace.id,
        name: 'search',
        now,
      });
      const texts = SEARCH_FILES.flatMap((file) => file.chunks);
      const vectors = texts.map((text) => Float32Array.from(fakeEmbedding(text, SEARCH_DIMENSIONS)));
      const store = await insertStore(
        database.db,
        searchWorkspace.id,
        SEARCH_FILES,
        { vectors, dimensions: SEARCH_DIMENSIONS, virtualKeyId: null },
        now,
      );
      project.provide('ingestWorkerScript', await bundled);
      project.provide('pdfBomb', await pdfBomb);
      project.provide('sqldUrl', sqld.url);
      project.provide('databaseProxyUrl', proxy.url);
      project.provide('searchTenant', {
        workspaceKey: searchKey.plaintext,
        vectorStoreId: store.id,
        fileIds: store.fileIds,
      });
      project.provide('upstreamUrl', fake.baseURL);
      project.provide('droppingUpstreamUrl', dropping.baseURL);
      project.provide('encryptionKey', generateKeyBase64());
      project.provide('sandboxServer', sandbox && { url: sandbox.url, secret: sandbox.secret });
      project.provide('workersTenant', {
        organisationId: created.organisation_id,
        workspace: { id: created.workspace_id, slug: created.workspace_slug },
        workspaceKey: created.workspace_api_key,
        orgKey: created.organisation_api_key,
        revokedKey: doomed.plaintext,
        runsWorkspaceKey: runsKey.plaintext,
        responsesWorkspaceKey: responsesKey.plaintext,
      });
    } finally {
      database.close();
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return stop;
}
