import type { Operation } from '../../http/lazy-group';

/** /v1/responses's operations, in routes.ts's order: app.ts's lazy stub (http/lazy-group.ts). */
export const RESPONSE_OPERATIONS: readonly Operation[] = [
  ['POST', '/'],
  ['POST', '/input_tokens'],
  ['GET', '/:response_id'],
  ['DELETE', '/:response_id'],
  ['POST', '/:response_id/cancel'],
  ['GET', '/:response_id/input_items'],
];
