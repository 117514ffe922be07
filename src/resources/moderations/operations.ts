import type { Operation } from '../../http/lazy-group';

/** /v1/moderations's operations, in routes.ts's order: app.ts's lazy stub (http/lazy-group.ts). */
export const MODERATION_OPERATIONS: readonly Operation[] = [['POST', '/']];
