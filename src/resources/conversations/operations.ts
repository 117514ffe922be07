import type { Operation } from '../../http/lazy-group';

/** /v1/conversations's operations, in routes.ts's order: app.ts's lazy stub (http/lazy-group.ts). */
export const CONVERSATION_OPERATIONS: readonly Operation[] = [
  ['POST', '/'],
  ['GET', '/:conversation_id'],
  ['POST', '/:conversation_id'],
  ['DELETE', '/:conversation_id'],
  ['POST', '/:conversation_id/items'],
  ['GET', '/:conversation_id/items'],
  ['GET', '/:conversation_id/items/:item_id'],
  ['DELETE', '/:conversation_id/items/:item_id'],
];
