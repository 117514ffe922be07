import { ApiError } from '../../../errors';
import type { CodeInterpreterOutput } from '../../../db/json-columns';
import type { RunRow } from '../../../db/schema';
import { readAtMost } from '../../../sandbox/protocol';
import { isSandboxFileName, SandboxError, type CodeResult, type SandboxSession } from '../../../sandbox/sandbox';
import { ownContainer, recordWrittenFile } from '../../containers/commands';
import { allContainerFiles, responseContainerId, touchContainer } from '../../containers/queries';
import { storeFile } from '../../files/commands';
import { getFile, type FileRow } from '../../files/queries';
import { codeAttachmentsOf, getThread } from '../../threads/queries';
import {
  CODE_INTERPRETER_FUNCTION,
  codeOf,
  codeOutput,
  MAX_CODE_CALLS_PER_ROUND,
  notRun,
  type SavedFile,
} from './code-interpreter';
import type { RunDeps } from './run-deps';
import type { StreamingToolCall } from './turn-answer';

/** Files put in a session at most: tool resources hold 20 each, messages 20 attachments each. */
const MAX_INPUT_FILES = 64;

/**
 * What each live session was given, by session id: each file put in, as its name, id and size.
 * A run's files go into its container's session on each run's first use: one given already is not
 * sent again, even where the code has since changed its copy or a file it wrote took its name (a
 * container's written files are put in too): what the code did stays, as its variables do. Kept
 * for the sessions last opened, a bound for the process; a session this forgets is given its files
 * again.
 */
const given = new Map<string, Set<string>>();
const MAX_SESSIONS_REMEMBERED = 1024;

function givenTo(sessionId: string): Set<string> {
  let files = given.get(sessionId);
  // Last opened, last forgotten: a Map keeps its insertion order.
  if (files) given.delete(sessionId);
  files ??= new Set();
  given.set(sessionId, files);
  for (const oldest of given.keys()) {
    if (given.size <= MAX_SESSIONS_REMEMBERED) break;
    given.delete(oldest);
  }
  return files;
}

/** The deps a round of code uses. */
export type CodeDeps = Pick<RunDeps, 'db' | 'blobs' | 'config' | 'now' | 'log' | 'sandbox'>;

/**
 * The code a run's model asks to run (its code_interpreter tool), answered by the gateway in the
 * thread's sandbox session: the run's files put in at the session's first use in the run, each
 * call's code run after the one before, its figures and the files it wrote stored as files
 * (`assistants_output`), and the call's step deltas sent as it goes (`delta`: the input once the
 * arguments are whole, the outputs once it ran).
 */
export class CodeRuns {
  readonly #deps: CodeDeps;
  readonly #run: RunRow;
  readonly #delta: (delta: Record<string, unknown>) => Promise<void>;
  readonly #signal: AbortSignal;
  #session: SandboxSession | null = null;
  #containerId: string | null = null;

  /** @param signal the execution's: a cancel (or a lost lease) ends the session running the code, and the round */
  constructor(
    deps: CodeDeps,
    run: RunRow,
    delta: (delta: Record<string, unknown>) => Promise<void>,
    signal: AbortSignal,
  ) {
    this.#deps = deps;
    this.#run = run;
    this.#delta = delta;
    this.#signal = signal;
  }

  /** Runs the code of `calls` (the code_interpreter ones), in order, recording each call's answer on it. */
  async answer(calls: StreamingToolCall[]): Promise<void> {
    let position = 0;
    for (const call of calls) {
      const hosted = call.hosted;
      if (hosted?.kind !== 'code_interpreter') continue;
      const args = call.arguments.toString();
      const parsed = codeOf(args);
      const input = 'code' in parsed ? parsed.code : '';
      await this.#delta({ index: call.index, type: 'code_interpreter', code_interpreter: { input } });
      const { result, saved } =
        position++ >= MAX_CODE_CALLS_PER_ROUND
          ? { result: notRun(`at most ${MAX_CODE_CALLS_PER_ROUND} calls run at once; call again.`), saved: [] }
          : 'problem' in parsed
            ? { result: notRun(parsed.problem), saved: [] }
            : await this.#runCode(parsed.code);
      const outputs: CodeInterpreterOutput[] = [
        ...(result.logs === '' ? [] : [{ type: 'logs' as const, logs: result.logs }]),
        ...saved.flatMap((file) =>
          file.kind === 'image' && 'fileId' in file
            ? [{ type: 'image' as const, image: { file_id: file.fileId } }]
            : [],
        ),
      ];
      await this.#delta({
        index: call.index,
        type: 'code_interpreter',
        code_interpreter: { outputs: outputs.map((output, index) => ({ index, ...output })) },
      });
      hosted.done = {
        id: call.id,
        type: 'code_interpreter',
        container_id: await this.#container(),
        code_interpreter: { input, outputs },
        // What the model sent back to it in later rounds: the code as run, not megabytes of other arguments.
        function: {
          name: CODE_INTERPRETER_FUNCTION,
          arguments: JSON.stringify({ code: input }),
          output: codeOutput(result, saved),
        },
        files: saved.flatMap((file) =>
          file.kind === 'file' && 'fileId' in file ? [{ path: file.path, file_id: file.fileId }] : [],
        ),
      };
    }
  }

  /** The code run in the thread's session, and what it made stored: a sandbox that refuses is told to the model. */
  async #runCode(
    code: string,
  ): Promise<{ result: Pick<CodeResult, 'status' | 'logs' | 'error' | 'reason'>; saved: SavedFile[] }> {
    let result: CodeResult;
    const signal = this.#signal;
    signal.throwIfAborted();
    // A run stopped while its code runs stops the code: its session ends (its variables with it).
    let stop: (() => void) | null = null;
    try {
      const session = await this.#openSession();
      stop = () => void session.close();
      signal.addEventListener('abort', stop, { once: true });
      // Stopped while the session started: an abort before the listener was added fires no event.
      signal.throwIfAborted();
      result = await session.run(code);
    } catch (error) {
      signal.throwIfAborted();
      if (!(error instanceof SandboxError)) throw error;
      this.#deps.log.warn('code_interpreter could not run code', { run_id: this.#run.id, code: error.code, error });
      return { result: notRun(error.message), saved: [] };
    } finally {
      if (stop) signal.removeEventListener('abort', stop);
    }
    signal.throwIfAborted();
    const saved: SavedFile[] = [];
    for (const image of result.images) {
      saved.push(await this.#store('image', 'image.png', 'image/png', image.bytes));
    }
    for (const file of result.files) {
      saved.push(await this.#store('file', file.path, null, file.bytes));
    }
    return { result, saved };
  }

  /** Bytes the code made, as a file of the workspace; a quota that refuses them is told to the model. */
  async #store(
    kind: SavedFile['kind'],
    path: string,
    contentType: string | null,
    bytes: Uint8Array,
  ): Promise<SavedFile> {
    const filename = path.split('/').at(-1) || path;
    try {
      const row = await storeFile(this.#deps, this.#run.workspaceId, {
        filename,
        purpose: 'assistants_output',
        contentType,
        bytes,
      });
      if (kind === 'file') {
        await recordWrittenFile(this.#deps, await this.#container(), { path, fileId: row.id, bytes: row.bytes });
      }
      return { kind, path, fileId: row.id };
    } catch (error) {
      if (error instanceof ApiError) return { kind, path, problem: error.message };
      throw error;
    }
  }

  /**
   * The container the code runs in (resources/containers/): the response's, else the thread's own
   * (a run's, kept for the thread between runs). Its id is the key of its sandbox session.
   */
  async #container(): Promise<string> {
    if (this.#containerId !== null) return this.#containerId;
    const run = this.#run;
    // Only a response may name a container of its own (responses.container_id): a run needs no read for it.
    const named = run.kind === 'response' ? await responseContainerId(this.#deps.db, run.id) : null;
    const id = named ?? (await ownContainer(this.#deps, run.workspaceId, run.threadId)).id;
    this.#containerId = id;
    return id;
  }

  /**
   * The container's session, with the container's files and the run's put in when this run first
   * uses it (or uses a new one: a limit ended the last), but for those it was given already.
   */
  async #openSession(): Promise<SandboxSession> {
    const kept = this.#session;
    if (kept?.alive) return kept;
    const run = this.#run;
    const containerId = await this.#container();
    await touchContainer(this.#deps.db, containerId, this.#deps.now());
    const session = await this.#deps.sandbox.open({ workspaceId: run.workspaceId, threadId: containerId });
    // A file the code wrote in a folder is not put back: a session takes files at its top level only.
    const held = (await allContainerFiles(this.#deps.db, containerId, MAX_INPUT_FILES)).filter((entry) =>
      isSandboxFileName(entry.path),
    );
    const stored = await Promise.all(
      held.map((entry) => this.#fileOf(entry.fileId).then((file) => (file ? { file, path: entry.path } : null))),
    );
    const files = [
      ...stored.filter((entry) => entry !== null),
      ...(await this.#inputFiles()).map((file) => ({
        file,
        path: isSandboxFileName(file.filename) ? file.filename : file.id,
      })),
    ];
    const given = givenTo(session.id);
    for (const { file, path } of files) {
      const version = `${path}\n${file.id}\n${file.bytes}`;
      if (given.has(version)) continue;
      const bytes = await this.#bytesOf(file);
      if (bytes === null) continue;
      await session.putFile(path, bytes);
      given.add(version);
    }
    this.#session = session;
    return session;
  }

  /**
   * The files of the run's code_interpreter resources (the request's or the assistant's), the
   * thread's, and its messages' attachments for the tool: those that still exist, each once.
   */
  async #inputFiles(): Promise<FileRow[]> {
    const { db } = this.#deps;
    const run = this.#run;
    const [thread, attached] = await Promise.all([
      getThread(db, run.workspaceId, run.threadId),
      codeAttachmentsOf(db, run.threadId, MAX_INPUT_FILES),
    ]);
    const ids = [
      ...new Set([
        ...(run.toolResources?.code_interpreter?.file_ids ?? []),
        ...(thread.toolResources?.code_interpreter?.file_ids ?? []),
        ...attached,
      ]),
    ].slice(0, MAX_INPUT_FILES);
    const files = await Promise.all(ids.map((id) => this.#fileOf(id)));
    return files.filter((file) => file !== null);
  }

  /** A file of the workspace, or null when it was deleted since (left out, as OpenAI's sandbox would not have it either). */
  async #fileOf(id: string): Promise<FileRow | null> {
    return getFile(this.#deps.db, this.#run.workspaceId, id, this.#deps.now()).catch((error: unknown) => {
      if (error instanceof ApiError) return null;
      throw error;
    });
  }

  /** A file's bytes, unless larger than the sandbox takes (GATEWAY_SANDBOX_FILE_BYTES) or gone from the store. */
  async #bytesOf(file: FileRow): Promise<Uint8Array | null> {
    const max = this.#deps.config.GATEWAY_SANDBOX_FILE_BYTES;
    if (file.bytes > max) {
      this.#deps.log.warn('a file too large for the sandbox was left out', { run_id: this.#run.id, file_id: file.id });
      return null;
    }
    const stream = await this.#deps.blobs.get(file.blobKey);
    return stream === null ? null : readAtMost(stream, max);
  }
}
