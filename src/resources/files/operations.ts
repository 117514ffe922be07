import type { Operation } from '../../http/lazy-group';

/** /v1/files's operations, in routes.ts's order: app.ts's lazy stub (http/lazy-group.ts). */
export const FILE_OPERATIONS: readonly Operation[] = [
  ['POST', '/', 'own-body'],
  ['GET', '/'],
  ['GET', '/:file_id'],
  ['DELETE', '/:file_id'],
  ['GET', '/:file_id/content'],
];
