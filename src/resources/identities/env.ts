import type { ApiKeyVariables } from './middleware/api-key-auth';
import type { DepsVariables } from '../../http/middleware/deps';
import type { RequestIdVariables } from '../../http/middleware/request-id';
import type { ActorVariables } from './middleware/workspace';

/**
 * What every /v1 route can rely on: app.ts gives every request its deps and its id, and
 * authenticates every /v1 request before its route. A route adds what its own middleware sets
 * (workspace()); Hono types that from the middleware, which declares it.
 */
export type ApiEnv = { Variables: DepsVariables & RequestIdVariables & ApiKeyVariables };

/** A route behind workspace(), which sets the request's Actor: the workspace-scoped resources (assistants, threads, messages, runs, files, vector stores). */
export type WorkspaceEnv = { Variables: ApiEnv['Variables'] & ActorVariables };
