import { defined } from './defined';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/**
 * The gateway and its CLI as separate processes, started exactly as `npm start` and
 * `npm run gateway` start them (node on dist/, built by the global setup, build-node.ts), for
 * tests of what only a process shows: the start-up output, two gateways on one database, a kill -9.
 */

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSX = ['--import', 'tsx'];

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], env: Record<string, string>): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--enable-source-maps', 'dist/cli.js', ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export interface GatewayProcess {
  url: string;
  child: ChildProcess;
  /** Everything written to stdout so far. */
  stdout(): string;
  stderr(): string;
  /** Sends the signal and waits for the exit code (null when killed by a signal). */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * The command `npm start` ends with (package.json), flags included, with this process's node:
 * the gateway as users start it.
 */
const START = ((): string[] => {
  const { scripts } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    scripts: { start: string };
  };
  const [program, ...args] = defined(scripts.start.split('&&').at(-1)).trim().split(/\s+/);
  if (program !== 'node')
    throw new Error(`npm start ends with '${program}', not node: processes.ts cannot start it as it does`);
  return [process.execPath, ...args];
})();

/** The flags `npm start` gives node (package.json's start), for benchmarks that start other servers as it starts the gateway. */
export const START_FLAGS = START.slice(1).filter((arg) => arg.startsWith('--'));

/** How a gateway process is started: by default as `npm start` runs it (START), in this checkout. */
export interface GatewayCommand {
  /** The program and its arguments, e.g. `['npm', 'start']`: run in a process group of its own, which stop() signals whole. */
  command?: string[];
  cwd?: string;
}

/** Starts the gateway (dist/node.js) and resolves once it logs that it listens (PORT 0 picks a free port). */
export function startGatewayProcess(
  env: Record<string, string>,
  timeoutMs = 20_000,
  how: GatewayCommand = {},
): Promise<GatewayProcess> {
  const [program, ...args] = how.command ?? START;
  const group = how.command !== undefined;
  const child = spawn(defined(program), args, {
    cwd: how.cwd ?? ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: group,
  });
  let stdout = '';
  let stderr = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      if (group) process.kill(-defined(child.pid), 'SIGKILL');
      else child.kill('SIGKILL');
      reject(new Error(`gateway did not start in ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, timeoutMs);
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk;
      const match = /Gateway listening on (http:\/\/\S+)/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve({
          url: defined(match[1]),
          child,
          stdout: () => stdout,
          stderr: () => stderr,
          stop: async (signal = 'SIGTERM') => {
            if (child.exitCode === null && child.signalCode === null) {
              if (group) process.kill(-defined(child.pid), signal);
              else child.kill(signal);
            }
            return exited;
          },
        });
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited with ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
}

/**
 * Runs the gateway as `npm start` does (START, the build of src/node.ts) with a configuration it
 * should refuse, to its exit: its code and output. A gateway that starts anyway is stopped after
 * `timeoutMs` (null code) rather than left to hang.
 */
export function runGatewayToExit(env: Record<string, string>, timeoutMs = 20_000): Promise<CliResult> {
  const [program, ...args] = START;
  return new Promise((resolve, reject) => {
    const child = spawn(defined(program), args, {
      cwd: ROOT,
      env: { ...process.env, PORT: '0', HOST: '127.0.0.1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export interface RatelimitWorker {
  /** The next line the worker prints. */
  line(): Promise<string>;
  send(line: string): void;
  exit: Promise<number | null>;
}

/** test/support/ratelimit-worker.ts as a process on the database under `dataDir` (see its commands). */
export async function startRatelimitWorker(dataDir: string, args: string[]): Promise<RatelimitWorker> {
  const child = spawn(process.execPath, [...TSX, 'test/support/ratelimit-worker.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => {
    const waiter = waiting.shift();
    if (waiter) waiter(line);
    else lines.push(line);
  });
  return {
    line: () =>
      lines.length > 0
        ? Promise.resolve(defined(lines.shift()))
        : Promise.race([
            new Promise<string>((resolve) => waiting.push(resolve)),
            exit.then((code) => Promise.reject(new Error(`worker exited with ${code}: ${stderr}`))),
          ]),
    send: (line) => child.stdin.write(`${line}\n`),
    exit,
  };
}

export interface FakeUpstreamProcess {
  /** e.g. http://127.0.0.1:PORT/v1, a virtual key's base_url. */
  baseURL: string;
  child: ChildProcess;
  /** How many of its exchanges are still open (asked over its IPC channel). */
  openExchanges(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * The fake upstream (test/support/fake-upstream.ts) as a process of its own, for measurements of
 * the gateway that the fake's own work (generating huge answers, compressing bombs) must not skew,
 * and for load that would starve a fake sharing the test's process (on 2 cores beside 48 clients,
 * one could not accept connections fast enough).
 */
export function startFakeUpstreamProcess(timeoutMs = 20_000): Promise<FakeUpstreamProcess> {
  const child = spawn(process.execPath, [...TSX, 'test/support/fake-upstream.ts', '--port', '0'], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the fake upstream did not start in ${timeoutMs} ms`));
    }, timeoutMs);
    let stdout = '';
    defined(child.stdout).on('data', (chunk: Buffer) => {
      stdout += chunk;
      const url = /^(http:\/\/\S+)\n/.exec(stdout)?.[1];
      if (!url) return;
      clearTimeout(timer);
      resolve({
        baseURL: `${url}/v1`,
        child,
        openExchanges: () =>
          new Promise((resolveCount) => {
            child.once('message', (message: { openExchanges: number }) => resolveCount(message.openExchanges));
            child.send('open exchanges');
          }),
        stop: async () => {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          await exited;
        },
      });
    });
    void exited.then(() => reject(new Error(`the fake upstream exited before it listened:\n${stdout}`)));
  });
}

/** A /health poller process (health-poller.ts), timing a gateway from outside. */
export interface HealthPoller {
  /** Stops polling: each answer's latency (`raw`) and the gateway's own part of it (`own`), in ms. */
  stop(): Promise<{ raw: number[]; own: number[] }>;
}

/**
 * Starts polling `url`'s /health (the gateway's main thread: `pid`) in a process of its own
 * (health-poller.ts): resolves once it polls.
 */
export function startHealthPoller(url: string, pid: number, timeoutMs = 20_000): Promise<HealthPoller> {
  const child = spawn(process.execPath, [...TSX, 'test/support/health-poller.ts', url, String(pid)], {
    cwd: ROOT,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code) => reject(new Error(`the health poller exited (${code}) before it answered`))),
  );
  const next = <T>() => Promise.race([new Promise<T>((resolve) => child.once('message', resolve)), exited]);
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return next<'polling'>().then(
    () => {
      clearTimeout(timer);
      return {
        stop: () => {
          const measured = next<{ raw: number[]; own: number[] }>();
          child.send('stop');
          return measured;
        },
      };
    },
    (error: unknown) => {
      clearTimeout(timer);
      throw error;
    },
  );
}

/**
 * Resets a process's peak resident memory (VmHWM) to its current resident memory, so that the
 * next memoryOf() reports the peak since now (Linux: /proc/<pid>/clear_refs).
 */
export function resetPeakMemory(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

/**
 * The time a process's main thread (its event loop) has spent on a CPU and waiting for one, in
 * ms (Linux /proc/<pid>/schedstat). Waiting for a CPU is the machine's doing, not the process's:
 * a latency measured from outside minus that wait is what the process itself took.
 */
export function mainThreadSchedule(pid: number): { onCpuMs: number; waitingMs: number } {
  const [onCpu, waiting] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(/\s+/).map(Number);
  return { onCpuMs: defined(onCpu) / 1e6, waitingMs: defined(waiting) / 1e6 };
}

/** The value below which a share `p` (0 to 1) of `values` lie (nearest rank). */
export const percentile = (values: number[], p: number) =>
  defined([...values].sort((a, b) => a - b)[Math.max(0, Math.ceil(values.length * p) - 1)]);

/** Resident and peak resident memory of a process, in MB (Linux /proc). */
export function memoryOf(pid: number): { rssMb: number; peakMb: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024 };
}

/** The chunker processes (runtime/node/chunker-pool.ts) a process started and that are alive, by pid (Linux /proc). */
export function chunkerProcessesOf(parent: number): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        // After the command's name (in parentheses, maybe with spaces): state, then the parent's pid.
        return (
          Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === parent &&
          readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('chunker-process')
        );
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}
