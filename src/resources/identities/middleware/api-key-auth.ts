import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../../errors';
import { isGatewayKeyShaped } from '../api-keys';
import type { AuthenticatedKey } from '../../../db/schema';
import { isUniqueViolation, type RawStatement } from '../../../db/client';
import { GENERATION_MOVED, type Settings } from '../../../db/settings-cache';
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
    const cache = c.get('deps').settings;
    const check = provisionalCheck(c.req.method, c.req.path);
    const provisional = check ? cache.provisional(presented, check) : null;
    if (provisional) {
      c.set('apiKey', provisional.apiKey);
      c.set('settings', provisional.settings);
      await next();
      // A key revoked meanwhile: the answer is dropped for a 401 (a run's creation asked before it
      // wrote); so is it when the check itself failed, whose error is answered instead.
      let live = false;
      try {
        live = await provisional.settings.live();
      } finally {
        if (!live) await c.res.body?.cancel();
      }
      if (!live) throw new ApiError('invalid_api_key');
      return;
    }
    const { settings, apiKey } = await cache.authenticate(presented);
    if (!apiKey) throw new ApiError('invalid_api_key');
    c.set('apiKey', apiKey);
    c.set('settings', settings);
    await next();
  });

/**
 * Throws 401 `invalid_api_key` unless the key the request presented is live: what a request that
 * started on ProvisionalSettings asks before anything it does takes effect.
 */
export async function keyLive(settings: Settings): Promise<void> {
  if (!(await settings.live())) throw new ApiError('invalid_api_key');
}

/**
 * `read` (started by the caller), with keyLive asked beside it: one round trip to a database server
 * for both. The key's 401 comes first, before anything `read` found (a 404) is told.
 */
export async function liveBeside<T>(settings: Settings, read: Promise<T>): Promise<T> {
  read.catch(() => undefined);
  await keyLive(settings);
  return read;
}

/**
 * `write`, led by the settings' guard (ProvisionalSettings.guard) when they are assumed unchanged:
 * one round trip when they hold. When they moved it wrote nothing: the key is looked up again
 * (keyLive: 401 if it was revoked), and the write made again without the guard.
 */
export async function guardedWrite<T>(
  settings: Settings,
  write: (guard: RawStatement | null) => Promise<T>,
): Promise<T> {
  const guard = settings.guard();
  if (!guard) return write(null);
  try {
    const written = await write(guard);
    settings.guardHeld();
    return written;
  } catch (error) {
    if (!isUniqueViolation(error, GENERATION_MOVED)) throw error;
    await keyLive(settings);
    return write(null);
  }
}

/**
 * The requests that may start on settings assumed unchanged (ProvisionalSettings), on a database
 * server, where that saves a round trip, and when they read the generation again:
 * - `now`, beside their own first reads: reads of what is stored (threads, runs, conversations,
 *   responses, files, vector stores, stored chat completions, the assistants' list, usage, the
 *   rate-limit policies, read from their table and not through the policy cache), which
 *   an application polls (a run's status, a thread's messages, a file's), read as they are, not
 *   from what the settings keep (an assistant by its id is: it is not among them). They write
 *   nothing a tenant asked for (a run left behind may be settled, as any read of it does) and call
 *   no provider, so a key revoked meanwhile is caught before the answer leaves; and the models,
 *   whose virtual keys are read so, and which ask keyLive before asking a provider for its list
 *   (resources/models/commands.ts);
 * - `now`, beside the provider's call: the calls passed through to a provider (chat completions,
 *   completions, embeddings, moderations), which write nothing before it; their answer waits for
 *   the settings to be confirmed, and is made again on the settings read if they moved
 *   (identities/guessed.ts);
 * - `on demand`: writes whose first statement carries the check, led by the settings' guard
 *   (guardedWrite): a thread or a conversation created, modified or deleted (resources/threads/commands.ts,
 *   conversations/commands.ts), a message added to a thread, modified or deleted, a run's metadata, a
 *   conversation's items (read beside the conversation first, when they are more than text), a
 *   conversation's item deleted (read beside the conversation, keyLive asked with them), and a
 *   run on a thread, whose one transaction is led by it when what the run needs is held in memory,
 *   or which otherwise reads its thread, history and open run first and asks keyLive with them,
 *   before its admission (resources/runs/commands.ts): the generation is read only if the guard
 *   fails, if there is no guarded write, or if the request ends before it writes; a new thread with
 *   its run (POST /v1/threads/runs), likewise led by the guard, or asking keyLive first; tool
 *   outputs submitted, which read the run, its steps, its key and its thread's history and ask
 *   keyLive with them, before its admission; and a response created (POST /v1/responses), whose
 *   write is led by the guard when its input needs no read, or which otherwise confirms the
 *   settings before anything else (resources/responses/commands.ts); a vector store created, or
 *   files added to one, which read the store, the files, the embeddings model and virtual key they
 *   need and ask keyLive with them (resources/vector-stores/commands.ts), a store modified and a
 *   batch of files cancelled likewise (resources/vector-stores/routes.ts).
 * An assistant is read from memory once the generation is known (one round trip either way), and
 * anything else reads the generation first.
 */
function provisionalCheck(method: string, path: string): 'now' | 'on demand' | null {
  if (method === 'GET' || method === 'HEAD') return PROVISIONAL_READS.test(path) ? 'now' : null;
  if (method === 'DELETE') return DELETES_GUARDED.test(path) ? 'on demand' : null;
  if (method !== 'POST') return null;
  if (PROVIDER_CALLS.has(path)) return 'now';
  return WRITES_GUARDED.has(path) || WRITES_GUARDED_UNDER.some((pattern) => pattern.test(path)) ? 'on demand' : null;
}
const PROVIDER_CALLS = new Set(['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/moderations']);
const PROVISIONAL_READS =
  /^\/v1\/((threads|conversations|responses|files|runs|vector_stores|usage|chat\/completions|policies\/rate-limits|models)(\/|$)|assistants$)/;
const WRITES_GUARDED = new Set([
  '/v1/threads',
  '/v1/threads/runs',
  '/v1/conversations',
  '/v1/responses',
  '/v1/vector_stores',
]);
const WRITES_GUARDED_UNDER = [
  // A thread modified; a message or a run on it, created or modified; tool outputs submitted.
  /^\/v1\/threads\/[^/]+(\/(messages|runs)(\/[^/]+)?)?$/,
  /^\/v1\/threads\/[^/]+\/runs\/[^/]+\/submit_tool_outputs$/,
  // A conversation modified; its items added.
  /^\/v1\/conversations\/[^/]+(\/items)?$/,
  // A vector store modified; a file or a batch of files added to one; a batch cancelled.
  /^\/v1\/vector_stores\/[^/]+(\/(files|file_batches|file_batches\/[^/]+\/cancel))?$/,
];
/** A thread, a message of one, a conversation, a conversation's item (read first, keyLive asked with it). */
const DELETES_GUARDED = /^\/v1\/(threads\/[^/]+(\/messages\/[^/]+)?|conversations\/[^/]+(\/items\/[^/]+)?)$/;

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
