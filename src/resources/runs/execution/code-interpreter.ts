import type { ChatCompletionRequest } from '../../../providers/types';
import type { StepDetails } from '../../../db/json-columns';
import type { CodeResult } from '../../../sandbox/sandbox';
import { MAX_ANNOTATIONS } from './file-search';

/**
 * The code_interpreter tool over Chat Completions: the model is given a function,
 * CODE_INTERPRETER_FUNCTION, and when it calls it the gateway runs the code in the thread's
 * sandbox session (sandbox/sandbox.ts) and answers the call with what it printed, raised and saved.
 * Pure pieces here; code-interpreter-round.ts runs the code and stores what it made.
 */

export const CODE_INTERPRETER_FUNCTION = 'python';

/** Code calls one round may run, one after another: calls past them are told so, not run. */
export const MAX_CODE_CALLS_PER_ROUND = 4;

/** Characters of a call's logs the model is given back (the step keeps the sandbox's own bound, 64 KiB). */
export const MAX_OUTPUT_CHARS = 16_000;

const TOOL_DESCRIPTION =
  'Runs Python 3 code in a stateful sandbox (numpy, pandas and matplotlib are installed; there is no ' +
  'network). Variables, imports and files persist between calls in this conversation. The user’s ' +
  'files are under /mnt/data, and files you write there are given to the user. Print what you want ' +
  'to see: only printed output and the value of the last expression are returned. matplotlib figures ' +
  'you create are shown to the user as images.';

/** The chat tool the model is given for code_interpreter. */
export const CODE_INTERPRETER_CHAT_TOOL: NonNullable<ChatCompletionRequest['tools']>[number] = {
  type: 'function',
  function: {
    name: CODE_INTERPRETER_FUNCTION,
    description: TOOL_DESCRIPTION,
    parameters: {
      type: 'object',
      properties: { code: { type: 'string', description: 'The Python code to run.' } },
      required: ['code'],
    },
  },
};

/**
 * The code of a call's arguments, `{"code": "..."}`; arguments that are not JSON are taken as the
 * code itself, as models trained on OpenAI's own python tool sometimes send it. A message for the
 * model when there is none.
 */
export function codeOf(args: string): { code: string } | { problem: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(args);
  } catch {
    return args.trim() === '' ? { problem: NO_CODE } : { code: args };
  }
  if (typeof parsed === 'object' && parsed !== null && 'code' in parsed && typeof parsed.code === 'string') {
    return parsed.code.trim() === '' ? { problem: NO_CODE } : { code: parsed.code };
  }
  return { problem: NO_CODE };
}

const NO_CODE = `No code was given. Call ${CODE_INTERPRETER_FUNCTION} with {"code": "..."}.`;

/** A file the code made, as the gateway stored it (or why it could not). */
export type SavedFile = { kind: 'image' | 'file'; path: string } & ({ fileId: string } | { problem: string });

/**
 * What the model is given back for a call: its logs (the start of them, when long), how it ended
 * when not normally, and a line per image and file saved.
 */
export function codeOutput(
  result: Pick<CodeResult, 'status' | 'logs' | 'error' | 'reason'>,
  saved: SavedFile[],
): string {
  const lines: string[] = [];
  const logs =
    result.logs.length > MAX_OUTPUT_CHARS ? `${result.logs.slice(0, MAX_OUTPUT_CHARS)}\n[output cut]` : result.logs;
  if (logs !== '') lines.push(logs.replace(/\n$/, ''));
  // The traceback in the logs ends with the exception; said once more only when the logs were cut before it.
  const raised = result.error ? `${result.error.name}: ${result.error.value}` : null;
  if (result.status === 'error' && raised !== null && !logs.includes(raised)) lines.push(raised);
  if (result.status === 'timeout' || result.status === 'killed') {
    lines.push(
      `The code was stopped (${result.reason ?? result.status}); the session was reset: variables and files are gone.`,
    );
  }
  for (const file of saved) {
    const what = file.kind === 'image' ? 'Image shown to the user' : `File /mnt/data/${file.path} saved`;
    lines.push('fileId' in file ? `${what} as ${file.fileId}.` : `${what}: not stored (${file.problem}).`);
  }
  return lines.length > 0 ? lines.join('\n') : 'The code ran and printed nothing.';
}

/** A call's text for the model when its code could not run at all (no session, a refused request). */
export function notRun(why: string): Pick<CodeResult, 'status' | 'logs' | 'error' | 'reason'> {
  return { status: 'error', logs: `The code did not run: ${why}` };
}

/** The files the run's code wrote, by their path under /mnt/data, from its steps: what `sandbox:` links name. */
export function savedFiles(steps: readonly { stepDetails: StepDetails }[]): Map<string, string> {
  const files = new Map<string, string>();
  for (const step of steps) {
    if (step.stepDetails.type !== 'tool_calls') continue;
    for (const call of step.stepDetails.tool_calls) {
      if (call.type === 'code_interpreter') for (const file of call.files ?? []) files.set(file.path, file.file_id);
    }
  }
  return files;
}

/**
 * The figures the run's code showed since its last message began, by file id: the image_file parts
 * its next message opens with, as OpenAI's answer shows a run's figures before its text.
 */
export function unshownImages(steps: readonly { stepDetails: StepDetails }[]): string[] {
  let images: string[] = [];
  for (const step of steps) {
    if (step.stepDetails.type === 'message_creation') {
      images = [];
      continue;
    }
    for (const call of step.stepDetails.tool_calls) {
      if (call.type !== 'code_interpreter') continue;
      for (const output of call.code_interpreter.outputs)
        if (output.type === 'image') images.push(output.image.file_id);
    }
  }
  return images;
}

export interface FilePath {
  type: 'file_path';
  text: string;
  start_index: number;
  end_index: number;
  file_path: { file_id: string };
}

const SANDBOX_LINK = /sandbox:\/mnt\/data\/([^\s()[\]<>"'`]{1,1024})/g;

/** The answer's `sandbox:/mnt/data/<path>` links to files the run's code wrote, as `file_path` annotations (UTF-16 indices). */
export function filePaths(text: string, files: ReadonlyMap<string, string>): FilePath[] {
  if (files.size === 0 || !text.includes('sandbox:')) return [];
  const found: FilePath[] = [];
  for (const match of text.matchAll(SANDBOX_LINK)) {
    // A link that ends a sentence is followed by its punctuation, which no file name here ends with.
    const path = (match[1] ?? '').replace(/[.,;:!?]+$/, '');
    const fileId = files.get(path);
    if (fileId === undefined) continue;
    const link = `sandbox:/mnt/data/${path}`;
    found.push({
      type: 'file_path',
      text: link,
      start_index: match.index,
      end_index: match.index + link.length,
      file_path: { file_id: fileId },
    });
    if (found.length === MAX_ANNOTATIONS) break;
  }
  return found;
}
