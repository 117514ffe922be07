/**
 * Where files are ingested (read, extracted, chunked, embedded, written: retrieval/ingest.ts),
 * away from the request that added them: an upload or a store's creation never waits for
 * embeddings. Node ingests in its own process (runtime/node/ingest-host.ts). The Workers gateway announces
 * the files on a Queue (runtime/workers/ingest-queue.ts) to the ingest Worker (ingest-worker.ts): the
 * ingestion libraries would not fit its own bundle. A Workers deployment without the queue binding
 * has none (deps.ingestion is null): adding files to a vector store is refused with
 * `ingestion_unavailable`.
 */
export interface IngestionHost {
  /**
   * Files were queued (vector_store_files rows in progress): start ingesting them, in the
   * background, kept alive by `context.waitUntil`.
   */
  wake(context: { waitUntil(task: Promise<unknown>): void }): void;
}
