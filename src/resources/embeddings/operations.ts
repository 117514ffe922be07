import type { Operation } from '../../http/lazy-group';

/** /v1/embeddings's operations, in routes.ts's order: app.ts's lazy stub (http/lazy-group.ts). */
export const EMBEDDING_OPERATIONS: readonly Operation[] = [['POST', '/']];
