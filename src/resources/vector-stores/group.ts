import { Hono } from 'hono';
import type { ApiEnv } from '../identities/env';
import { vectorStoreSearchRoutes } from './search-routes';
import { vectorStoreRoutes } from './routes';

/**
 * /v1/vector_stores as one group: the search route runs behind routes.ts's middleware (the beta
 * header, workspace()), as it did when both were mounted on the app, so they load together (app.ts).
 */
export const vectorStoreGroup = new Hono<ApiEnv>().route('/', vectorStoreRoutes).route('/', vectorStoreSearchRoutes);
