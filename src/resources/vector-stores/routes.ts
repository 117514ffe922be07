import { Hono, type Context } from 'hono';
import { assistantsBeta } from '../../http/middleware/assistants-beta';
import { validate } from '../../http/middleware/validate';
import { workspace } from '../identities/middleware/workspace';
import { cursorListQuery } from '../../http/schemas';
import {
  createFileBatchBody,
  createVectorStoreBody,
  createVectorStoreFileBody,
  listVectorStoreFilesQuery,
  updateVectorStoreBody,
  updateVectorStoreFileBody,
} from './schemas';
import {
  cancelFileBatch,
  deleteStoreFile,
  deleteVectorStore,
  batchFileCounts,
  emptyCounts,
  figuresOf,
  getFileBatch,
  getStoreFile,
  getVectorStore,
  listStoreFiles,
  listVectorStores,
  storeFileChunks,
  updateStoreFileAttributes,
  storeFigures,
  updateVectorStore,
  type StoreFigures,
  type VectorStoreRow,
} from './queries';
import { addStoreFile, createFileBatch, createVectorStore } from './commands';
import { listObject } from '../../http/lists';
import { besideRow, type Db } from '../../db/client';
import { liveBeside } from '../identities/middleware/api-key-auth';
import { toFileBatchJson, toVectorStoreFileJson, toVectorStoreJson } from './wire';
import type { ApiEnv, WorkspaceEnv } from '../identities/env';
import { requestContext } from '../../http/request-context';
import { responds } from '../../http/middleware/responds';
import { deletedObject, listOf } from '../../http/objects';
import {
  vectorStoreFileBatchObject,
  vectorStoreFileContentPage,
  vectorStoreFileObject,
  vectorStoreObject,
} from './objects';

/**
 * /v1/vector_stores (without /search): stores, their files and file batches, in the workspace of
 * workspace(). A store of another workspace is a 404, as is a file or batch of another store.
 */

type Ctx = Context<WorkspaceEnv>;

/** A store as JSON, with its figures. */
function storeJsonOf(c: Ctx, row: VectorStoreRow, figures: StoreFigures | undefined) {
  const { counts, bytes } = figures ?? { counts: emptyCounts(), bytes: 0 };
  return toVectorStoreJson(row, counts, bytes, c.get('deps').now());
}

/**
 * The batch `batchId` of the store `storeId`, and `beside` (a read by the batch's id) read beside it
 * (besideRow: one round trip to a database server), looked at only once the batch is the store's.
 */
function batchOf<T>(db: Db, storeId: string, batchId: string, beside: Promise<T>) {
  return besideRow(getFileBatch(db, storeId, batchId), beside);
}

/** The store named by the path, in the caller's workspace (404 otherwise). */
const storeOf = (c: Ctx) => getVectorStore(c.get('deps').db, c.get('actor').workspaceId, storeIdOf(c));

/**
 * The store named by the path, and what `read` reads by its id, read beside it (besideRow: one
 * round trip to a database server), looked at only once the store is the caller's.
 */
const besideStore = <T>(c: Ctx, read: (storeId: string) => Promise<T>) => besideRow(storeOf(c), read(storeIdOf(c)));

function storeIdOf(c: Ctx): string {
  const id = c.req.param('vector_store_id');
  if (id === undefined) throw new Error('storeIdOf serves only routes with a :vector_store_id');
  return id;
}

/** Most chunks the content endpoint answers in its one page. */
const CONTENT_CHUNKS = 10_000;

const storeRoutes = new Hono<WorkspaceEnv>()
  .post(
    '/',
    responds({ summary: 'Create a vector store', ok: vectorStoreObject }),
    validate('json', createVectorStoreBody),
    async (c) => {
      const { deps, actor, settings } = c.var;
      const { store, queued } = await createVectorStore(deps, actor, settings, c.req.valid('json'), requestContext(c));
      // A new store's figures are known: its files queued, none ingested yet.
      const counts = { ...emptyCounts(), in_progress: queued, total: queued };
      return c.json(storeJsonOf(c, store, { counts, bytes: 0 }));
    },
  )
  .get(
    '/',
    responds({ summary: 'List vector stores', ok: listOf(vectorStoreObject) }),
    validate('query', cursorListQuery),
    async (c) => {
      const page = await listVectorStores(c.get('deps').db, c.get('actor').workspaceId, c.req.valid('query'));
      return c.json(listObject(page, (row) => storeJsonOf(c, row, figuresOf(row.figures))));
    },
  )
  .get('/:vector_store_id', responds({ summary: 'Retrieve a vector store', ok: vectorStoreObject }), async (c) => {
    const [store, figures] = await besideStore(c, (id) => storeFigures(c.get('deps').db, [id]));
    return c.json(storeJsonOf(c, store, figures.get(store.id)));
  })
  .post(
    '/:vector_store_id',
    responds({ summary: 'Modify a vector store', ok: vectorStoreObject }),
    validate('json', updateVectorStoreBody),
    async (c) => {
      // The store and its figures (which a change to its name, metadata or expiry leaves as they
      // are) read beside whether the key is live, asked before anything is told; then the write.
      const { db } = c.get('deps');
      const [store, figures] = await liveBeside(
        c.var.settings,
        besideStore(c, (id) => storeFigures(db, [id])),
      );
      const updated = await updateVectorStore(db, store, c.req.valid('json'));
      return c.json(storeJsonOf(c, updated, figures.get(updated.id)));
    },
  )
  .delete(
    '/:vector_store_id',
    responds({ summary: 'Delete a vector store', ok: deletedObject('vector_store.deleted') }),
    async (c) => {
      const id = c.req.param('vector_store_id');
      await deleteVectorStore(c.get('deps').db, c.get('actor').workspaceId, id);
      return c.json({ id, object: 'vector_store.deleted' as const, deleted: true });
    },
  );

const fileRoutes = new Hono<WorkspaceEnv>()
  .post(
    '/:vector_store_id/files',
    responds({ summary: 'Add a file to a vector store', ok: vectorStoreFileObject }),
    validate('json', createVectorStoreFileBody),
    async (c) => {
      const { deps, actor, settings } = c.var;
      const storeId = c.req.param('vector_store_id');
      const row = await addStoreFile(deps, actor, settings, storeId, c.req.valid('json'), requestContext(c));
      return c.json(toVectorStoreFileJson(row));
    },
  )
  .get(
    '/:vector_store_id/files',
    responds({ summary: "List a vector store's files", ok: listOf(vectorStoreFileObject) }),
    validate('query', listVectorStoreFilesQuery),
    async (c) => {
      const query = c.req.valid('query');
      const [, page] = await besideStore(c, (storeId) => listStoreFiles(c.get('deps').db, { storeId }, query));
      return c.json(listObject(page, toVectorStoreFileJson));
    },
  )
  .get(
    '/:vector_store_id/files/:file_id',
    responds({ summary: 'Retrieve a vector store file', ok: vectorStoreFileObject }),
    async (c) => {
      const fileId = c.req.param('file_id');
      const [, file] = await besideStore(c, (storeId) => getStoreFile(c.get('deps').db, storeId, fileId));
      return c.json(toVectorStoreFileJson(file));
    },
  )
  .post(
    '/:vector_store_id/files/:file_id',
    responds({ summary: "Update a vector store file's attributes", ok: vectorStoreFileObject }),
    validate('json', updateVectorStoreFileBody),
    async (c) => {
      const store = await storeOf(c);
      const attributes = c.req.valid('json').attributes ?? {};
      return c.json(
        toVectorStoreFileJson(
          await updateStoreFileAttributes(c.get('deps').db, store.id, c.req.param('file_id'), attributes),
        ),
      );
    },
  )
  .delete(
    '/:vector_store_id/files/:file_id',
    responds({ summary: 'Remove a file from a vector store', ok: deletedObject('vector_store.file.deleted') }),
    async (c) => {
      const store = await storeOf(c);
      const id = c.req.param('file_id');
      await deleteStoreFile(c.get('deps').db, store.id, id);
      return c.json({ id, object: 'vector_store.file.deleted' as const, deleted: true });
    },
  )
  .get(
    '/:vector_store_id/files/:file_id/content',
    responds({ summary: "Retrieve a vector store file's content", ok: vectorStoreFileContentPage }),
    async (c) => {
      const store = await storeOf(c);
      const file = await getStoreFile(c.get('deps').db, store.id, c.req.param('file_id'));
      const texts = await storeFileChunks(c.get('deps').db, store.id, file.fileId, CONTENT_CHUNKS);
      return c.json({
        object: 'vector_store.file_content.page' as const,
        data: texts.map((text) => ({ type: 'text' as const, text })),
        has_more: false,
        next_page: null,
      });
    },
  );

const batchRoutes = new Hono<WorkspaceEnv>()
  .post(
    '/:vector_store_id/file_batches',
    responds({ summary: 'Create a file batch', ok: vectorStoreFileBatchObject }),
    validate('json', createFileBatchBody),
    async (c) => {
      const { deps, actor, settings } = c.var;
      const storeId = c.req.param('vector_store_id');
      const { batch, queued } = await createFileBatch(
        deps,
        actor,
        settings,
        storeId,
        c.req.valid('json'),
        requestContext(c),
      );
      // A new batch's figures are known: its files queued, none ingested yet.
      return c.json(toFileBatchJson(batch, { ...emptyCounts(), in_progress: queued, total: queued }));
    },
  )
  .get(
    '/:vector_store_id/file_batches/:batch_id',
    responds({ summary: 'Retrieve a file batch', ok: vectorStoreFileBatchObject }),
    async (c) => {
      const { db } = c.get('deps');
      const batchId = c.req.param('batch_id');
      const [, [batch, counts]] = await besideStore(c, (storeId) =>
        batchOf(db, storeId, batchId, batchFileCounts(db, batchId)),
      );
      return c.json(toFileBatchJson(batch, counts));
    },
  )
  .post(
    '/:vector_store_id/file_batches/:batch_id/cancel',
    responds({ summary: 'Cancel a file batch', ok: vectorStoreFileBatchObject }),
    async (c) => {
      // The store and the batch read beside whether the key is live, asked before anything is told.
      const [, batch] = await liveBeside(
        c.var.settings,
        besideStore(c, (storeId) => getFileBatch(c.get('deps').db, storeId, c.req.param('batch_id'))),
      );
      const cancelled = await cancelFileBatch(c.get('deps').db, batch, c.get('deps').now());
      return c.json(toFileBatchJson(cancelled.batch, cancelled.counts));
    },
  )
  .get(
    '/:vector_store_id/file_batches/:batch_id/files',
    responds({ summary: "List a file batch's files", ok: listOf(vectorStoreFileObject) }),
    validate('query', listVectorStoreFilesQuery),
    async (c) => {
      const query = c.req.valid('query');
      const { db } = c.get('deps');
      const batchId = c.req.param('batch_id');
      const [, [, page]] = await besideStore(c, (storeId) =>
        batchOf(db, storeId, batchId, listStoreFiles(db, { storeId, batchId }, query)),
      );
      return c.json(listObject(page, toVectorStoreFileJson));
    },
  );

/** /v1/vector_stores: the sub-resources first, so that no path segment is taken for a store id. */
export const vectorStoreRoutes = new Hono<ApiEnv>()
  .use(assistantsBeta(), workspace())
  .route('/', batchRoutes)
  .route('/', fileRoutes)
  .route('/', storeRoutes);
