import type { Actor } from '../../actor';
import type { Settings } from '../../db/settings-cache';
import type { VirtualKey } from '../../db/schema';
import type { Deps } from '../../deps';
import { ApiError } from '../../errors';
import { liveBeside } from '../identities/middleware/api-key-auth';
import { besideRow } from '../../db/client';
import { isGlob } from '../../lib/model-patterns';
import { ADAPTERS } from '../../providers/adapters';
import { listProviderModels, type ModelListResult, type ProviderModel } from '../../providers/models';
import { chooseVirtualKey, decryptVirtualKeySecret, listVirtualKeys, servedModel } from '../virtual-keys/commands';
import { upstreamRules } from '../virtual-keys/upstream-rules';
import type { ModelObject } from './objects';

/**
 * GET /v1/models: the models the caller's workspace can use, each with the virtual key a request
 * for it goes to (`owned_by`). A key's exact `models` are listed as they are; for its patterns,
 * and for the workspace's default key, the provider is asked for its own list (providers/models.ts,
 * kept a minute per key), and of it the models that would be routed to that key (chooseVirtualKey:
 * not those a more specific key of the workspace takes). A request that names a key
 * (`x-gateway-virtual-key`) goes to it whatever its model: its models alone are listed, the
 * provider's whole list among them. An Azure OpenAI key's deployment serves one model whatever the
 * request names, and Azure lists what the resource could deploy rather than what the deployment
 * serves: it lists its deployment's model (its `model`) instead of asking. A provider whose list
 * fails, or whose base URL the upstream rules now refuse, has its listed models left out, and a log
 * line says why; the answer is never a 5xx for it.
 */

export type ModelsDeps = Pick<
  Deps,
  'db' | 'config' | 'log' | 'now' | 'secrets' | 'fetch' | 'upstreamUrls' | 'modelLists'
>;

/** A provider's list is waited for at most this long (or the first-byte timeout, if shorter). */
const MODEL_LIST_TIMEOUT_MS = 10_000;

export async function listModels(deps: ModelsDeps, actor: Actor, snapshot: Settings): Promise<ModelObject[]> {
  const named = actor.virtualKeySlug;
  // The keys and the upstream rules read side by side, and, on settings assumed unchanged, whether
  // the caller's key is live with them (one round trip to a database server), asked before any
  // provider is.
  const [keys, rules] = await liveBeside(
    snapshot,
    besideRow(
      named
        ? snapshot.virtualKey(actor.workspaceId, { slug: named, model: '' }).then((key) => [key])
        : listVirtualKeys(deps.db, { workspaceId: actor.workspaceId }).then((all) =>
            all.filter((key) => key.isDefault || key.models.length > 0),
          ),
      upstreamRules(deps.db, deps.config, { now: deps.now() }),
    ),
  );
  const lists = await Promise.all(
    keys.map(async (key) => {
      const candidates = [...exactModels(key)];
      if (named !== undefined || key.isDefault || key.models.some(isGlob)) {
        candidates.push(...(await providerModels(deps, actor, key, rules)));
      }
      // With a named key every model goes to it; otherwise only those routing picks it for.
      return candidates.filter((model) => named !== undefined || routesTo(keys, model.id, key));
    }),
  );
  const served = new Map<string, ModelObject>();
  for (const [index, models] of lists.entries()) {
    const key = keys[index];
    if (key === undefined) continue;
    for (const model of models) {
      if (served.has(model.id)) continue;
      served.set(model.id, {
        id: model.id,
        object: 'model',
        created: model.created ?? Math.floor(key.createdAt / 1000),
        owned_by: key.slug,
      });
    }
  }
  return [...served.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** GET /v1/models/{model}: one of listModels, or 404 `model_not_found`. */
export async function retrieveModel(
  deps: ModelsDeps,
  actor: Actor,
  snapshot: Settings,
  id: string,
): Promise<ModelObject> {
  const model = (await listModels(deps, actor, snapshot)).find((candidate) => candidate.id === id);
  if (!model) {
    throw new ApiError(
      'model_not_found',
      `The model '${id}' does not exist or no virtual key of this workspace serves it (GET /v1/models lists those that do).`,
      { param: 'model' },
    );
  }
  return model;
}

function exactModels(key: VirtualKey): ProviderModel[] {
  return key.models.filter((pattern) => !isGlob(pattern)).map((id) => ({ id, created: null }));
}

/** Whether a request for `model` naming no key goes to `key`; a tie routing refuses serves none. */
function routesTo(keys: readonly VirtualKey[], model: string, key: VirtualKey): boolean {
  try {
    return chooseVirtualKey(keys, model)?.id === key.id;
  } catch {
    return false;
  }
}

/** The models the key's provider lists (its deployment's model on Azure); none, logged, when it fails. */
async function providerModels(
  deps: ModelsDeps,
  actor: Actor,
  key: VirtualKey,
  rules: Awaited<ReturnType<typeof upstreamRules>>,
): Promise<ProviderModel[]> {
  if (key.provider === 'azure-openai') return [{ id: servedModel(key, ''), created: null }];
  const problem = deps.upstreamUrls.check(key.baseUrl, rules);
  if (problem) {
    deps.log.warn('models list left out', {
      workspace_id: actor.workspaceId,
      virtual_key: key.slug,
      reason: `The virtual key's base_url is not allowed: ${problem}`,
    });
    return [];
  }
  const { result, fresh } = deps.modelLists.get(`${key.id} ${key.baseUrl} ${key.secretCiphertext}`, deps.now(), () =>
    fetchList(deps, key),
  );
  const list = await result;
  if ('models' in list) return list.models;
  // Said once per failure kept, not on every request that finds it kept.
  if (fresh) {
    deps.log.warn('models list left out', {
      workspace_id: actor.workspaceId,
      virtual_key: key.slug,
      reason: list.error instanceof Error ? list.error.message : String(list.error),
    });
  }
  return [];
}

async function fetchList(deps: ModelsDeps, key: VirtualKey): Promise<ModelListResult> {
  try {
    const models = await listProviderModels({
      fetch: deps.fetch,
      adapter: ADAPTERS[key.provider],
      baseUrl: key.baseUrl,
      options: key.options,
      secret: await decryptVirtualKeySecret(deps.secrets, key),
      timeoutMs: Math.min(MODEL_LIST_TIMEOUT_MS, deps.config.GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS),
    });
    return { models };
  } catch (error) {
    return { error };
  }
}
