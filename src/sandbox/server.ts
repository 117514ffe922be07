import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { timingSafeEqual } from 'hono/utils/buffer';
import { ERROR_STATUS, openRequest, runRequest, toWire, WORKSPACE_HEADER, type ErrorWire } from './protocol';
import { SandboxError, type Sandbox, type SandboxErrorCode, type SandboxSession } from './sandbox';

/**
 * A sandbox served over HTTP (protocol.ts): what `gateway sandbox` runs on a Linux host for gateways
 * that have none of their own (Workers, Node without bubblewrap). Only a caller holding the shared
 * secret is served, compared in constant time; bodies are bounded as they arrive (chunked ones too);
 * every failure is one JSON envelope, never an internal message.
 */

export interface SandboxServerOptions {
  sandbox: Sandbox;
  /** The secret callers send as a bearer token (GATEWAY_SANDBOX_SECRET). */
  secret: string;
  /** The largest file put in, and so the largest request (GATEWAY_SANDBOX_FILE_BYTES). */
  fileBytes: number;
}

/** A session request's JSON (its workspace and thread ids), at most. */
const OPEN_BYTES = 4096;
/** A run's JSON beyond its code. */
const RUN_OVERHEAD = 4096;

function failure(c: Context, code: SandboxErrorCode | 'unauthorized', message: string) {
  const body: ErrorWire = { error: { code, message } };
  return c.json(body, ERROR_STATUS[code]);
}

export function sandboxServer(options: SandboxServerOptions): Hono {
  const { sandbox } = options;
  /** The sessions issued, by id, with their workspace: a request on one must name it. */
  const sessions = new Map<string, { session: SandboxSession; workspaceId: string }>();

  const sessionOf = (c: Context): SandboxSession => {
    const entry = sessions.get(c.req.param('id') ?? '');
    if (!entry || entry.workspaceId !== c.req.header(WORKSPACE_HEADER)) {
      throw new SandboxError('session_ended', 'No such code session.');
    }
    if (!entry.session.alive) {
      sessions.delete(entry.session.id);
      throw new SandboxError('session_ended', 'The code session ended.');
    }
    return entry.session;
  };

  const limited = (maxSize: number) =>
    bodyLimit({
      maxSize,
      onError: (c) => {
        // The rest of the body is not read: the connection cannot carry another request.
        c.header('connection', 'close');
        return failure(c, 'invalid_request', `The request's body is larger than ${maxSize} bytes.`);
      },
    });

  const app = new Hono();
  app.use('*', async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const token = header.startsWith('Bearer ') ? header.slice('Bearer '.length) : '';
    if (!(await timingSafeEqual(token, options.secret))) {
      return failure(c, 'unauthorized', 'A bearer token with the sandbox secret is required.');
    }
    await next();
  });

  app.get('/v1/availability', async (c) => c.json(await sandbox.availability()));

  app.post('/v1/sessions', limited(OPEN_BYTES), async (c) => {
    const parsed = openRequest.safeParse(await c.req.json().catch(() => null));
    if (!parsed.success) return failure(c, 'invalid_request', 'Expected {"workspace_id","thread_id"}.');
    for (const [id, entry] of sessions) if (!entry.session.alive) sessions.delete(id);
    const session = await sandbox.open({ workspaceId: parsed.data.workspace_id, threadId: parsed.data.thread_id });
    sessions.set(session.id, { session, workspaceId: parsed.data.workspace_id });
    return c.json({ id: session.id });
  });

  app.put('/v1/sessions/:id/files/:name', limited(options.fileBytes), async (c) => {
    const session = sessionOf(c);
    await session.putFile(c.req.param('name'), new Uint8Array(await c.req.arrayBuffer()));
    return c.body(null, 204);
  });

  app.post('/v1/sessions/:id/run', limited(options.fileBytes + RUN_OVERHEAD), async (c) => {
    const session = sessionOf(c);
    const parsed = runRequest.safeParse(await c.req.json().catch(() => null));
    if (!parsed.success) return failure(c, 'invalid_request', 'Expected {"code","timeout_ms"}.');
    const result = await session.run(parsed.data.code, { timeoutMs: parsed.data.timeout_ms });
    return c.json(toWire(result));
  });

  app.delete('/v1/sessions/:id', async (c) => {
    const session = sessionOf(c);
    sessions.delete(session.id);
    await session.close();
    return c.body(null, 204);
  });

  app.notFound((c) => failure(c, 'invalid_request', 'No such route.'));
  app.onError((error, c) =>
    error instanceof SandboxError
      ? failure(c, error.code, error.message)
      : failure(c, 'failed', 'The sandbox failed to answer.'),
  );
  return app;
}
