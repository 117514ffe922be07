import type { SQL } from 'drizzle-orm';
import type { Actor } from '../../actor';
import type { BuiltStatement, Db } from '../../db/client';
import type { InlineVectorStore, ToolResourcesInput } from './schemas';
import type { ToolResources } from '../../db/json-columns';
import { checkFiles, getVectorStore, type FileToAdd } from './queries';
import { filesToAdd, itemOf, prepareVectorStore, type StoreCommandDeps } from './commands';

/**
 * tool_resources as requests give them (assistants, threads, a thread and its run): what they name
 * must be the workspace's, and file_search may create its vector store (`vector_stores`). A store
 * or a file that tool_resources name is checked when they are written, as OpenAI refused an
 * unknown one: accepted, it would never be searched (and another workspace's must stay unknown).
 */

/** A new thread's or an assistant's tool resources as stored: without the store to create (it becomes vector_store_ids). */
export function storedToolResources(input: ToolResourcesInput | null | undefined): ToolResources | null {
  if (!input) return null;
  const { file_search: fileSearch, ...rest } = input;
  if (!fileSearch) return rest;
  const { vector_stores: _created, ...ids } = fileSearch;
  return { ...rest, file_search: ids };
}

/**
 * 404 naming the field (`tool_resources.file_search.vector_store_ids[0]`,
 * `tool_resources.code_interpreter.file_ids[2]`) for a vector store or a file of `resources` that
 * the workspace does not have: unknown, deleted, or another workspace's. `param` names the
 * resources (`tool_resources`, `thread.tool_resources`). Nothing is written before this.
 */
export async function checkToolResources(
  db: Db,
  workspaceId: string,
  resources: ToolResources | null | undefined,
  param: string,
): Promise<void> {
  for (const [index, id] of (resources?.file_search?.vector_store_ids ?? []).entries()) {
    await getVectorStore(db, workspaceId, id, `${param}.file_search.vector_store_ids[${index}]`);
  }
  const files = resources?.code_interpreter?.file_ids ?? [];
  await checkFiles(
    db,
    workspaceId,
    files.map((fileId, index) => ({ fileId, param: `${param}.code_interpreter.file_ids[${index}]` })),
  );
}

/** The files of a store that tool_resources create, each named for errors (`tool_resources.file_search.vector_stores[0].file_ids[1]`). */
export function inlineStoreFiles(inline: InlineVectorStore | undefined, param: string): FileToAdd[] {
  const list = `${param}.file_search.vector_stores[0].file_ids`;
  return filesToAdd(inline?.file_ids ?? [], { chunking: inline?.chunking_strategy, param: itemOf(list) });
}

/** What a request's tool_resources write: as stored, and the statements of the store they create, if any. */
export interface ToolResourcesWrites {
  toolResources: ToolResources | null;
  statements: BuiltStatement[];
  /** Whether files were queued: ingestion is to be woken once the batch is written. */
  queued: boolean;
}

/**
 * An assistant's tool resources, checked (checkToolResources), with the store that
 * `file_search.vector_stores` creates: its statements go into the batch that writes the assistant,
 * each made only while `condition` holds (the assistant is written), so that a refused assistant
 * leaves no store behind.
 */
export async function toolResourcesWrites(
  deps: StoreCommandDeps,
  actor: Actor,
  input: ToolResourcesInput | null | undefined,
  condition: SQL,
): Promise<ToolResourcesWrites> {
  const param = 'tool_resources';
  const stored = storedToolResources(input);
  await checkToolResources(deps.db, actor.workspaceId, stored, param);
  const inline = input?.file_search?.vector_stores?.[0];
  if (!inline) return { toolResources: stored, statements: [], queued: false };
  const files = inlineStoreFiles(inline, param);
  const { store, statements } = await prepareVectorStore(deps, actor, { metadata: inline.metadata, files }, condition);
  return {
    toolResources: { ...stored, file_search: { vector_store_ids: [store.id] } },
    statements,
    queued: files.length > 0,
  };
}
