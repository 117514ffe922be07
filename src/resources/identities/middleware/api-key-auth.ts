import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../../errors';
import { isGatewayKeyShaped } from '../api-keys';
import type { AuthenticatedKey } from '../../../db/schema';
import type { Settings } from '../../../db/settings-cache';
import type { DepsVariables } from '../../../http/middleware/deps';

export const API_KEY_HEADER = 'x-gateway-api-key';

/** `settings`: the settings as of the request's start (db/settings-cache.ts), for its other lookups. */
export type ApiKeyVariables = { apiKey: AuthenticatedKey; settings: Settings };

/**
 * Requires a gateway API key, in `x-gateway-api-key` or as `Authorization: Bearer <key>` (what
 * OpenAI's SDKs send from `apiKey` / `OPENAI_API_KEY`). When both are sent, the header wins and the
 * bearer token is not looked at: a client may keep a provider key there. Missing is 401
 * `missing_api_key`; unknown or revoked is 401 `invalid_api_key` (one answer for both, so a revoked
 * key cannot be told from a guessed one); a key that is not shaped like a gateway key (a provider's
 * `sk-…`) is `invalid_api_key` too, with a message saying what to send instead. The key itself is
 * never repeated. Sets `c.get('apiKey')`, and `c.get('settings')`, read first.
 */
export const apiKeyAuth = () =>
  createMiddleware<{ Variables: DepsVariables & ApiKeyVariables }>(async (c, next) => {
    const presented = c.req.header(API_KEY_HEADER) || bearerToken(c.req.header('authorization'));
    if (!presented) throw new ApiError('missing_api_key');
    if (!isGatewayKeyShaped(presented)) throw notAGatewayKey();
    const settings = await c.get('deps').settings.now();
    const apiKey = await settings.apiKey(presented);
    if (!apiKey) throw new ApiError('invalid_api_key');
    c.set('apiKey', apiKey);
    c.set('settings', settings);
    await next();
  });

/** The token of `Bearer <token>` (the scheme is case-insensitive, RFC 9110); undefined otherwise. */
function bearerToken(authorization: string | undefined): string | undefined {
  const match = /^bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  return match?.[1];
}

const notAGatewayKey = () =>
  new ApiError(
    'invalid_api_key',
    "The API key provided is not a gateway API key (those start with 'gk_'); it may be a provider's key. " +
      "Send your gateway API key as 'Authorization: Bearer <key>' (the OpenAI SDKs' apiKey, OPENAI_API_KEY) or in " +
      "'x-gateway-api-key'. Provider keys belong in a virtual key (POST /v1/virtual-keys).",
  );
