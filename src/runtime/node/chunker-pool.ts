import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { setPriority } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Chunk } from '../../retrieval/chunk';
import { fileTooLarge, type Chunker, type ChunkJob } from '../../retrieval/chunker';
import { ExtractionError } from '../../retrieval/extract';
import type { FromChunker, ToChunker } from './chunker-process';

/**
 * Node's chunker: each document is read and chunked in a process of its own (chunker-process.ts),
 * one document at a time per process, at most `processes` of them, so that a tenant's file never
 * holds the event loop that serves every tenant's requests, nor grows its memory. Extracting a PDF
 * of 20,000 pages, or tokenizing text without a space, took the server's event loop for seconds
 * to minutes when it ran there, in slices or not.
 *
 * Each process runs at a lower priority than the server (NICENESS): on a machine whose cores are
 * all busy, the kernel gives the server the CPU first. While it works on a document, its CPU time
 * and resident memory are read every WATCH_MS from /proc (Linux; elsewhere its wall time stands in
 * for CPU time, and only V8's heap limit bounds memory), and past `maxCpuMs` or `maxMemoryMb` it
 * is killed: that file fails, saying which bound it passed, and the next document starts a new
 * process. A process idle for IDLE_MS exits. The process gets no environment: nothing it parses
 * can read the gateway's secrets from it.
 */

export interface ChunkerPoolOptions {
  /** Processes at most, each working on one document. */
  processes: number;
  /** CPU time one document may take. */
  maxCpuMs: number;
  /** Resident memory a process may reach while it works on a document. */
  maxMemoryMb: number;
  /** The process's code; by default, chunkerEntry(). */
  entry?: ChunkerEntry;
}

/** A chunker process's code: the script node runs and the flags it runs it with. */
export interface ChunkerEntry {
  path: string;
  execArgv: string[];
}

const NICENESS = 10;
const WATCH_MS = 100;
const IDLE_MS = 15_000;
/** Bytes of a process's stderr kept, to tell why it died. */
const STDERR_BYTES = 4096;
/** Linux's clock ticks per second (USER_HZ), the unit of /proc/<pid>/stat's CPU times. */
const TICKS_PER_SECOND = 100;

export function chunkerPool(options: ChunkerPoolOptions): Chunker {
  const idle: ChunkerProcess[] = [];
  const waiting: { resolve: (chunker: ChunkerProcess) => void; reject: (error: unknown) => void }[] = [];
  let count = 0;

  const gone = (chunker: ChunkerProcess) => {
    count--;
    const at = idle.indexOf(chunker);
    if (at >= 0) idle.splice(at, 1);
  };

  const acquire = async (): Promise<ChunkerProcess> => {
    const ready = idle.pop();
    if (ready) return ready;
    if (count >= options.processes) return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
    count++;
    return ChunkerProcess.start(options, gone);
  };

  const release = (chunker: ChunkerProcess) => {
    const next = waiting.shift();
    if (!chunker.alive) {
      // Its place is free: the next in line starts a process of its own.
      if (next) acquire().then(next.resolve, next.reject);
      return;
    }
    if (next) next.resolve(chunker);
    else {
      idle.push(chunker);
      chunker.idleFor(IDLE_MS);
    }
  };

  return {
    async chunk(bytes, job, signal) {
      signal.throwIfAborted();
      const chunker = await acquire();
      try {
        return await chunker.run(bytes, job, signal);
      } finally {
        release(chunker);
      }
    },
  };
}

/** Why a process was stopped in the middle of a document. */
type Stop = 'cpu' | 'memory' | 'aborted';

class ChunkerProcess {
  readonly #child: ChildProcess;
  readonly #options: ChunkerPoolOptions;
  readonly #exit: Promise<void>;
  readonly #gone: () => void;
  #stderr = '';
  #exited = false;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** The document in hand: how to answer it, and why the process was stopped, if it was. */
  #current: { resolve: (chunks: Chunk[]) => void; reject: (error: unknown) => void; stop: Stop | null } | null = null;

  private constructor(child: ChildProcess, options: ChunkerPoolOptions, gone: (chunker: ChunkerProcess) => void) {
    this.#child = child;
    this.#options = options;
    let counted = true;
    // Once, whether the process failed to start or exited.
    this.#gone = () => {
      if (counted) gone(this);
      counted = false;
    };
    child.stderr?.on('data', (data: Buffer) => {
      this.#stderr = (this.#stderr + data.toString('utf8')).slice(-STDERR_BYTES);
    });
    child.on('message', (message: FromChunker) => this.#answer(message));
    // A failure to spawn is handled by start; any other shows as the exit or a failed send.
    child.on('error', () => undefined);
    this.#exit = new Promise((resolve) =>
      child.on('exit', (code, signal) => {
        this.#exited = true;
        clearTimeout(this.#idleTimer);
        this.#gone();
        const current = this.#current;
        this.#current = null;
        current?.reject(this.#deathOf(current.stop, code, signal));
        resolve();
      }),
    );
  }

  /** A new process, once it listens. */
  static start(options: ChunkerPoolOptions, gone: (chunker: ChunkerProcess) => void): Promise<ChunkerProcess> {
    const entry = options.entry ?? chunkerEntry();
    const child = spawn(
      process.execPath,
      [...entry.execArgv, `--max-old-space-size=${options.maxMemoryMb}`, entry.path],
      {
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
        serialization: 'advanced',
        env: {},
      },
    );
    try {
      if (child.pid !== undefined) setPriority(child.pid, NICENESS);
    } catch {
      // Not allowed here: the process runs at the server's priority, its other bounds unchanged.
    }
    const started = new ChunkerProcess(child, options, gone);
    return new Promise((resolve, reject) => {
      const failed = (why: string) => {
        started.#gone();
        reject(new Error(`the chunker process did not start: ${why}`));
      };
      child.once('error', (error) => failed(error.message));
      child.once('exit', (code, signal) =>
        failed(`it exited (${signal ?? code}): ${started.#stderr.trim().slice(-500)}`),
      );
      child.once('message', (message: FromChunker) => {
        if (message.type === 'ready') resolve(started);
      });
    });
  }

  get alive(): boolean {
    return !this.#exited;
  }

  /** Exits after `ms` unless given a document meanwhile; until then it does not keep the server alive. */
  idleFor(ms: number): void {
    this.#child.unref();
    this.#child.channel?.unref();
    this.#idleTimer = setTimeout(() => this.#child.kill(), ms);
    this.#idleTimer.unref();
  }

  async run(bytes: ReadableStream<Uint8Array>, job: ChunkJob, signal: AbortSignal): Promise<Chunk[]> {
    clearTimeout(this.#idleTimer);
    this.#child.ref();
    this.#child.channel?.ref();
    const answered = new Promise<Chunk[]>((resolve, reject) => (this.#current = { resolve, reject, stop: null }));
    // Answered by the process's exit when it dies, whether or not this is still waiting for it.
    answered.catch(() => undefined);
    const stop = (why: Stop) => {
      if (this.#current && this.#current.stop === null) this.#current.stop = why;
      this.#child.kill('SIGKILL');
    };
    const onAbort = () => stop('aborted');
    signal.addEventListener('abort', onAbort, { once: true });
    if (signal.aborted) onAbort();
    const watch = this.#watch(stop);
    try {
      if (!(await this.#sendDocument(bytes, job))) {
        // A send fails when the process is gone or going: its exit answers the document.
        this.#child.kill('SIGKILL');
        await this.#exit;
      }
      return await answered;
    } finally {
      clearInterval(watch);
      signal.removeEventListener('abort', onAbort);
      this.#current = null;
      if (signal.aborted) throw signal.reason;
    }
  }

  /** Sends the document, counting its bytes; false when a send failed. */
  async #sendDocument(bytes: ReadableStream<Uint8Array>, job: ChunkJob): Promise<boolean> {
    if (!(await this.#send({ type: 'job', job }))) return false;
    let size = 0;
    try {
      for await (const part of bytes) {
        size += part.byteLength;
        if (size > job.maxBytes) throw fileTooLarge(job.maxBytes);
        if (!(await this.#send({ type: 'bytes', bytes: part }))) return false;
      }
    } catch (error) {
      await this.#send({ type: 'drop' });
      throw error;
    }
    return this.#send({ type: 'end' });
  }

  #send(message: ToChunker): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.#exited || !this.#child.connected) resolve(false);
      else this.#child.send(message, (error) => resolve(error === null));
    });
  }

  #answer(message: FromChunker): void {
    const current = this.#current;
    if (current === null || message.type === 'ready') return;
    if (message.type === 'chunks') current.resolve(message.chunks);
    else if (message.type === 'refused') current.reject(new ExtractionError(message.code, message.message));
    else current.reject(new ExtractionError('invalid_file', `The file cannot be read: ${message.message}.`));
  }

  /** Every WATCH_MS, the CPU time and memory the document has taken; `stop` past either bound. */
  #watch(stop: (why: Stop) => void): ReturnType<typeof setInterval> {
    const pid = this.#child.pid;
    const startedAt = Date.now();
    const cpuAtStart = pid === undefined ? null : cpuMsOf(pid);
    return setInterval(() => {
      const cpu = pid === undefined ? null : cpuMsOf(pid);
      const spent = cpu !== null && cpuAtStart !== null ? cpu - cpuAtStart : Date.now() - startedAt;
      if (spent > this.#options.maxCpuMs) stop('cpu');
      else if (pid !== undefined && (residentMbOf(pid) ?? 0) > this.#options.maxMemoryMb) stop('memory');
    }, WATCH_MS);
  }

  /** What a process that died during a document means for the file. */
  #deathOf(stop: Stop | null, code: number | null, signal: NodeJS.Signals | null): unknown {
    const { maxCpuMs, maxMemoryMb } = this.#options;
    if (stop === 'aborted') return new Error('the chunker process was stopped');
    if (stop === 'cpu') {
      return new ExtractionError(
        'invalid_file',
        `Reading the file took more than ${maxCpuMs / 1000} s of CPU time (GATEWAY_INGEST_MAX_CPU_SECONDS), the most a file may take.`,
      );
    }
    // V8 ends the process when its heap reaches --max-old-space-size.
    if (stop === 'memory' || /heap limit|out of memory/i.test(this.#stderr)) {
      return new ExtractionError(
        'invalid_file',
        `Reading the file needed more than ${maxMemoryMb} MB of memory (GATEWAY_INGEST_MAX_MEMORY_MB), the most a file may take.`,
      );
    }
    return new Error(
      `the chunker process exited (${signal ?? code}) while reading a file: ${this.#stderr.trim().slice(-500)}`,
    );
  }
}

/** The process's CPU time (user and system) in ms, from /proc; null where there is none. */
function cpuMsOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The fields after the command's name (which may hold spaces, in parentheses): utime is the 14th, stime the 15th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

/** The process's resident memory in MB, from /proc; null where there is none. */
function residentMbOf(pid: number): number | null {
  try {
    const kb = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? null : Number(kb) / 1024;
  } catch {
    return null;
  }
}

/**
 * How the process is started: the compiled chunker-process.js beside this code once built
 * (dist/, by scripts/build-node.mjs), else the TypeScript source through tsx (benchmarks; the
 * tests pass dist/'s, which their global setup builds: tsx compiling it again cost each process
 * a second of CPU).
 */
export function chunkerEntry(): ChunkerEntry {
  const built = new URL('./chunker-process.js', import.meta.url);
  if (existsSync(built)) return { path: fileURLToPath(built), execArgv: [] };
  const loader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
  return { path: fileURLToPath(new URL('./chunker-process.ts', import.meta.url)), execArgv: ['--import', loader] };
}
