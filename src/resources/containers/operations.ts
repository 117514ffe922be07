import type { Operation } from '../../http/lazy-group';

/** /v1/containers's operations, in routes.ts's order: app.ts's lazy stub (http/lazy-group.ts). */
export const CONTAINER_OPERATIONS: readonly Operation[] = [
  ['POST', '/'],
  ['GET', '/'],
  ['GET', '/:container_id'],
  ['DELETE', '/:container_id'],
  ['POST', '/:container_id/files'],
  ['GET', '/:container_id/files'],
  ['GET', '/:container_id/files/:file_id'],
  ['DELETE', '/:container_id/files/:file_id'],
  ['GET', '/:container_id/files/:file_id/content'],
];
