import { createMiddleware } from 'hono/factory';
import { ApiError } from '../errors';
import { authenticateApiKey, type AuthenticatedKey } from '../services/api-keys';
import type { DepsVariables } from './deps';

export const API_KEY_HEADER = 'x-gateway-api-key';

export type ApiKeyVariables = { apiKey: AuthenticatedKey };

/**
 * Requires `x-gateway-api-key`: missing is 401 `missing_api_key`; unknown or revoked is 401
 * `invalid_api_key` (one answer for both, so a revoked key cannot be told from a guessed one).
 * Sets `c.var.apiKey`.
 */
export const apiKeyAuth = () =>
  createMiddleware<{ Variables: DepsVariables & ApiKeyVariables }>(async (c, next) => {
    const presented = c.req.header(API_KEY_HEADER);
    if (!presented) throw new ApiError('missing_api_key');
    const apiKey = await authenticateApiKey(c.var.deps.db, presented);
    if (!apiKey) throw new ApiError('invalid_api_key');
    c.set('apiKey', apiKey);
    await next();
  });
