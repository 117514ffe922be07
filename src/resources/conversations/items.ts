import type { Deps } from '../../deps';
import type { MessageContent } from '../../db/schema';
import { ApiError } from '../../errors';
import { concatBytes } from '../../lib/bytes';
import { ExtractionError, extractText, formatOf } from '../../retrieval/file-text';
import { getFile } from '../files/queries';
import { imageChecker } from '../files/images';
import type { MessageRow, ThreadKey } from '../threads/queries';
import { writtenMessage } from '../threads/rows';
import { THREAD_LIMITS } from '../threads/schemas';
import { threadCalls, type CallOutput, type ThreadCall } from './queries';
import { existingItemIds } from './thread-items';
import type { ContentPartInput, InputItem, ItemsField, MessageItemInput } from './schemas';

/**
 * Input items into a thread (docs/conversations.md has the mapping field by field): what
 * POST /v1/conversations(/{id}/items) write, and what a response writes of its `input` into its
 * thread (resources/responses/). Messages become the thread's messages; a function_call_output
 * fills the output of the function call of an earlier tool step that has none yet (a response
 * that ended on its calls). Items that are already the thread's (a message or a call given back
 * as a response answered it, an item_reference) are not written again. Everything is checked
 * before anything is written: a 400 names the item's field (`input[3].call_id`).
 */

export type ItemWriteDeps = Pick<Deps, 'db' | 'blobs' | 'now' | 'config' | 'libraries'>;

export interface ThreadItemWrites {
  /** The messages to insert into the thread, in order. */
  messages: MessageRow[];
  /** The outputs to fill into earlier tool steps (queries.ts, outputStatements, makes their writes). */
  outputs: CallOutput[];
  /** Both, in the order of the items (what POST …/items answers). */
  added: ({ message: MessageRow; output?: never } | { output: CallOutput; message?: never })[];
}

/** A message item given as text, which its thread takes without reading anything. */
export function textMessage(item: InputItem): boolean {
  if (item.type !== 'message' || item.id) return false;
  return typeof item.content === 'string' || item.content.every((part) => TEXT_PARTS.has(part.type));
}
const TEXT_PARTS: ReadonlySet<string> = new Set(['input_text', 'output_text', 'refusal']);

/** The most a file given as input (`input_file`) may weigh: its text must fit a message's. */
export const MAX_INPUT_FILE_BYTES = 4 * THREAD_LIMITS.text;

/**
 * The writes of `items` into `thread` (created at `at`), checked: images as a thread's messages'
 * are (resources/files/images.ts), files read into text, outputs matched to open calls, references
 * to items the thread holds. `field` names the items in errors. `answers.earlier` is the thread
 * whose calls and items the input answers and names: `thread` itself, but for a response that goes
 * on from a previous one (resources/responses/), whose thread is its own, the previous response's;
 * `answers.calls`, its calls when they are known (threads/known-histories.ts), not read.
 */
export async function threadItemWrites(
  deps: ItemWriteDeps,
  thread: ThreadKey,
  items: readonly InputItem[],
  field: ItemsField,
  at: number,
  answers: { earlier?: ThreadKey; calls?: ReadonlyMap<string, ThreadCall> } = {},
): Promise<ThreadItemWrites> {
  const earlier = answers.earlier ?? thread;
  const calls = answers.calls ?? (await callsNamed(deps, earlier, items));
  const known = await knownIds(deps, earlier, items);
  const checkImage = imageChecker(deps, thread.workspaceId);
  const messages: MessageRow[] = [];
  const outputs: CallOutput[] = [];
  const added: ThreadItemWrites['added'] = [];
  for (const [index, item] of items.entries()) {
    const where = `${field}[${index}]`;
    switch (item.type) {
      case 'message': {
        if (item.id && known.has(item.id)) break;
        const content = await messageContent(deps, thread, item, where, checkImage);
        const message = writtenMessage(thread, { role: item.role, content, attachments: [], metadata: {} }, at);
        messages.push(message);
        added.push({ message });
        break;
      }
      case 'function_call': {
        // The model's call given back as the response that made it answered it: it is the thread's already.
        if (calls.get(item.call_id)?.type === 'function') break;
        throw new ApiError(
          'invalid_value',
          `Invalid '${where}.call_id': no function call '${item.call_id}' was made in this conversation. A function_call item can only be one the model made here; a conversation's calls are made by its responses and runs.`,
          { param: `${where}.call_id` },
        );
      }
      case 'function_call_output': {
        const call = calls.get(item.call_id);
        if (!call?.open || outputs.some((output) => output.callId === item.call_id)) {
          throw new ApiError(
            'invalid_value',
            `Invalid '${where}.call_id': no function call '${item.call_id}' of this conversation awaits an output.`,
            { param: `${where}.call_id` },
          );
        }
        const output = { stepId: call.stepId, index: call.index, callId: call.callId, output: outputText(item, where) };
        outputs.push(output);
        added.push({ output });
        break;
      }
      case 'reasoning':
        // Given back with the output it came in: no Chat Completions provider takes reasoning as input.
        break;
      case 'code_interpreter_call':
        // Given back with the output it came in: its code ran then, and its step is in the history already.
        break;
      case 'item_reference': {
        if (known.has(item.id)) break;
        throw new ApiError('invalid_value', `Invalid '${where}.id': no item '${item.id}' in this conversation.`, {
          param: `${where}.id`,
        });
      }
    }
  }
  return { messages, outputs, added };
}

/** The thread's calls that the items name, by call id. */
async function callsNamed(
  deps: ItemWriteDeps,
  thread: ThreadKey,
  items: readonly InputItem[],
): Promise<Map<string, ThreadCall>> {
  const ids = items.flatMap((item) =>
    item.type === 'function_call' || item.type === 'function_call_output' ? [item.call_id] : [],
  );
  return new Map((await threadCalls(deps.db, thread, [...new Set(ids)])).map((call) => [call.callId, call]));
}

/**
 * The ids among the items' (messages given back, references) that name an item of the thread: a
 * message, or a tool item (fc_, fco_, fs_) of one of its steps.
 */
async function knownIds(deps: ItemWriteDeps, thread: ThreadKey, items: readonly InputItem[]): Promise<Set<string>> {
  const ids = items.flatMap((item) =>
    item.type === 'item_reference' ? [item.id] : item.type === 'message' && item.id ? [item.id] : [],
  );
  if (ids.length === 0) return new Set();
  return existingItemIds(deps.db, thread, [...new Set(ids)]);
}

type CheckImage = ReturnType<typeof imageChecker>;

/** A message item's content as stored: text, linked and uploaded images, files read into text. */
async function messageContent(
  deps: ItemWriteDeps,
  thread: ThreadKey,
  item: MessageItemInput,
  where: string,
  checkImage: CheckImage,
): Promise<MessageContent[]> {
  if (typeof item.content === 'string') return [textContent(item.content)];
  const content: MessageContent[] = [];
  for (const [index, part] of item.content.entries()) {
    content.push(await partContent(deps, thread, part, `${where}.content[${index}]`, checkImage));
  }
  return content;
}

const textContent = (value: string): MessageContent => ({ type: 'text', text: { value, annotations: [] } });

async function partContent(
  deps: ItemWriteDeps,
  thread: ThreadKey,
  part: ContentPartInput,
  where: string,
  checkImage: CheckImage,
): Promise<MessageContent> {
  switch (part.type) {
    case 'input_text':
    case 'output_text':
      return textContent(part.text);
    case 'refusal':
      // A thread message holds text: an assistant's refusal is kept as its text.
      return textContent(part.refusal);
    case 'input_image': {
      const detail = part.detail ?? 'auto';
      if (part.image_url) {
        await checkImage({ url: part.image_url }, `${where}.image_url`);
        return { type: 'image_url', image_url: { url: part.image_url, detail } };
      }
      const fileId = part.file_id ?? '';
      await checkImage({ fileId }, `${where}.file_id`);
      return { type: 'image_file', image_file: { file_id: fileId, detail } };
    }
    case 'input_file':
      return textContent(await fileText(deps, thread, part, where));
  }
}

/**
 * An input_file's text, named by its filename: a workspace file (`file_id`) or one given inline
 * (`file_data`, base64 or a data: URL), of a text format (plain text, Markdown, JSON, source code,
 * HTML), at most MAX_INPUT_FILE_BYTES and a message's text. PDF and DOCX are read where their
 * parsing is bounded (a vector store's ingestion, for file_search), not in a request: refused.
 */
async function fileText(
  deps: ItemWriteDeps,
  thread: ThreadKey,
  part: Extract<ContentPartInput, { type: 'input_file' }>,
  where: string,
): Promise<string> {
  const refuse = (field: string, why: string) =>
    new ApiError('invalid_value', `Invalid '${where}.${field}': ${why}`, { param: `${where}.${field}` });
  let filename: string;
  let bytes: Uint8Array;
  let contentType: string | null = null;
  let field: string;
  if (part.file_id) {
    field = 'file_id';
    const id = part.file_id;
    const file = await getFile(deps.db, thread.workspaceId, id, deps.now()).catch((error: unknown) => {
      if (error instanceof ApiError && error.code === 'file_not_found')
        throw refuse(field, `no file found with id '${id}'.`);
      throw error;
    });
    if (file.bytes > MAX_INPUT_FILE_BYTES)
      throw refuse(field, `the file is larger than ${MAX_INPUT_FILE_BYTES} bytes, the most a message's file may be.`);
    filename = part.filename ?? file.filename;
    contentType = file.contentType;
    const read = await readBlob(deps, file.blobKey, MAX_INPUT_FILE_BYTES);
    if (read === null) throw refuse(field, `the file's bytes are gone or larger than ${MAX_INPUT_FILE_BYTES} bytes.`);
    bytes = read;
  } else {
    field = 'file_data';
    filename = part.filename ?? '';
    const data = decodeFileData(part.file_data ?? '');
    if (typeof data === 'string') throw refuse(field, data);
    contentType = data.contentType;
    bytes = data.bytes;
    if (bytes.byteLength > MAX_INPUT_FILE_BYTES)
      throw refuse(field, `the file is larger than ${MAX_INPUT_FILE_BYTES} bytes, the most a message's file may be.`);
  }
  const format = formatOf(filename, contentType);
  if (format !== 'text' && format !== 'html') {
    throw refuse(
      field,
      `'${filename.slice(0, 100)}' is not a text or HTML file. A message takes text files' content; PDF and DOCX files are read by file_search (add them to a vector store).`,
    );
  }
  const header = `File: ${filename}\n\n`;
  try {
    const text = await extractText(bytes, format, THREAD_LIMITS.text - header.length, deps.libraries.htmlToText);
    return `${header}${text}`;
  } catch (error) {
    if (error instanceof ExtractionError) throw refuse(field, error.message);
    throw error;
  }
}

/** `file_data`: a data: URL (`data:text/plain;base64,…`) or bare base64; a message for the 400 otherwise. */
function decodeFileData(data: string): { bytes: Uint8Array; contentType: string | null } | string {
  let contentType: string | null = null;
  let payload = data;
  if (/^data:/i.test(data)) {
    const comma = data.indexOf(',');
    const header = comma < 0 ? '' : data.slice('data:'.length, comma).toLowerCase();
    if (comma < 0 || !header.endsWith(';base64')) return 'a data: URL must be base64: data:<type>;base64,….';
    contentType = header.slice(0, -';base64'.length) || null;
    payload = data.slice(comma + 1);
  }
  if (payload.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(payload)) return 'file_data is not valid base64.';
  const binary = atob(payload);
  return { bytes: Uint8Array.from(binary, (character) => character.charCodeAt(0)), contentType };
}

/** A blob's bytes, or null when it is gone or holds more than `maxBytes`. */
async function readBlob(deps: ItemWriteDeps, key: string, maxBytes: number): Promise<Uint8Array | null> {
  const stream = await deps.blobs.get(key);
  if (!stream) return null;
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const part of stream) {
    size += part.byteLength;
    // Leaving the loop cancels the stream.
    if (size > maxBytes) return null;
    parts.push(part);
  }
  return concatBytes(parts);
}

/** A function_call_output's output as a thread keeps it: text (its input_text parts joined). */
function outputText(item: Extract<InputItem, { type: 'function_call_output' }>, where: string): string {
  if (typeof item.output === 'string') return item.output;
  const text: string[] = [];
  for (const [index, part] of item.output.entries()) {
    if (part.type !== 'input_text') {
      throw new ApiError(
        'unsupported_content',
        `Invalid '${where}.output[${index}].type': a function output is kept as text; '${part.type}' parts are not supported.`,
        { param: `${where}.output[${index}].type` },
      );
    }
    text.push(part.text);
  }
  const joined = text.join('\n');
  if (joined.length > THREAD_LIMITS.text) {
    throw new ApiError(
      'string_above_max_length',
      `Invalid '${where}.output': longer than ${THREAD_LIMITS.text} characters.`,
      {
        param: `${where}.output`,
      },
    );
  }
  return joined;
}
