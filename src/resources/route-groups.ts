import { lazyGroup } from '../http/lazy-group';
import { COMPLETION_OPERATIONS } from './completions/operations';
import { CONTAINER_OPERATIONS } from './containers/operations';
import { CONVERSATION_OPERATIONS } from './conversations/operations';
import { EMBEDDING_OPERATIONS } from './embeddings/operations';
import { FILE_OPERATIONS } from './files/operations';
import { MODERATION_OPERATIONS } from './moderations/operations';
import { RESPONSE_OPERATIONS } from './responses/operations';
import { reconcileRun } from './runs/execution/recovery';
import { VECTOR_STORE_OPERATIONS } from './vector-stores/operations';

/**
 * The route groups few requests use, as app.ts mounts them: each a stub until its first request loads
 * it (http/lazy-group.ts) with a dynamic `import()`. On Node, esbuild makes each group a chunk beside
 * dist/node.js (scripts/build-node.mjs), which a process that never serves the group never loads.
 * Made for each app, so that what an app has loaded is its own (test/http/lazy-group.test.ts); the
 * modules themselves load once in a process.
 *
 * The Worker's script gets runtime/workers/route-groups.ts instead (wrangler.toml's `[alias]`): the
 * groups themselves. Wrangler bundles a dynamic import into the script, wrapping every module under it
 * for evaluation on demand, 9 KiB more gzipped; docs/workers.md ("Bundle") says what splitting would take.
 */
export const routeGroups = () => ({
  conversations: lazyGroup('conversations', CONVERSATION_OPERATIONS, () =>
    import('./conversations/routes').then((group) => group.conversationRoutes(reconcileRun)),
  ),
  containers: lazyGroup('containers', CONTAINER_OPERATIONS, () =>
    import('./containers/routes').then((group) => group.containerRoutes),
  ),
  files: lazyGroup('files', FILE_OPERATIONS, () => import('./files/routes').then((group) => group.fileRoutes)),
  completions: lazyGroup('completions', COMPLETION_OPERATIONS, () =>
    import('./completions/routes').then((group) => group.completionRoutes),
  ),
  embeddings: lazyGroup('embeddings', EMBEDDING_OPERATIONS, () =>
    import('./embeddings/routes').then((group) => group.embeddingRoutes),
  ),
  moderations: lazyGroup('moderations', MODERATION_OPERATIONS, () =>
    import('./moderations/routes').then((group) => group.moderationRoutes),
  ),
  responses: lazyGroup('responses', RESPONSE_OPERATIONS, () =>
    import('./responses/routes').then((group) => group.responseRoutes),
  ),
  vectorStores: lazyGroup('vector_stores', VECTOR_STORE_OPERATIONS, () =>
    import('./vector-stores/group').then((group) => group.vectorStoreGroup),
  ),
});
