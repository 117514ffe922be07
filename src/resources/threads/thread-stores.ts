import type { SQL } from 'drizzle-orm';
import type { Actor } from '../../actor';
import type { BuiltStatement } from '../../db/client';
import type { ThreadMessageInput } from './schemas';
import type { InlineVectorStore } from '../vector-stores/schemas';
import type { ToolResources } from '../../db/json-columns';
import {
  checkFiles,
  getVectorStore,
  insertStoreFiles,
  touchVectorStore,
  type FileToAdd,
} from '../vector-stores/queries';
import { filesToAdd, ingestionHost, prepareVectorStore, type StoreCommandDeps } from '../vector-stores/commands';
import { inlineStoreFiles } from '../vector-stores/tool-resources';

/**
 * A thread's vector store, as OpenAI kept it: a new thread may create one from files
 * (`tool_resources.file_search.vector_stores`), and a message's attachments for `file_search` are
 * added to the thread's store, which is created when the thread has none. The statements go into
 * the batch that writes the thread or the message, so that both are written or neither.
 */

export interface ThreadStoreWrites {
  statements: BuiltStatement[];
  /** The thread's tool resources once written, when they change (a store was created). */
  toolResources: ToolResources | null;
  /** Whether files were queued: ingestion is to be woken once the batch is written. */
  queued: boolean;
}

/** No writes: a thread given no files. */
export const NO_STORE_WRITES: ThreadStoreWrites = { statements: [], toolResources: null, queued: false };

/** The files of `messages` attached for file_search, each named for errors (`messages[0].attachments[1].file_id`). */
export function attachedFiles(messages: readonly ThreadMessageInput[], param: (index: number) => string): FileToAdd[] {
  return messages.flatMap((message, index) =>
    (message.attachments ?? []).flatMap((attachment, at) =>
      attachment.tools?.some((tool) => tool.type === 'file_search')
        ? filesToAdd([attachment.file_id], { param: () => `${param(index)}attachments[${at}].file_id` })
        : [],
    ),
  );
}

/**
 * The writes that give a thread (`toolResources`, as it stands) its files for file_search:
 * `inline`, a store to create with files, and `attached`, files of its messages. With
 * `condition`, every write happens only if it holds when the batch runs (a message's statement).
 */
export async function threadStoreWrites(
  deps: StoreCommandDeps,
  actor: Actor,
  thread: { toolResources: ToolResources | null },
  files: { inline?: InlineVectorStore; inlineParam?: string; attached: FileToAdd[] },
  condition?: SQL,
): Promise<ThreadStoreWrites> {
  const { inline, attached } = files;
  const [first] = attached;
  if (!inline && !first) return NO_STORE_WRITES;
  const existing = thread.toolResources?.file_search?.vector_store_ids?.[0];
  // Without an inline store there is a first file (see above).
  if (existing !== undefined && !inline && first) {
    ingestionHost(deps, first.param);
    const store = await getVectorStore(deps.db, actor.workspaceId, existing);
    await checkFiles(deps.db, actor.workspaceId, attached);
    const at = deps.now();
    return {
      statements: [
        ...insertStoreFiles(deps.db, store, attached, { batchId: null, apiKeyId: actor.apiKeyId, at }, condition),
        touchVectorStore(deps.db, store, at, condition),
      ],
      toolResources: null,
      queued: true,
    };
  }
  const toAdd = [...inlineStoreFiles(inline, files.inlineParam ?? 'tool_resources'), ...attached];
  const { store, statements } = await prepareVectorStore(
    deps,
    actor,
    { metadata: inline?.metadata, files: toAdd },
    condition,
  );
  return {
    statements,
    toolResources: { ...thread.toolResources, file_search: { vector_store_ids: [store.id] } },
    queued: toAdd.length > 0,
  };
}
