import { runCli } from '../../src/cli/run';
import { parseConfig } from '../../src/config';
import { randomToken } from '../../src/lib/crypto';
import { sandboxLimits, type SandboxLimits } from '../../src/sandbox/limits';
import { waitFor } from './wait';

/**
 * `gateway sandbox` (src/cli/sandbox.ts) run in this process on a free loopback port with a fresh
 * secret and the GATEWAY_SANDBOX_* limits `env` sets, for the tests that call it (from Node, from
 * workerd); null where this host has no sandbox (the command then exits at once, saying why).
 */
export async function startSandboxServer(
  env: Record<string, string> = {},
): Promise<{ url: string; secret: string; limits: SandboxLimits; close: () => Promise<void> } | null> {
  const secret = randomToken(32);
  const stop = new AbortController();
  let output = '';
  let exited = false;
  const io = { stdout: (text: string) => (output += text), stderr: (text: string) => (output += text) };
  const served = runCli(
    ['sandbox', '--host', '127.0.0.1', '--port', '0'],
    { ...env, GATEWAY_SANDBOX_SECRET: secret },
    io,
    stop.signal,
  ).finally(() => (exited = true));
  const listening = () => /Sandbox listening on (\S+)/.exec(output)?.[1];
  const url = await waitFor(listening, (found) => found !== undefined || exited, 60_000);
  if (url === undefined) {
    stop.abort();
    await served;
    return null;
  }
  return {
    url,
    secret,
    limits: sandboxLimits(parseConfig(env)),
    close: async () => {
      stop.abort();
      await served;
    },
  };
}
