import type { Operation } from '../../http/lazy-group';

/** /v1/completions's operations, in routes.ts's order: app.ts's lazy stub (http/lazy-group.ts). */
export const COMPLETION_OPERATIONS: readonly Operation[] = [['POST', '/']];
