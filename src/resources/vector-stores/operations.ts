import type { Operation } from '../../http/lazy-group';

/** /v1/vector_stores's operations, in group.ts's order (routes.ts's, then search-routes.ts's): app.ts's lazy stub (http/lazy-group.ts). */
export const VECTOR_STORE_OPERATIONS: readonly Operation[] = [
  ['POST', '/:vector_store_id/file_batches'],
  ['GET', '/:vector_store_id/file_batches/:batch_id'],
  ['POST', '/:vector_store_id/file_batches/:batch_id/cancel'],
  ['GET', '/:vector_store_id/file_batches/:batch_id/files'],
  ['POST', '/:vector_store_id/files'],
  ['GET', '/:vector_store_id/files'],
  ['GET', '/:vector_store_id/files/:file_id'],
  ['POST', '/:vector_store_id/files/:file_id'],
  ['DELETE', '/:vector_store_id/files/:file_id'],
  ['GET', '/:vector_store_id/files/:file_id/content'],
  ['POST', '/'],
  ['GET', '/'],
  ['GET', '/:vector_store_id'],
  ['POST', '/:vector_store_id'],
  ['DELETE', '/:vector_store_id'],
  ['POST', '/:vector_store_id/search'],
];
