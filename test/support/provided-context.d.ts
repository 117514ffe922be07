/**
 * What test/support/workers-global-setup.ts hands to the tests with `provide` (read with `inject`), typed for both
 * the Node and the workerd test projects.
 */
declare module 'vitest' {
  export interface ProvidedContext {
    /** The sqld started for the workerd tests, migrated (http://127.0.0.1:<port>). */
    sqldUrl: string;
    /**
     * The Worker's LIBSQL_URL: a DatabaseProxy (test/support/database-proxy.ts) in front of that sqld,
     * whose holds a test controls over HTTP (remoteDatabaseHold).
     */
    databaseProxyUrl: string;
    /** The fake Chat Completions server for the workerd tests: a virtual key's base_url (…/v1). */
    upstreamUrl: string;
    /**
     * A second one, whose connections are dropped once they carried an answer: what a kept-alive
     * connection that the upstream closed while idle looks like to the next call sent on it.
     */
    droppingUpstreamUrl: string;
    /** The ingest Worker's bundle (wrangler.ingest.toml), run beside the gateway in those tests. */
    ingestWorkerScript: string;
    /** A PDF whose content stream inflates to 200 MiB (test/support/documents.ts), base64. */
    pdfBomb: string;
    /**
     * `gateway sandbox`'s server (test/support/sandbox-server.ts) on loopback, and its secret; null
     * where this host has no sandbox (no bubblewrap, or Python without its packages).
     */
    sandboxServer: { url: string; secret: string } | null;
    /** The Worker's GATEWAY_ENCRYPTION_KEY in those tests. */
    encryptionKey: string;
    /** A workspace of that database with a vector store (test/support/vector-stores.ts, SEARCH_FILES). */
    searchTenant: { workspaceKey: string; vectorStoreId: string; fileIds: string[] };
    /** A tenant created in that database before the tests start. */
    workersTenant: {
      organisationId: string;
      workspace: { id: string; slug: string };
      workspaceKey: string;
      orgKey: string;
      /** A workspace key of the same organisation, revoked. */
      revokedKey: string;
      /** A key of a second workspace of the organisation, where test/workers/runs-and-rate-limits.test.ts works. */
      runsWorkspaceKey: string;
      /** A key of a third, whose default virtual key test/workers/responses.test.ts makes. */
      responsesWorkspaceKey: string;
    };
  }
}

export {};
