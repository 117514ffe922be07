import type { Config } from '../config';

/** What one sandbox allows its sessions, from GATEWAY_SANDBOX_* (config.ts says what each means). */
export interface SandboxLimits {
  idleMs: number;
  sessions: number;
  sessionsPerWorkspace: number;
  /** The wall time of one call; a caller may ask for less, never more. */
  timeoutMs: number;
  cpuSeconds: number;
  memoryBytes: number;
  processes: number;
  /** Each of /mnt/data and /tmp; also the largest file a process may write (RLIMIT_FSIZE). */
  diskBytes: number;
  /** Output one call may print before the session is killed. */
  outputBytes: number;
  /** Of that, what the call's logs keep. */
  logBytes: number;
  /** The largest file put in or given back, and the most a call's images and files hold together. */
  fileBytes: number;
  /** Figures and files one call gives back at most. */
  images: number;
  files: number;
  /** Open files per process (RLIMIT_NOFILE). */
  openFiles: number;
  /** Where a local session's cgroup goes (GATEWAY_SANDBOX_CGROUP): a cgroup path, `off`, or undefined to detect one. */
  cgroup: string | undefined;
}

/** What a call's logs keep of its output: a model reads them, and more than this helps it no more. */
const LOG_BYTES = 64 * 1024;
const IMAGES = 8;
const FILES = 16;
const OPEN_FILES = 256;

export function sandboxLimits(
  config: Pick<
    Config,
    | 'GATEWAY_SANDBOX_IDLE_MS'
    | 'GATEWAY_SANDBOX_SESSIONS'
    | 'GATEWAY_SANDBOX_SESSIONS_PER_WORKSPACE'
    | 'GATEWAY_SANDBOX_TIMEOUT_MS'
    | 'GATEWAY_SANDBOX_CPU_SECONDS'
    | 'GATEWAY_SANDBOX_MEMORY_MB'
    | 'GATEWAY_SANDBOX_PROCESSES'
    | 'GATEWAY_SANDBOX_DISK_MB'
    | 'GATEWAY_SANDBOX_OUTPUT_BYTES'
    | 'GATEWAY_SANDBOX_FILE_BYTES'
    | 'GATEWAY_SANDBOX_CGROUP'
  >,
): SandboxLimits {
  const MiB = 1024 * 1024;
  return {
    idleMs: config.GATEWAY_SANDBOX_IDLE_MS,
    sessions: config.GATEWAY_SANDBOX_SESSIONS,
    sessionsPerWorkspace: config.GATEWAY_SANDBOX_SESSIONS_PER_WORKSPACE,
    timeoutMs: config.GATEWAY_SANDBOX_TIMEOUT_MS,
    cpuSeconds: config.GATEWAY_SANDBOX_CPU_SECONDS,
    memoryBytes: config.GATEWAY_SANDBOX_MEMORY_MB * MiB,
    processes: config.GATEWAY_SANDBOX_PROCESSES,
    diskBytes: config.GATEWAY_SANDBOX_DISK_MB * MiB,
    outputBytes: config.GATEWAY_SANDBOX_OUTPUT_BYTES,
    logBytes: Math.min(LOG_BYTES, config.GATEWAY_SANDBOX_OUTPUT_BYTES),
    fileBytes: config.GATEWAY_SANDBOX_FILE_BYTES,
    images: IMAGES,
    files: FILES,
    openFiles: OPEN_FILES,
    cgroup: config.GATEWAY_SANDBOX_CGROUP,
  };
}
