import { nodeConfig } from '../runtime/node/config';
import { localSandbox } from '../runtime/node/sandbox';
import { listen } from '../runtime/node/server';
import { sandboxLimits } from '../sandbox/limits';
import { sandboxServer } from '../sandbox/server';
import type { ServeContext } from './command';

/**
 * `gateway sandbox`: this host's sandbox (runtime/node/sandbox.ts) served over HTTP
 * (sandbox/server.ts) until the process is told to stop, when every session is ended. The limits
 * are this host's GATEWAY_SANDBOX_* variables; callers must send GATEWAY_SANDBOX_SECRET.
 */
export async function serveSandbox(ctx: ServeContext): Promise<number> {
  const { host, port } = ctx.values;
  const config = nodeConfig({
    ...ctx.env,
    ...(typeof host === 'string' ? { HOST: host } : {}),
    ...(typeof port === 'string' ? { PORT: port } : {}),
  });
  const secret = config.GATEWAY_SANDBOX_SECRET;
  if (secret === undefined) {
    ctx.io.stderr(
      'error: set GATEWAY_SANDBOX_SECRET (at least 32 characters: openssl rand -hex 32), which callers send.\n',
    );
    return 2;
  }
  const limits = sandboxLimits(config);
  const sandbox = localSandbox({ limits });
  const availability = await sandbox.availability();
  if (!availability.available) {
    ctx.io.stderr(`error: no sandbox on this host: ${availability.reason}\n`);
    return 1;
  }
  // What it does without (say, a cgroup per session) is said once, as the gateway's start log says it.
  if (availability.detail !== undefined) ctx.io.stderr(`warning: ${availability.detail}\n`);
  const app = sandboxServer({ sandbox, secret, fileBytes: limits.fileBytes });
  const { server, url } = await listen((request) => app.fetch(request), config);
  ctx.io.stdout(`Sandbox listening on ${url}\n`);
  await new Promise<void>((resolve) => {
    if (ctx.stop.aborted) resolve();
    ctx.stop.addEventListener('abort', () => resolve(), { once: true });
  });
  server.close();
  await sandbox.close();
  ctx.io.stdout('Sandbox stopped; its sessions are ended.\n');
  return 0;
}
