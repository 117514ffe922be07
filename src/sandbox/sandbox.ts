/**
 * The sandbox that code_interpreter runs code in: a session per thread, files put in, code run with
 * limits, what it printed, drew and wrote given back, the session ended. The run engine calls this
 * port; Node fills it with bubblewrap around Python (runtime/node/sandbox.ts), either runtime with a
 * client of a sandbox served over HTTP (sandbox/remote.ts, for Workers and hosts without bubblewrap).
 * Everything a session returns came from code a tenant wrote: it is bounded by the implementation
 * before it reaches the caller, and never trusted beyond being bytes.
 */

/** Whose session: one per thread, kept for the thread between runs as OpenAI's code interpreter does. */
export interface SandboxKey {
  workspaceId: string;
  threadId: string;
}

/** `detail`: what an available sandbox does without (say, a bound it cannot enforce here), for the start log. */
export type Availability = { available: true; detail?: string } | { available: false; reason: string };

export interface Sandbox {
  /** Whether sessions can be opened here; if not, why (a missing program, an unreachable server). */
  availability(): Promise<Availability>;
  /**
   * The thread's session: the one kept for it while it lives, else a new one (its variables and
   * files start empty). A SandboxError `busy` when the workspace's or the gateway's sessions are all
   * running code, `unavailable` when there is no sandbox.
   */
  open(key: SandboxKey): Promise<SandboxSession>;
  /** Ends every session: the gateway is stopping. */
  close(): Promise<void>;
}

export interface SandboxSession {
  /** Issued by the sandbox, unguessable; never shown to an API client. */
  readonly id: string;
  /**
   * False once the session has ended: closed, idle past its time, or killed by a limit (then a
   * call's status said why). A thread whose session ended gets a new one from `open`, empty.
   */
  readonly alive: boolean;
  /** Writes a file at /mnt/data/`name` (one path segment), replacing one of that name. */
  putFile(name: string, bytes: Uint8Array): Promise<void>;
  /**
   * Runs code in the session's interpreter, after any call still running in it: variables, imports
   * and files stay for the next call. A limit that ends the process answers `timeout` or `killed`,
   * and the session is then dead.
   */
  run(code: string, options?: RunOptions): Promise<CodeResult>;
  /** Ends the session and forgets its files. */
  close(): Promise<void>;
}

export interface RunOptions {
  /** Wall time the call may take; at most the sandbox's own limit (GATEWAY_SANDBOX_TIMEOUT_MS). */
  timeoutMs?: number;
}

/**
 * - `ok`: the code ran to its end.
 * - `error`: it raised (`error` names the exception; the traceback is in `logs`); the session lives on.
 * - `timeout`: it ran past its wall time and was killed, with everything it started.
 * - `killed`: a limit ended it (too much output, the interpreter gone); `reason` says which.
 */
export type CodeStatus = 'ok' | 'error' | 'timeout' | 'killed';

export interface CodeResult {
  status: CodeStatus;
  /** What the code printed, standard output and error together, in order, cut at the sandbox's bound. */
  logs: string;
  /** Whether `logs` was cut (the rest was read and dropped, up to the output limit). */
  logsTruncated: boolean;
  /** Figures left open or shown (matplotlib), as PNG, in order; at most the sandbox's count and size. */
  images: SandboxImage[];
  /** Files created or changed under /mnt/data by this call (paths relative to it), within bounds. */
  files: SandboxFile[];
  /** The exception the code raised (`status` `error`). */
  error?: { name: string; value: string };
  /** Why the call ended as `timeout` or `killed`, naming the limit. */
  reason?: string;
}

export interface SandboxImage {
  mime: 'image/png';
  bytes: Uint8Array;
}

export interface SandboxFile {
  path: string;
  bytes: Uint8Array;
}

export type SandboxErrorCode =
  /** No sandbox here: bubblewrap or Python missing, no remote one configured. */
  | 'unavailable'
  /** Every session the workspace or the gateway may have is running code. */
  | 'busy'
  /** The session ended (closed, idle, killed by a limit): open the thread's session again. */
  | 'session_ended'
  /** A file name or code the sandbox refuses (a path, too large). */
  | 'invalid_request'
  /** The sandbox failed: its process did not start, the remote one answered wrongly. */
  | 'failed';

export class SandboxError extends Error {
  override name = 'SandboxError';
  constructor(
    readonly code: SandboxErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** A file name putFile accepts: one path segment, printable, not `.` or `..`, at most 255 bytes. */
export function isSandboxFileName(name: string): boolean {
  return (
    name.length > 0 &&
    new TextEncoder().encode(name).byteLength <= 255 &&
    name !== '.' &&
    name !== '..' &&
    // Control characters and separators: `/` makes a path, NUL ends one.
    !/[/\\\u0000-\u001f\u007f]/.test(name)
  );
}
