import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import * as z from 'zod';
import type { SandboxLimits } from '../../sandbox/limits';
import {
  isSandboxFileName,
  SandboxError,
  type Availability,
  type CodeResult,
  type RunOptions,
  type Sandbox,
  type SandboxKey,
  type SandboxSession,
} from '../../sandbox/sandbox';
import { cgroupRoot, removeCgroupRoot, sessionCgroup, type CgroupRoot, type SessionCgroup } from './cgroup';
import { seccompProgram } from './seccomp';

/**
 * Node's sandbox: each session one Python process (sandbox-driver.py) inside bubblewrap, which gives
 * it namespaces of its own: no network (its loopback is not the host's), its own PIDs (the host's
 * processes cannot be seen, let alone traced or signalled), its own user namespace (no capability
 * of the host's, no further namespace, and a process count of its own), and a filesystem made only
 * of a read-only /usr and the few files of /etc that Python and matplotlib read, a fresh /proc, and
 * /mnt/data, /tmp and /dev/shm as tmpfs of a bounded size (the rest is read-only): nothing of the host's files, the gateway's
 * database, keys or environment is there to read, and filling the disk fills only the tmpfs.
 * Files go in and out through the driver, never through a host directory the code could plant a
 * link in. The driver sets the limits on itself (rlimits, which nothing in the sandbox can raise)
 * and a low priority; the gateway bounds the wall time of a call and the output it reads, and
 * kills the whole sandbox (its PID namespace dies with it) on either. As root, the sandbox runs as
 * `nobody`: root's processes are exempt from RLIMIT_NPROC. A seccomp filter (seccomp.ts) refuses the
 * system calls escapes use, and where the gateway can make cgroups (cgroup.ts) each session has one,
 * which bounds its memory and processes as a whole.
 */

export interface LocalSandboxOptions {
  limits: SandboxLimits;
  /** The programs; by default Debian's, which have numpy, pandas and matplotlib (not a pyenv one on PATH). */
  bwrap?: string;
  python?: string;
}

const BWRAP = '/usr/bin/bwrap';
const PYTHON = '/usr/bin/python3';
/** The unprivileged user a root gateway runs sessions as (Debian's nobody). */
const NOBODY = 65534;
/** How long a new session may take to load Python, numpy, pandas and matplotlib on a busy machine. */
const START_MS = 60_000;
/** What a session's answers may carry beyond its files and images (base64 makes 4 bytes of 3). */
const ANSWER_OVERHEAD = 1024 * 1024;
/** /dev/shm's size: POSIX semaphores and shared memory (multiprocessing's), not files. */
const SHM_BYTES = 16 * 1024 * 1024;
/** Bytes of bubblewrap's own error output kept, to say why a session did not start. */
const STDERR_BYTES = 2048;
/** The file descriptor bubblewrap reads the seccomp filter from (0 to 2 are stdio, 3 the driver's answers). */
const SECCOMP_FD = 4;
/** A session's processes beyond the code's: bubblewrap outside its namespaces and its init inside. */
const BWRAP_PROCESSES = 2;

export function localSandbox(options: LocalSandboxOptions): Sandbox {
  const programs = { bwrap: options.bwrap ?? BWRAP, python: options.python ?? PYTHON };
  const { limits } = options;
  /**
   * The sessions by thread: `session` is null while it starts. Counted, made room for and added in
   * one synchronous step, so that opens side by side never pass the bounds together.
   */
  const sessions = new Map<string, SessionEntry>();
  let setup: Promise<{ availability: Availability; cgroups: CgroupRoot | null }> | undefined;
  const prepared = () => (setup ??= prepare(programs, limits.cgroup));
  let closed = false;

  const keyOf = (key: SandboxKey) => `${key.workspaceId}\n${key.threadId}`;

  /** Makes room for one more session of `workspaceId`: ends the longest idle one that stands in the way. */
  const makeRoom = (workspaceId: string) => {
    const entries = [...sessions.entries()];
    const ofWorkspace = entries.filter(([, entry]) => entry.workspaceId === workspaceId);
    const perWorkspace = ofWorkspace.length >= limits.sessionsPerWorkspace;
    const crowded = perWorkspace ? ofWorkspace : entries.length >= limits.sessions ? entries : null;
    if (crowded === null) return;
    const idlest = crowded
      .flatMap(([name, { session }]) => (session && !session.running ? [{ name, session }] : []))
      .sort((a, b) => a.session.lastUsed - b.session.lastUsed)
      .at(0);
    if (!idlest) {
      throw new SandboxError(
        'busy',
        perWorkspace
          ? `This workspace's ${limits.sessionsPerWorkspace} code sessions (GATEWAY_SANDBOX_SESSIONS_PER_WORKSPACE) are all running code.`
          : `The gateway's ${limits.sessions} code sessions (GATEWAY_SANDBOX_SESSIONS) are all running code.`,
      );
    }
    sessions.delete(idlest.name);
    void idlest.session.close();
  };

  const sandbox: Sandbox = {
    async availability() {
      return (await prepared()).availability;
    },

    async open(key) {
      const name = keyOf(key);
      const kept = sessions.get(name);
      if (kept) {
        const session = await kept.starting.catch(() => null);
        if (session?.alive) return session;
        if (sessions.get(name) === kept) sessions.delete(name);
      }
      const { availability: ready, cgroups } = await prepared();
      if (!ready.available) throw new SandboxError('unavailable', ready.reason);
      if (closed) throw new SandboxError('unavailable', 'The sandbox is closed: the gateway is stopping.');
      // Another open of the thread may have started its session meanwhile.
      const raced = sessions.get(name);
      if (raced) return raced.starting;
      makeRoom(key.workspaceId);
      const forget = () => {
        if (sessions.get(name) === entry) sessions.delete(name);
      };
      const entry: SessionEntry = {
        workspaceId: key.workspaceId,
        starting: LocalSession.start(programs, limits, cgroups, key.workspaceId, forget),
        session: null,
      };
      sessions.set(name, entry);
      entry.starting.then((session) => (entry.session = session), forget);
      return entry.starting;
    },

    async close() {
      closed = true;
      const all = [...sessions.values()];
      sessions.clear();
      await Promise.all(all.map(({ starting }) => starting.then((session) => session.close()).catch(() => undefined)));
      const cgroups = setup && (await setup).cgroups;
      if (cgroups) await removeCgroupRoot(cgroups);
    },
  };
  return sandbox;
}

interface SessionEntry {
  workspaceId: string;
  starting: Promise<LocalSession>;
  /** Null while it starts. */
  session: LocalSession | null;
}

/**
 * Whether sessions start here, and the cgroups they go in: where none can be made, the sessions are
 * bounded by their rlimits alone, which the availability says.
 */
async function prepare(
  programs: { bwrap: string; python: string },
  cgroup: string | undefined,
): Promise<{ availability: Availability; cgroups: CgroupRoot | null }> {
  const availability = await probe(programs);
  if (!availability.available) return { availability, cgroups: null };
  const cgroups = await cgroupRoot(cgroup);
  if (cgroups.root !== null) return { availability, cgroups: cgroups.root };
  return {
    availability: {
      available: true,
      detail: `no cgroup per session: ${cgroups.reason}; a session's memory and processes are bounded per process (rlimits)`,
    },
    cgroups: null,
  };
}

/** Whether a sandbox starts here: bubblewrap runs, and Python in it imports what code_interpreter offers. */
async function probe(programs: { bwrap: string; python: string }): Promise<Availability> {
  const child = spawn(
    programs.bwrap,
    [...bwrapArguments(programs.python, 3), '-c', 'import numpy, pandas, matplotlib'],
    spawnOptions(['ignore', 'ignore', 'pipe', 'pipe']),
  );
  giveSeccompProgram(child, 3);
  let stderr = '';
  child.stderr?.on('data', (data: Buffer) => (stderr = (stderr + data.toString('utf8')).slice(-STDERR_BYTES)));
  return new Promise((resolve) => {
    child.once('error', (error) =>
      resolve({ available: false, reason: `${programs.bwrap} cannot be run (${error.message}): install bubblewrap.` }),
    );
    child.once('exit', (code) =>
      resolve(
        code === 0
          ? { available: true }
          : {
              available: false,
              reason: `${programs.python} with numpy, pandas and matplotlib cannot run in bubblewrap here: ${stderr.trim().split('\n').at(-1) ?? `exit ${code}`}`,
            },
      ),
    );
  });
}

/**
 * bubblewrap's arguments up to the program it runs (Python): every namespace of its own, nothing of
 * the host but /usr (read-only) and the files of /etc that the dynamic loader, Python's BLAS and
 * matplotlib read.
 */
function bwrapArguments(python: string, seccompFd: number, diskBytes = 64 * 1024 * 1024): string[] {
  const size = String(diskBytes);
  return [
    '--seccomp',
    String(seccompFd),
    '--unshare-all',
    '--unshare-user',
    '--disable-userns',
    '--die-with-parent',
    '--new-session',
    '--hostname',
    'sandbox',
    '--ro-bind',
    '/usr',
    '/usr',
    '--symlink',
    'usr/bin',
    '/bin',
    '--symlink',
    'usr/lib',
    '/lib',
    '--symlink',
    'usr/lib64',
    '/lib64',
    '--ro-bind-try',
    '/etc/alternatives',
    '/etc/alternatives',
    '--ro-bind-try',
    '/etc/ld.so.cache',
    '/etc/ld.so.cache',
    '--ro-bind-try',
    '/etc/matplotlibrc',
    '/etc/matplotlibrc',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--size',
    String(SHM_BYTES),
    '--tmpfs',
    '/dev/shm',
    '--size',
    size,
    '--tmpfs',
    '/tmp',
    '--size',
    size,
    '--tmpfs',
    '/mnt/data',
    // bubblewrap's root and /dev are tmpfs of no size of their own: read-only, nothing fills them.
    '--remount-ro',
    '/dev',
    '--remount-ro',
    '/',
    '--chdir',
    '/mnt/data',
    '--clearenv',
    ...Object.entries(SANDBOX_ENV).flatMap(([name, value]) => ['--setenv', name, value]),
    '--',
    python,
  ];
}

/**
 * The session's whole environment: Debian's programs, a home in its /tmp, matplotlib drawing without
 * a display into a cache it may write, and one BLAS thread (each thread counts against its processes).
 */
const SANDBOX_ENV = {
  PATH: '/usr/bin',
  HOME: '/tmp',
  LANG: 'C.UTF-8',
  MPLBACKEND: 'Agg',
  MPLCONFIGDIR: '/tmp/matplotlib',
  OPENBLAS_NUM_THREADS: '1',
  OMP_NUM_THREADS: '1',
  PYTHONDONTWRITEBYTECODE: '1',
};

/**
 * No environment (bubblewrap clears the sandbox's anyway), its own process group (killed whole),
 * started from / (the gateway's directory may be closed to nobody), and as root the user nobody:
 * root is exempt from RLIMIT_NPROC, and libuv drops root's groups with it.
 */
function spawnOptions(stdio: ('pipe' | 'ignore')[]) {
  return { stdio, env: {}, cwd: '/', detached: true, ...(runsAsNobody() ? { uid: NOBODY, gid: NOBODY } : {}) };
}

const runsAsNobody = () => process.getuid?.() === 0;

/** Writes the seccomp filter to the pipe bubblewrap reads it from, to its end. */
function giveSeccompProgram(child: ChildProcess, fd: number): void {
  const pipe = child.stdio[fd];
  if (pipe instanceof Writable) {
    // A bubblewrap that failed before reading it closes the pipe: its exit says why.
    pipe.on('error', () => undefined);
    pipe.end(seccompProgram());
  }
}

/**
 * The program that starts a session: bubblewrap, or where the session has a cgroup, a shell that
 * moves itself into it before it becomes bubblewrap, so that no code runs outside it.
 */
function sessionCommand(bwrap: string, args: string[], cgroup: SessionCgroup | null): [string, string[]] {
  if (cgroup === null) return [bwrap, args];
  const join = 'for procs in "$@"; do [ "$procs" = -- ] && break; echo $$ > "$procs" || exit 125; shift; done; shift';
  // PWD is the shell's own: bubblewrap's init would keep it (the code's environment is cleared anyway).
  return ['/bin/sh', ['-c', `${join}; unset PWD; exec "$@"`, 'sh', ...cgroup.procs, '--', bwrap, ...args]];
}

let driverSource: string | undefined;
/** The driver's code: beside this module, in src/ and in dist/ (scripts/build-node.mjs copies it). */
const driver = () => (driverSource ??= readFileSync(new URL('./sandbox-driver.py', import.meta.url), 'utf8'));

/** What the driver answers on fd 3; any other line means the session is broken and ends it. */
const base64Text = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/);
const runAnswer = z.object({
  status: z.enum(['ok', 'error']),
  error: z.object({ name: z.string().max(256), value: z.string().max(8192) }).optional(),
  images: z.array(base64Text),
  files: z.array(z.object({ path: z.string().min(1).max(4096), bytes: base64Text })),
});
type RunAnswer = z.infer<typeof runAnswer>;
const putAnswer = z.object({ ok: z.boolean(), message: z.string().max(1024).optional() });
const readyAnswer = z.object({ ready: z.literal(true) });

/** The call in progress: its output as read so far, and what ends it. */
interface Call {
  token: Buffer;
  kept: Buffer[];
  keptBytes: number;
  readBytes: number;
  /** Output bytes that may be the start of the token, held until the next read says. */
  held: Buffer;
  outputEnded: boolean;
  answer: RunAnswer | null;
  finish: (result: CodeResult) => void;
}

class LocalSession implements SandboxSession {
  readonly id: string;
  readonly workspaceId: string;
  lastUsed = Date.now();
  readonly #child: ChildProcess;
  readonly #stdin: Writable;
  readonly #stdout: Readable;
  readonly #limits: SandboxLimits;
  readonly #forget: () => void;
  readonly #cgroup: SessionCgroup | null;
  /** The processes the kernel had killed out of memory in the session's cgroup, as last seen. */
  #oomKills = 0;
  #exited = false;
  #stderr = '';
  #answerBuffer: Buffer[] = [];
  #answerBytes = 0;
  /** Who waits for the next answer line (the start, a put, a run). */
  #waiting: ((line: unknown) => void) | null = null;
  #call: Call | null = null;
  /** Calls run one after another: each waits for the one before. */
  #queue: Promise<unknown> = Promise.resolve();
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** Why the session ended, when a limit ended it. */
  #death: { status: 'timeout' | 'killed'; reason: string } | null = null;
  readonly #exit: Promise<void>;

  private constructor(
    id: string,
    child: ChildProcess,
    limits: SandboxLimits,
    cgroup: SessionCgroup | null,
    workspaceId: string,
    forget: () => void,
    pipes: { stdin: Writable; stdout: Readable; answers: Readable },
  ) {
    this.id = id;
    this.#child = child;
    this.#cgroup = cgroup;
    this.#limits = limits;
    this.workspaceId = workspaceId;
    this.#forget = forget;
    this.#stdin = pipes.stdin;
    this.#stdout = pipes.stdout;
    // A write to a process that died fails: its exit tells the caller.
    this.#stdin.on('error', () => undefined);
    child.stderr?.on(
      'data',
      (data: Buffer) => (this.#stderr = (this.#stderr + data.toString('utf8')).slice(-STDERR_BYTES)),
    );
    this.#stdout.on('data', (data: Buffer) => this.#output(data));
    // Read only during a call: between calls, whatever the code left running blocks on a full pipe.
    this.#stdout.pause();
    pipes.answers.on('data', (data: Buffer) => this.#answers(data));
    child.on('error', () => undefined);
    this.#exit = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        this.#exited = true;
        clearTimeout(this.#idleTimer);
        this.#forget();
        this.#waiting?.(null);
        this.#waiting = null;
        const call = this.#call;
        // Out of memory, the kernel may have killed the interpreter itself: the cgroup says so, and is then removed.
        void this.#outOfMemory()
          .catch(() => null)
          .then((outOfMemory) => {
            if (call) {
              const death = this.#death ??
                outOfMemory ?? { status: 'killed' as const, reason: exitReason(code, signal, this.#limits) };
              call.finish(this.#result(call, death.status, null, death.reason));
            }
            return this.#cgroup?.remove();
          })
          .catch(() => undefined)
          .finally(resolve);
      }),
    );
  }

  static async start(
    programs: { bwrap: string; python: string },
    limits: SandboxLimits,
    cgroups: CgroupRoot | null,
    workspaceId: string,
    forget: () => void,
  ): Promise<LocalSession> {
    const id = randomBytes(16).toString('hex');
    const driverLimits = {
      processes: limits.processes,
      memory: limits.memoryBytes,
      cpu: limits.cpuSeconds,
      fsize: limits.diskBytes,
      nofile: limits.openFiles,
      images: limits.images,
      files: limits.files,
      file_bytes: limits.fileBytes,
    };
    const cgroup =
      cgroups &&
      (await sessionCgroup(
        cgroups,
        id,
        { memoryBytes: sessionMemoryBytes(limits), processes: limits.processes + BWRAP_PROCESSES },
        runsAsNobody() ? NOBODY : undefined,
      ).catch((error: unknown) => {
        throw new SandboxError(
          'failed',
          `The session's cgroup cannot be made: ${error instanceof Error ? error.message : String(error)}`,
        );
      }));
    const [command, args] = sessionCommand(
      programs.bwrap,
      [
        ...bwrapArguments(programs.python, SECCOMP_FD, limits.diskBytes),
        '-u',
        '-c',
        driver(),
        JSON.stringify(driverLimits),
      ],
      cgroup,
    );
    const child = spawn(command, args, spawnOptions(['pipe', 'pipe', 'pipe', 'pipe', 'pipe']));
    giveSeccompProgram(child, SECCOMP_FD);
    const { stdin, stdout } = child;
    const answers = child.stdio[3];
    if (stdin === null || stdout === null || !(answers instanceof Readable)) {
      child.kill('SIGKILL');
      await cgroup?.remove();
      throw new SandboxError('failed', 'The sandbox process has no pipes.');
    }
    const session = new LocalSession(id, child, limits, cgroup, workspaceId, forget, { stdin, stdout, answers });
    const failed = new Promise<never>((_, reject) => {
      child.once('error', (error) => {
        // A process that never started has no exit to remove its cgroup after.
        void cgroup?.remove().catch(() => undefined);
        reject(new SandboxError('unavailable', `bubblewrap cannot be run: ${error.message}`));
      });
    });
    const timer = setTimeout(() => session.#kill('killed', 'the session did not start in time'), START_MS);
    try {
      const line = await Promise.race([session.#nextAnswer(), failed]);
      if (!readyAnswer.safeParse(line).success) {
        session.#kill('killed', 'the session did not start');
        throw new SandboxError('failed', `The sandbox did not start: ${session.#stderr.trim().slice(-500)}`);
      }
    } finally {
      clearTimeout(timer);
    }
    session.#idle();
    return session;
  }

  get alive(): boolean {
    return !this.#exited && this.#death === null;
  }

  get running(): boolean {
    return this.#call !== null;
  }

  putFile(name: string, bytes: Uint8Array): Promise<void> {
    if (!isSandboxFileName(name)) {
      return Promise.reject(
        new SandboxError('invalid_request', 'A file name is one path segment of printable characters.'),
      );
    }
    if (bytes.byteLength > this.#limits.fileBytes) {
      return Promise.reject(
        new SandboxError(
          'invalid_request',
          `The file is larger than ${this.#limits.fileBytes} bytes (GATEWAY_SANDBOX_FILE_BYTES).`,
        ),
      );
    }
    return this.#turn(async () => {
      this.#stdin.write(`${JSON.stringify({ op: 'put', name, size: bytes.byteLength })}\n`);
      this.#stdin.write(bytes);
      const parsed = putAnswer.safeParse(await this.#nextAnswer());
      if (!parsed.success) throw this.#broken();
      if (!parsed.data.ok)
        throw new SandboxError('invalid_request', `The file cannot be written: ${parsed.data.message ?? 'unknown'}.`);
    });
  }

  run(code: string, options: RunOptions = {}): Promise<CodeResult> {
    const bytes = Buffer.from(code, 'utf8');
    if (bytes.byteLength > this.#limits.fileBytes) {
      return Promise.reject(
        new SandboxError('invalid_request', `The code is larger than ${this.#limits.fileBytes} bytes.`),
      );
    }
    const timeoutMs = Math.min(options.timeoutMs ?? this.#limits.timeoutMs, this.#limits.timeoutMs);
    return this.#turn(async () => {
      const token = Buffer.from(`\u0000end-of-call-${randomBytes(16).toString('hex')}\u0000`);
      const result = new Promise<CodeResult>((finish) => {
        this.#call = {
          token,
          kept: [],
          keptBytes: 0,
          readBytes: 0,
          held: Buffer.alloc(0),
          outputEnded: false,
          answer: null,
          finish,
        };
      });
      const timer = setTimeout(
        () => this.#kill('timeout', `the code ran past its ${timeoutMs} ms (GATEWAY_SANDBOX_TIMEOUT_MS)`),
        timeoutMs,
      );
      this.#stdout.resume();
      this.#stdin.write(`${JSON.stringify({ op: 'run', size: bytes.byteLength, token: token.toString('latin1') })}\n`);
      this.#stdin.write(bytes);
      try {
        const outcome = await result;
        const outOfMemory = await this.#outOfMemory();
        if (outOfMemory === null) return outcome;
        // Over its memory, the session is ended whole, as at any other limit: what the kernel killed may have been anything of it.
        this.#kill(outOfMemory.status, outOfMemory.reason);
        await this.#exit;
        return { ...outcome, ...outOfMemory };
      } finally {
        clearTimeout(timer);
        this.#call = null;
        this.#stdout.pause();
      }
    });
  }

  async close(): Promise<void> {
    if (!this.#exited) this.#kill('killed', 'the session was closed');
    await this.#exit;
  }

  /** Runs `work` after the calls before it, on a live session; the session's idle time starts again after it. */
  #turn<T>(work: () => Promise<T>): Promise<T> {
    const turn = this.#queue.then(async () => {
      if (!this.alive) {
        throw new SandboxError(
          'session_ended',
          `The code session ended${this.#death ? `: ${this.#death.reason}` : ''}.`,
        );
      }
      clearTimeout(this.#idleTimer);
      try {
        return await work();
      } finally {
        this.lastUsed = Date.now();
        if (this.alive) this.#idle();
      }
    });
    this.#queue = turn.catch(() => undefined);
    return turn;
  }

  /** Whether the kernel killed any of the session's processes out of memory since last asked, and then why. */
  async #outOfMemory(): Promise<{ status: 'killed'; reason: string } | null> {
    if (this.#cgroup === null) return null;
    const kills = await this.#cgroup.oomKills();
    if (kills <= this.#oomKills) return null;
    this.#oomKills = kills;
    const mib = Math.round(sessionMemoryBytes(this.#limits) / 2 ** 20);
    return {
      status: 'killed',
      reason: `the session's processes together used more than its ${mib} MiB of memory (GATEWAY_SANDBOX_MEMORY_MB, with its /mnt/data and /tmp)`,
    };
  }

  #idle(): void {
    clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(
      () => this.#kill('killed', 'the session was idle too long (GATEWAY_SANDBOX_IDLE_MS)'),
      this.#limits.idleMs,
    );
    this.#idleTimer.unref();
  }

  /** Kills every process of the session: bubblewrap's group, and with it its PID namespace. */
  #kill(status: 'timeout' | 'killed', reason: string): void {
    this.#death ??= { status, reason };
    this.#stdout.pause();
    const pid = this.#child.pid;
    if (this.#exited || pid === undefined) return;
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      this.#child.kill('SIGKILL');
    }
  }

  #broken(): SandboxError {
    this.#kill('killed', 'the sandbox answered what the gateway did not ask');
    return new SandboxError('failed', 'The code session broke and was ended.');
  }

  #nextAnswer(): Promise<unknown> {
    if (this.#exited) return Promise.resolve(null);
    return new Promise((resolve) => (this.#waiting = resolve));
  }

  /** Lines on fd 3, each bounded: a longer one kills the session. */
  #answers(data: Buffer): void {
    const cap = Math.ceil((this.#limits.fileBytes * 4) / 3) + ANSWER_OVERHEAD;
    let rest = data;
    for (let end = rest.indexOf(10); end >= 0; end = rest.indexOf(10)) {
      const line = Buffer.concat([...this.#answerBuffer, rest.subarray(0, end)]).toString('utf8');
      this.#answerBuffer = [];
      this.#answerBytes = 0;
      rest = rest.subarray(end + 1);
      let value: unknown = null;
      try {
        value = JSON.parse(line);
      } catch {
        // Not JSON: answered as null, which no answer's schema accepts.
      }
      this.#answer(value);
    }
    this.#answerBytes += rest.byteLength;
    if (this.#answerBytes > cap) {
      this.#answerBuffer = [];
      this.#kill('killed', 'the sandbox answered more than a call may return (GATEWAY_SANDBOX_FILE_BYTES)');
    } else if (rest.byteLength > 0) this.#answerBuffer.push(rest);
  }

  #answer(value: unknown): void {
    const call = this.#call;
    if (call) {
      const parsed = runAnswer.safeParse(value);
      if (!parsed.success) {
        this.#kill('killed', 'the sandbox answered what the gateway did not ask');
        return;
      }
      call.answer = parsed.data;
      this.#endCall(call);
      return;
    }
    const waiting = this.#waiting;
    this.#waiting = null;
    if (waiting) waiting(value);
    else this.#kill('killed', 'the sandbox answered what the gateway did not ask');
  }

  /** The code's output: kept up to the logs' bound, counted up to the output limit, until the call's token. */
  #output(data: Buffer): void {
    const call = this.#call;
    if (!call || call.outputEnded) return;
    call.readBytes += data.byteLength;
    if (call.readBytes > this.#limits.outputBytes + call.token.byteLength) {
      this.#kill(
        'killed',
        `the code printed more than ${this.#limits.outputBytes} bytes (GATEWAY_SANDBOX_OUTPUT_BYTES)`,
      );
      return;
    }
    const pending = Buffer.concat([call.held, data]);
    const at = pending.indexOf(call.token);
    const end = at >= 0 ? at : Math.max(0, pending.byteLength - (call.token.byteLength - 1));
    const room = this.#limits.logBytes - call.keptBytes;
    if (room > 0) {
      const kept = pending.subarray(0, Math.min(end, room));
      call.kept.push(Buffer.from(kept));
      call.keptBytes += kept.byteLength;
    }
    call.held = at >= 0 ? Buffer.alloc(0) : Buffer.from(pending.subarray(end));
    if (at >= 0) {
      call.outputEnded = true;
      this.#stdout.pause();
      this.#endCall(call);
    }
  }

  /** A call ends once both its answer and the end of its output are in. */
  #endCall(call: Call): void {
    const answer = call.answer;
    if (!answer || !call.outputEnded) return;
    call.finish(this.#result(call, answer.status, answer));
  }

  /** The call's result: its answer's, or with none (the session died) its output alone and why. */
  #result(call: Call, status: CodeResult['status'], answer: RunAnswer | null, reason?: string): CodeResult {
    const printed = call.readBytes - (call.outputEnded ? call.token.byteLength : 0);
    return {
      status,
      logs: Buffer.concat(call.kept).toString('utf8'),
      logsTruncated: printed > call.keptBytes,
      images: (answer?.images ?? []).map((image) => ({
        mime: 'image/png' as const,
        bytes: Buffer.from(image, 'base64'),
      })),
      files: (answer?.files ?? []).map((file) => ({ path: file.path, bytes: Buffer.from(file.bytes, 'base64') })),
      ...(answer?.error ? { error: answer.error } : {}),
      ...(reason ? { reason } : {}),
    };
  }
}

/**
 * A session's memory as a whole (its cgroup's bound): GATEWAY_SANDBOX_MEMORY_MB for its processes
 * together, and its tmpfs (/mnt/data, /tmp, /dev/shm), whose files are memory too, at their size.
 */
function sessionMemoryBytes(limits: SandboxLimits): number {
  return limits.memoryBytes + 2 * limits.diskBytes + SHM_BYTES;
}

/** Why the interpreter ended on its own: bubblewrap exits with its status, 128 + a signal's number. */
function exitReason(code: number | null, signal: NodeJS.Signals | null, limits: SandboxLimits): string {
  // SIGXCPU is 24: RLIMIT_CPU reached (the kernel kills with SIGKILL at the hard limit, 137).
  if (code === 128 + 24 || signal === 'SIGXCPU') {
    return `the session used its ${limits.cpuSeconds} s of CPU time (GATEWAY_SANDBOX_CPU_SECONDS)`;
  }
  return `the interpreter ended (${signal ?? `exit ${code}`})`;
}
