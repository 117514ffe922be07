import * as z from 'zod';
import {
  availabilityWire,
  codeResultWire,
  errorWire,
  fromWire,
  maxResultBytes,
  openAnswer,
  readAtMost,
  WORKSPACE_HEADER,
} from './protocol';
import {
  isSandboxFileName,
  SandboxError,
  type Availability,
  type CodeResult,
  type RunOptions,
  type Sandbox,
  type SandboxKey,
  type SandboxSession,
} from './sandbox';

/**
 * A sandbox served over HTTP by `gateway sandbox` (server.ts), with fetch alone: Workers' sandbox,
 * and Node's where bubblewrap is missing. What the server answers is read within bounds before it
 * is parsed, and checked against protocol.ts's shapes: a server that answers otherwise is a failed
 * call, never bytes passed on. The secret goes only in the Authorization header, never in a message.
 */

export interface RemoteSandboxOptions {
  /** GATEWAY_SANDBOX_URL: the server's origin (and path prefix, if any). */
  url: string;
  /** GATEWAY_SANDBOX_SECRET. */
  secret: string;
  /** The largest file put in or given back (GATEWAY_SANDBOX_FILE_BYTES), which bounds an answer. */
  fileBytes: number;
  /** What a call's logs may hold (SandboxLimits.logBytes). */
  logBytes: number;
  /** The wall time a call may ask for (GATEWAY_SANDBOX_TIMEOUT_MS); its request waits that and a margin. */
  timeoutMs: number;
  fetch?: typeof fetch;
}

/** How long the server has to answer anything but a run, and beyond a run's own wall time. */
const ANSWER_MS = 30_000;
/** An answer other than a run's: an id, an availability, an error. */
const SMALL_ANSWER_BYTES = 16 * 1024;

export function remoteSandbox(options: RemoteSandboxOptions): Sandbox {
  const base = options.url.replace(/\/+$/, '');
  const call = options.fetch ?? ((input, init) => fetch(input, init));
  const opened = new Set<RemoteSession>();

  /** One request: the answer's JSON checked against `shape`, or a SandboxError from the server's envelope. */
  async function request<T>(
    path: string,
    init: { method: string; body?: Uint8Array; json?: unknown; workspaceId?: string; timeoutMs?: number },
    shape: z.ZodType<T> | null,
    maxBytes = SMALL_ANSWER_BYTES,
  ): Promise<T | null> {
    const headers: Record<string, string> = { authorization: `Bearer ${options.secret}` };
    if (init.workspaceId !== undefined) headers[WORKSPACE_HEADER] = init.workspaceId;
    if (init.json !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await call(`${base}${path}`, {
        method: init.method,
        headers,
        body: init.json !== undefined ? JSON.stringify(init.json) : init.body,
        // Never followed: a redirect would carry the secret elsewhere. (workerd has no 'error'.)
        redirect: 'manual',
        signal: AbortSignal.timeout(init.timeoutMs ?? ANSWER_MS),
      });
    } catch (error) {
      throw new SandboxError('unavailable', `The sandbox at ${base} cannot be reached (${describe(error)}).`);
    }
    const bytes = await readAtMost(response.body, response.ok ? maxBytes : SMALL_ANSWER_BYTES);
    if (bytes === null) throw new SandboxError('failed', 'The sandbox answered more than a call may return.');
    if (response.status === 204 && shape === null) return null;
    let json: unknown = null;
    try {
      json = JSON.parse(new TextDecoder().decode(bytes));
    } catch {
      // Not JSON: no shape accepts null.
    }
    if (!response.ok) {
      const failed = errorWire.safeParse(json);
      if (!failed.success) throw new SandboxError('failed', `The sandbox answered ${response.status}.`);
      const { code, message } = failed.data.error;
      throw new SandboxError(
        code === 'unauthorized' ? 'unavailable' : code,
        code === 'unauthorized' ? 'The sandbox refused GATEWAY_SANDBOX_SECRET.' : message,
      );
    }
    if (shape === null) return null;
    const parsed = shape.safeParse(json);
    if (!parsed.success) throw new SandboxError('failed', 'The sandbox answered what the gateway did not ask.');
    return parsed.data;
  }

  class RemoteSession implements SandboxSession {
    #ended = false;
    constructor(
      readonly id: string,
      readonly key: SandboxKey,
    ) {}

    get alive(): boolean {
      return !this.#ended;
    }

    async putFile(name: string, bytes: Uint8Array): Promise<void> {
      if (!isSandboxFileName(name)) {
        throw new SandboxError('invalid_request', 'A file name is one path segment of printable characters.');
      }
      if (bytes.byteLength > options.fileBytes) {
        throw new SandboxError(
          'invalid_request',
          `The file is larger than ${options.fileBytes} bytes (GATEWAY_SANDBOX_FILE_BYTES).`,
        );
      }
      await this.#on(() =>
        request(
          `/v1/sessions/${this.id}/files/${encodeURIComponent(name)}`,
          { method: 'PUT', body: bytes, workspaceId: this.key.workspaceId },
          null,
        ),
      );
    }

    async run(code: string, runOptions: RunOptions = {}): Promise<CodeResult> {
      const timeoutMs = Math.min(runOptions.timeoutMs ?? options.timeoutMs, options.timeoutMs);
      const wire = await this.#on(() =>
        request(
          `/v1/sessions/${this.id}/run`,
          {
            method: 'POST',
            json: { code, timeout_ms: timeoutMs },
            workspaceId: this.key.workspaceId,
            timeoutMs: timeoutMs + ANSWER_MS,
          },
          codeResultWire,
          maxResultBytes(options.fileBytes, options.logBytes),
        ),
      );
      if (wire === null) throw new SandboxError('failed', 'The sandbox gave no result.');
      if (wire.status === 'timeout' || wire.status === 'killed') this.#end();
      return fromWire(wire);
    }

    async close(): Promise<void> {
      if (this.#ended) return;
      this.#end();
      await request(`/v1/sessions/${this.id}`, { method: 'DELETE', workspaceId: this.key.workspaceId }, null).catch(
        () => undefined,
      );
    }

    #end(): void {
      this.#ended = true;
      opened.delete(this);
    }

    /** A request on the session: one that says it ended ends it here too. */
    async #on<T>(send: () => Promise<T>): Promise<T> {
      if (this.#ended) throw new SandboxError('session_ended', 'The code session ended.');
      try {
        return await send();
      } catch (error) {
        if (error instanceof SandboxError && error.code === 'session_ended') this.#end();
        throw error;
      }
    }
  }

  return {
    async availability(): Promise<Availability> {
      try {
        return (
          (await request('/v1/availability', { method: 'GET' }, availabilityWire)) ?? {
            available: false,
            reason: 'no answer',
          }
        );
      } catch (error) {
        return { available: false, reason: error instanceof Error ? error.message : 'the sandbox failed' };
      }
    },

    async open(key) {
      const answer = await request(
        '/v1/sessions',
        { method: 'POST', json: { workspace_id: key.workspaceId, thread_id: key.threadId } },
        openAnswer,
      );
      if (answer === null) throw new SandboxError('failed', 'The sandbox gave no session.');
      const session = new RemoteSession(answer.id, key);
      opened.add(session);
      return session;
    },

    async close() {
      await Promise.all([...opened].map((session) => session.close()));
    },
  };
}

/** A fetch failure's name, message and cause: the runtime's words about the URL, never the headers. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return 'unknown error';
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return `${error.name}: ${error.message}${cause}`.slice(0, 300);
}
