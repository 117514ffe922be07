import { responseRoutes } from '../../resources/responses/routes';
import { completionRoutes } from '../../resources/completions/routes';
import { containerRoutes } from '../../resources/containers/routes';
import { conversationRoutes } from '../../resources/conversations/routes';
import { embeddingRoutes } from '../../resources/embeddings/routes';
import { fileRoutes } from '../../resources/files/routes';
import { moderationRoutes } from '../../resources/moderations/routes';
import { reconcileRun } from '../../resources/runs/execution/recovery';
import { vectorStoreGroup } from '../../resources/vector-stores/group';
import type { routeGroups as lazyRouteGroups } from '../../resources/route-groups';

/**
 * resources/route-groups.ts for the Worker's script (wrangler.toml's `[alias]`): the groups
 * themselves, mounted as before they were lazy on Node. The script is one module that wrangler
 * bundles whole, so a stub would load nothing later and only add to it (that module says more).
 * Imported in the order app.ts imported the groups before: the script's modules follow it, and its
 * gzipped size moved by 0.9 KiB with the order alone.
 */
export const routeGroups: typeof lazyRouteGroups = () => ({
  conversations: conversationRoutes(reconcileRun),
  containers: containerRoutes,
  files: fileRoutes,
  completions: completionRoutes,
  embeddings: embeddingRoutes,
  moderations: moderationRoutes,
  responses: responseRoutes,
  vectorStores: vectorStoreGroup,
});
