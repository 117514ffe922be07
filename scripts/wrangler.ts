import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Wrangler as the project's scripts run it: the pinned binary, offline. Without these variables it
 * fetches Request.cf data, sends telemetry and checks npm for updates, none of which local
 * development or a dry-run build needs (CI deploys call `npx wrangler` with network instead).
 */

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** `npm run dev:worker`'s local data (`--data DIR`): ./data by default. */
export function devDataDir(dir?: string): string {
  return dir === undefined ? join(ROOT, 'data') : resolve(dir);
}

/**
 * Where `npm run dev:worker`'s wrangler registers its Workers (WRANGLER_REGISTRY_PATH): the
 * address of the workerd running them, which `npm run dev:scheduled` reaches them through.
 */
export function devRegistryPath(dataDir: string): string {
  return join(dataDir, 'registry');
}

export const OFFLINE_ENV = {
  CLOUDFLARE_CF_FETCH_ENABLED: 'false',
  WRANGLER_SEND_METRICS: 'false',
  WRANGLER_HIDE_BANNER: 'true',
};

/**
 * Starts `wrangler <args>` as a direct child (the node process itself, not npx), so that signalling
 * it reaches wrangler, which then stops its workerd processes.
 */
export function spawnWrangler(
  args: string[],
  env: Record<string, string> = {},
  stdio: 'inherit' | 'ignore' = 'inherit',
): ChildProcess {
  const bin = fileURLToPath(new URL('../node_modules/wrangler/bin/wrangler.js', import.meta.url));
  return spawn(process.execPath, [bin, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...OFFLINE_ENV, ...env },
    stdio,
  });
}

/** Resolves to the exit code, or the signal's conventional 128 + n. */
export function exitCode(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve(child.exitCode);
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 + (signalNumber[signal] ?? 1) : 1)));
  });
}

const signalNumber: Partial<Record<NodeJS.Signals, number>> = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };
