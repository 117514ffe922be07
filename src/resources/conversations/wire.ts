import type { CodeInterpreterToolCall, FileSearchToolCall, StepDetails } from '../../db/json-columns';
import type { MessageContent } from '../../db/schema';
import { toUnixSeconds } from '../../lib/time';
import type { MessageRow, ThreadRow } from '../threads/queries';
import type {
  CodeInterpreterCallItem,
  ConversationItem,
  ConversationItemList,
  ConversationObject,
  MessageItem,
  OutputAnnotation,
} from './objects';
import type { ItemInclude } from './schemas';

/**
 * A conversation and its items from the thread's rows (docs/conversations.md has the mapping field
 * by field): a message is a `message` item of the same id; a tool step's function call a
 * `function_call` item (`fc_<step id without step_>_<index>`), its output once given a
 * `function_call_output` item (`fco_…`), a file search a `file_search_call` item (`fs_…`). Pure:
 * the conversations' reads and a response's output (runOutputItems) use the same mapping.
 */

export function toConversationJson(row: ThreadRow): ConversationObject {
  return {
    id: row.id,
    object: 'conversation',
    created_at: toUnixSeconds(row.createdAt),
    metadata: row.metadata,
  };
}

/** OpenAI's ConversationItemList of `data`: first_id and last_id are strings, empty for an empty page. */
export function toItemList(data: ConversationItem[], hasMore: boolean): ConversationItemList {
  return { object: 'list', data, first_id: data[0]?.id ?? '', last_id: data.at(-1)?.id ?? '', has_more: hasMore };
}

/** A step as its items need it (a run step's row, or the fields of one). */
export interface ItemStep {
  id: string;
  status: string;
  stepDetails: StepDetails;
  reasoning: string | null;
}

type ToolItemKind = 'fc' | 'fco' | 'fs' | 'ci';

const STEP_PREFIX = 'step_';

/** The id of the item of call `index` of the step `stepId`. */
export const toolItemId = (kind: ToolItemKind, stepId: string, index: number): string =>
  `${kind}_${stepId.startsWith(STEP_PREFIX) ? stepId.slice(STEP_PREFIX.length) : stepId}_${index}`;

const TOOL_ITEM_ID = /^(fco|fc|fs|ci)_([A-Za-z0-9]{1,64})_(\d{1,4})$/;

/** The id of the `reasoning` item of what the model reasoned before the step `stepId` (its row's `reasoning`). */
export const reasoningItemId = (stepId: string): string =>
  `rs_${stepId.startsWith(STEP_PREFIX) ? stepId.slice(STEP_PREFIX.length) : stepId}`;

const REASONING_ITEM_ID = /^rs_([A-Za-z0-9]{1,64})$/;

/** The step whose reasoning a reasoning item's id names, or null when it names none. */
export function parseReasoningItemId(id: string): string | null {
  const step = REASONING_ITEM_ID.exec(id)?.[1];
  return step === undefined ? null : `${STEP_PREFIX}${step}`;
}

/** The step and call a tool item's id names, or null when it names none. */
export function parseToolItemId(id: string): { kind: ToolItemKind; stepId: string; index: number } | null {
  const match = TOOL_ITEM_ID.exec(id);
  if (!match) return null;
  const [, kind, step, index] = match;
  if ((kind !== 'fc' && kind !== 'fco' && kind !== 'fs' && kind !== 'ci') || step === undefined || index === undefined)
    return null;
  return { kind, stepId: `${STEP_PREFIX}${step}`, index: Number(index) };
}

/** The `reasoning` item of what the model reasoned before the step, or null when it reasoned nothing the provider showed. */
export function reasoningItem(step: ItemStep): ConversationItem | null {
  if (step.reasoning === null) return null;
  return {
    type: 'reasoning',
    id: reasoningItemId(step.id),
    summary: [],
    content: [{ type: 'reasoning_text', text: step.reasoning }],
    // Kept once the answer after it began: whole, whatever became of the step.
    status: 'completed',
  };
}

/**
 * A message as a `message` item: a user's, system's or developer's text as `input_text`, an
 * assistant's as `output_text` with its citations; images as `input_image` (a link in image_url,
 * an upload in file_id). `fileNames` names the cited files (their ids when unknown).
 */
export function toMessageItem(
  row: MessageRow,
  fileNames: ReadonlyMap<string, string>,
  containers: ReadonlyMap<string, string> = new Map(),
): MessageItem {
  return {
    type: 'message',
    id: row.id,
    status: row.status,
    role: row.role,
    // An Assistants run's answer opens with its figures (image_file), which a message item cannot hold.
    content: row.content.flatMap((part) =>
      row.role === 'assistant' && part.type === 'image_file'
        ? []
        : [contentItem(part, row.role === 'assistant', fileNames, containers)],
    ),
  };
}

function contentItem(
  part: MessageContent,
  assistant: boolean,
  fileNames: ReadonlyMap<string, string>,
  containers: ReadonlyMap<string, string>,
): MessageItem['content'][number] {
  switch (part.type) {
    case 'text':
      return assistant
        ? {
            type: 'output_text',
            text: part.text.value,
            annotations: citations(part.text.annotations, fileNames, containers),
            logprobs: [],
          }
        : { type: 'input_text', text: part.text.value };
    case 'image_url':
      return { type: 'input_image', image_url: part.image_url.url, file_id: null, detail: imageDetail(part.image_url) };
    case 'image_file':
      return {
        type: 'input_image',
        image_url: null,
        file_id: part.image_file.file_id,
        detail: imageDetail(part.image_file),
      };
  }
}

const imageDetail = (image: { detail?: string }): 'auto' | 'low' | 'high' =>
  image.detail === 'low' || image.detail === 'high' ? image.detail : 'auto';

/**
 * Stored annotations (the Assistants shapes) as the Responses shapes: a file_citation (its marker's
 * text and place) as one, a file_path (a `sandbox:` link to a file the code wrote) as a
 * container_file_citation when its file's container is known (`containers`: file id → container id).
 */
function citations(
  annotations: readonly unknown[],
  fileNames: ReadonlyMap<string, string>,
  containers: ReadonlyMap<string, string>,
): OutputAnnotation[] {
  return annotations.flatMap((annotation): OutputAnnotation[] => {
    const path = containerCitation(annotation, containers);
    if (path) return [path];
    const fileId = citedFileId(annotation);
    if (fileId === null) return [];
    const start = (annotation as { start_index?: unknown }).start_index;
    return [
      {
        type: 'file_citation' as const,
        file_id: fileId,
        filename: fileNames.get(fileId) ?? fileId,
        index: typeof start === 'number' && Number.isInteger(start) ? start : 0,
      },
    ];
  });
}

/** A stored file_path annotation as a container_file_citation, or null when it is none or its container is unknown. */
export function containerCitation(
  annotation: unknown,
  containers: ReadonlyMap<string, string>,
): Extract<OutputAnnotation, { type: 'container_file_citation' }> | null {
  const fileId = linkedFileId(annotation);
  const containerId = fileId === null ? undefined : containers.get(fileId);
  if (fileId === null || containerId === undefined) return null;
  const { text, start_index: start, end_index: end } = annotation as Record<string, unknown>;
  return {
    type: 'container_file_citation' as const,
    container_id: containerId,
    file_id: fileId,
    start_index: typeof start === 'number' ? start : 0,
    end_index: typeof end === 'number' ? end : 0,
    filename: typeof text === 'string' ? (text.split('/').at(-1) ?? text) : fileId,
  };
}

/** The files the code of `steps` wrote, by id, and the container each was written in. */
export function writtenFiles(steps: readonly { stepDetails: StepDetails }[]): Map<string, string> {
  const containers = new Map<string, string>();
  for (const step of steps) {
    if (step.stepDetails.type !== 'tool_calls') continue;
    for (const call of step.stepDetails.tool_calls) {
      if (call.type !== 'code_interpreter' || call.container_id === undefined) continue;
      for (const file of call.files ?? []) containers.set(file.file_id, call.container_id);
    }
  }
  return containers;
}

/**
 * The file a stored annotation of `type` names (file_citation: a search's citation; file_path: a
 * `sandbox:` link). queries.ts's citedFilesColumn finds the same files in SQL, to read their names and containers.
 */
function annotatedFileId(annotation: unknown, type: 'file_citation' | 'file_path'): string | null {
  if (typeof annotation !== 'object' || annotation === null) return null;
  const record = annotation as Record<string, unknown>;
  const named = record[type];
  if (record.type !== type || typeof named !== 'object' || named === null) return null;
  const fileId = (named as { file_id?: unknown }).file_id;
  return typeof fileId === 'string' ? fileId : null;
}

const citedFileId = (annotation: unknown) => annotatedFileId(annotation, 'file_citation');
const linkedFileId = (annotation: unknown) => annotatedFileId(annotation, 'file_path');

/**
 * The items of a tool step: each call (`function_call`, `file_search_call`) in order, then, with
 * `outputs`, each function output given so far: the order its turn's prompt sends them in.
 */
export function toolStepItems(
  step: ItemStep,
  options: { outputs: boolean; include: readonly ItemInclude[] },
): ConversationItem[] {
  if (step.stepDetails.type !== 'tool_calls') return [];
  const calls = step.stepDetails.tool_calls;
  const items = calls.map((_, index) => toolItem(step, 'call', index, options.include));
  if (options.outputs) {
    calls.forEach((_, index) => {
      const output = toolItem(step, 'output', index, options.include);
      if (output) items.push(output);
    });
  }
  return items.filter((item) => item !== null);
}

/** The item of call `index` of a tool step (`call`: the call; `output`: its output, null when it has none). */
export function toolItem(
  step: ItemStep,
  which: 'call' | 'output',
  index: number,
  include: readonly ItemInclude[],
): ConversationItem | null {
  if (step.stepDetails.type !== 'tool_calls') return null;
  const call = step.stepDetails.tool_calls[index];
  if (!call) return null;
  if (call.type === 'file_search') {
    if (which === 'output') return null;
    return fileSearchItem(step, call, index, include.includes('file_search_call.results'));
  }
  if (call.type === 'code_interpreter') {
    if (which === 'output') return null;
    return codeInterpreterItem(step, call, index, include.includes('code_interpreter_call.outputs'));
  }
  if (which === 'call') {
    return {
      type: 'function_call',
      id: toolItemId('fc', step.id, index),
      call_id: call.id,
      name: call.function.name,
      arguments: call.function.arguments,
      status: callStatus(step.status),
    };
  }
  if (call.function.output === null) return null;
  return {
    type: 'function_call_output',
    id: toolItemId('fco', step.id, index),
    call_id: call.id,
    output: call.function.output,
    status: 'completed',
  };
}

function callStatus(stepStatus: string): 'in_progress' | 'completed' | 'incomplete' {
  if (stepStatus === 'completed') return 'completed';
  return stepStatus === 'in_progress' ? 'in_progress' : 'incomplete';
}

/** A call the gateway answered (file_search, code_interpreter) may also have failed with its step. */
function hostedCallStatus(stepStatus: string): 'in_progress' | 'completed' | 'incomplete' | 'failed' {
  return stepStatus === 'failed' ? 'failed' : callStatus(stepStatus);
}

function fileSearchItem(
  step: ItemStep,
  call: FileSearchToolCall,
  index: number,
  withResults: boolean,
): ConversationItem {
  return {
    type: 'file_search_call',
    id: toolItemId('fs', step.id, index),
    status: hostedCallStatus(step.status),
    queries: searchQueries(call.function.arguments),
    results: withResults
      ? call.file_search.results.map((result) => ({
          file_id: result.file_id,
          filename: result.file_name,
          score: result.score,
          text: result.content.map((part) => part.text).join(''),
        }))
      : null,
  };
}

function codeInterpreterItem(
  step: ItemStep,
  call: CodeInterpreterToolCall,
  index: number,
  withOutputs: boolean,
): CodeInterpreterCallItem {
  return {
    type: 'code_interpreter_call',
    id: toolItemId('ci', step.id, index),
    status: hostedCallStatus(step.status),
    container_id: call.container_id ?? '',
    code: call.code_interpreter.input,
    outputs: withOutputs ? codeOutputs(call.code_interpreter.outputs) : null,
  };
}

/** A call's outputs as the Responses API shows them: logs, and each figure by the path of its file's content. */
export function codeOutputs(outputs: CodeInterpreterToolCall['code_interpreter']['outputs']) {
  return outputs.map((output) =>
    output.type === 'logs'
      ? { type: 'logs' as const, logs: output.logs }
      : { type: 'image' as const, url: codeImageUrl(output.image.file_id) },
  );
}

/** A figure's `url` in a code_interpreter_call: the path of its file's content under the gateway's base URL. */
export const codeImageUrl = (fileId: string) => `/v1/files/${fileId}/content`;

/** The queries a search step kept (`{"queries": [...]}`, resources/runs/execution/file-search.ts). */
function searchQueries(args: string): string[] {
  try {
    const parsed: unknown = JSON.parse(args);
    const queries = typeof parsed === 'object' && parsed !== null ? (parsed as { queries?: unknown }).queries : [];
    return Array.isArray(queries) ? queries.filter((query): query is string => typeof query === 'string') : [];
  } catch {
    return [];
  }
}

/**
 * A run's output items, its steps in order (a response's `output`): a message_creation step is its
 * message's item (left out when the message was deleted), a tool step its calls (not their outputs,
 * which the client gives as the next input), each after the reasoning before it, if any. `messagesById` holds the run's messages; cited files
 * are named from the run's own file searches.
 */
export function runOutputItems(
  steps: readonly ItemStep[],
  messagesById: ReadonlyMap<string, MessageRow>,
  include: readonly ItemInclude[],
): ConversationItem[] {
  const names = new Map<string, string>();
  const containers = writtenFiles(steps);
  for (const step of steps) {
    if (step.stepDetails.type !== 'tool_calls') continue;
    for (const call of step.stepDetails.tool_calls) {
      if (call.type === 'file_search')
        for (const result of call.file_search.results) names.set(result.file_id, result.file_name);
    }
  }
  return steps.flatMap((step): ConversationItem[] => {
    const reasoning = reasoningItem(step);
    const before = reasoning ? [reasoning] : [];
    if (step.stepDetails.type === 'tool_calls') return [...before, ...toolStepItems(step, { outputs: false, include })];
    const message = messagesById.get(step.stepDetails.message_creation.message_id);
    return message ? [...before, toMessageItem(message, names, containers)] : before;
  });
}
