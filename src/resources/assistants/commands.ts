import type { CreateAssistantBody, ModifyAssistantBody } from './schemas';
import { assistantLive, getAssistant, insertAssistant, newAssistantId, updateAssistant } from './queries';
import type { AssistantRow } from '../../db/schema';
import type { Actor, RequestContext } from '../../actor';
import { wakeIngestion, type StoreCommandDeps } from '../vector-stores/commands';
import { toolResourcesWrites } from '../vector-stores/tool-resources';

/**
 * Creating and modifying an assistant: its tool_resources name the workspace's own vector stores
 * and files (404 naming the field otherwise), and `file_search.vector_stores` creates a store from
 * files, as OpenAI's did, in the assistant's workspace. The store is written in the transaction
 * that writes the assistant, and only if the assistant is (a refused one, past its workspace's cap
 * or deleted meanwhile, leaves no store); its files are then queued for ingestion, as a thread's.
 */

export type AssistantCommandDeps = StoreCommandDeps;

/** POST /v1/assistants. */
export async function createAssistant(
  deps: AssistantCommandDeps,
  actor: Actor,
  body: CreateAssistantBody,
  context: RequestContext,
): Promise<AssistantRow> {
  const id = newAssistantId();
  const resources = await toolResourcesWrites(deps, actor, body.tool_resources, assistantLive(actor.workspaceId, id));
  const row = await insertAssistant(
    deps.db,
    {
      id,
      workspaceId: actor.workspaceId,
      fields: { ...body, tool_resources: resources.toolResources },
      now: deps.now(),
      maxAssistants: deps.config.GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE,
    },
    resources.statements,
  );
  if (resources.queued) wakeIngestion(deps, context);
  return row;
}

/**
 * POST /v1/assistants/{assistant_id}: the fields sent replace the stored ones; tool_resources that
 * create a store replace the assistant's vector_store_ids with it (the store named before is kept,
 * as a store of the workspace).
 */
export async function modifyAssistant(
  deps: AssistantCommandDeps,
  actor: Actor,
  id: string,
  body: ModifyAssistantBody,
  context: RequestContext,
): Promise<AssistantRow> {
  if (body.tool_resources === undefined)
    return updateAssistant(deps.db, actor.workspaceId, id, { ...body, tool_resources: undefined });
  // An unknown assistant is the answer, before anything its tool_resources name.
  await getAssistant(deps.db, actor.workspaceId, id);
  const resources = await toolResourcesWrites(deps, actor, body.tool_resources, assistantLive(actor.workspaceId, id));
  const row = await updateAssistant(
    deps.db,
    actor.workspaceId,
    id,
    { ...body, tool_resources: resources.toolResources },
    resources.statements,
  );
  if (resources.queued) wakeIngestion(deps, context);
  return row;
}
