import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config';
import { cgroupRoot } from '../../src/runtime/node/cgroup';
import { localSandbox } from '../../src/runtime/node/sandbox';
import { sandboxLimits } from '../../src/sandbox/limits';
import { SandboxError, type CodeResult, type SandboxSession } from '../../src/sandbox/sandbox';
import { mainThreadSchedule, percentile, ROOT } from '../support/processes';
import { waitFor } from '../support/wait';

/**
 * code_interpreter's local sandbox against the code a tenant might send it: each escape attempt is
 * run in a real session (bubblewrap around Debian's Python) and what it reached is asserted, along
 * with the gateway's side: its event loop keeps its pace and its memory stays flat while a session
 * forks, spins or prints without end. Skipped, saying so, where bubblewrap or Python's packages are
 * missing (.ci/run installs them where it can).
 */

const limits = sandboxLimits(
  parseConfig({
    GATEWAY_SANDBOX_DISK_MB: '64',
    GATEWAY_SANDBOX_OUTPUT_BYTES: String(1024 * 1024),
    GATEWAY_SANDBOX_SESSIONS_PER_WORKSPACE: '2',
  }),
);
const sandbox = localSandbox({ limits });
const availability = await sandbox.availability();
if (!availability.available) {
  console.warn(
    `test/sandbox/local.test.ts: skipped, no local sandbox here (${availability.reason}). To run it: ` +
      'apt-get install bubblewrap python3-numpy python3-pandas python3-matplotlib',
  );
}

/** Where the sessions' cgroups are here, as the sandbox detects it; null where none can be made. */
const cgroups = availability.available ? await cgroupRoot(undefined) : null;
if (availability.available && cgroups?.root === null) {
  console.warn(
    `test/sandbox/local.test.ts: the cgroup tests are skipped, no cgroup per session here (${cgroups.reason}).`,
  );
}
/** The session's cgroup directories (memory's and pids' on v1), by its id. */
const cgroupOf = (session: SandboxSession) =>
  (cgroups?.root?.directories ?? []).map((directory) => join(directory, `${process.pid}-${session.id}`));

let threads = 0;
const sessionOf = (workspaceId = 'ws_escape') => sandbox.open({ workspaceId, threadId: `thread_${++threads}` });

/** Runs `code` in a session of its own, which ends after it. */
async function runAlone(code: string, timeoutMs?: number): Promise<CodeResult> {
  const session = await sessionOf();
  try {
    return await session.run(code, { timeoutMs });
  } finally {
    await session.close();
  }
}

/** The gateway's event-loop delay (p99, ms) and resident memory growth (MiB) while `work` runs. */
async function gatewayDuring<T>(work: () => Promise<T>): Promise<{ value: T; p99Ms: number; rssGrowthMb: number }> {
  const rssBefore = process.memoryUsage().rss;
  // How late each tick of a timer comes, less the time this thread waited for a CPU meanwhile: the
  // event loop's own stalls, not the two shared cores' (a busy loop in a sandbox takes one whole).
  const stalls: number[] = [];
  let last = { at: performance.now(), waitingMs: mainThreadSchedule(process.pid).waitingMs };
  const timer = setInterval(() => {
    const now = { at: performance.now(), waitingMs: mainThreadSchedule(process.pid).waitingMs };
    stalls.push(Math.max(0, now.at - last.at - TICK_MS - (now.waitingMs - last.waitingMs)));
    last = now;
  }, TICK_MS);
  try {
    const value = await work();
    return { value, p99Ms: percentile(stalls, 0.99), rssGrowthMb: (process.memoryUsage().rss - rssBefore) / 2 ** 20 };
  } finally {
    clearInterval(timer);
  }
}

/** gatewayDuring's timer. */
const TICK_MS = 10;

/** The processes of this host whose command line holds `marker`. */
function processesWith(marker: string): string[] {
  return readdirSync('/proc').filter((pid) => {
    if (!/^\d+$/.test(pid)) return false;
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker);
    } catch {
      return false;
    }
  });
}

afterAll(() => sandbox.close());

describe('without bubblewrap or Python', () => {
  it('is unavailable, saying what is missing, and opens no session', async () => {
    const missing = localSandbox({ limits, bwrap: '/nonexistent/bwrap' });
    const answer = await missing.availability();
    expect(answer).toEqual({ available: false, reason: expect.stringContaining('install bubblewrap') });
    await expect(missing.open({ workspaceId: 'w', threadId: 't' })).rejects.toMatchObject({ code: 'unavailable' });
  });

  it.skipIf(!availability.available)('is unavailable when the interpreter is not there', async () => {
    const answer = await localSandbox({ limits, python: '/nonexistent/python3' }).availability();
    expect(answer.available).toBe(false);
  });
});

describe.skipIf(!availability.available)('the local sandbox', () => {
  it('keeps variables and files between calls; pandas reads a CSV put in, matplotlib draws a PNG', async () => {
    const session = await sessionOf();
    await session.putFile('sales.csv', new TextEncoder().encode('month,total\n1,10\n2,30\n3,20\n'));
    const first = await session.run(
      [
        'import pandas as pd',
        'import matplotlib.pyplot as plt',
        "df = pd.read_csv('/mnt/data/sales.csv')",
        "df.plot(x='month', y='total')",
        "plt.savefig('chart.png')",
        "df.assign(double=df.total * 2).to_csv('doubled.csv', index=False)",
        'df.total.sum()',
      ].join('\n'),
    );
    expect(first).toMatchObject({ status: 'ok', logs: '60\n', logsTruncated: false });
    // The figure left open is given back as a PNG, as is the one saved, among the files written.
    expect(first.images).toHaveLength(1);
    expect(
      Buffer.from(first.images[0]?.bytes ?? [])
        .subarray(1, 4)
        .toString(),
    ).toBe('PNG');
    expect(first.files.map((file) => file.path).sort()).toEqual(['chart.png', 'doubled.csv']);
    const doubled = first.files.find((file) => file.path === 'doubled.csv');
    expect(new TextDecoder().decode(doubled?.bytes)).toBe('month,total,double\n1,10,20\n2,30,60\n3,20,40\n');

    const second = await session.run("print(len(df), sorted(__import__('os').listdir('.')))");
    expect(second).toMatchObject({ status: 'ok', images: [], files: [] });
    expect(second.logs).toBe("3 ['chart.png', 'doubled.csv', 'sales.csv']\n");
    await session.close();
  });

  it('answers an exception with its name and the code’s own traceback, and the session lives on', async () => {
    const session = await sessionOf();
    const failed = await session.run('x = 1\nprint("before")\n1 / 0');
    expect(failed).toMatchObject({ status: 'error', error: { name: 'ZeroDivisionError', value: 'division by zero' } });
    expect(failed.logs).toMatch(/^before\nTraceback[^]*File "<code>", line 3[^]*ZeroDivisionError/);
    expect(failed.logs).not.toContain('<string>');
    expect(await session.run('x')).toMatchObject({ status: 'ok', logs: '1\n' });
    await session.close();
  });

  it('reaches no socket: neither a listener on the host’s loopback nor a public address', async () => {
    let connections = 0;
    const listener = createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const { port } = listener.address() as AddressInfo;
    try {
      const result = await runAlone(
        [
          'import socket',
          `for address in [('127.0.0.1', ${port}), ('1.1.1.1', 443), ('8.8.8.8', 53)]:`,
          '    try:',
          '        socket.create_connection(address, timeout=5)',
          "        print('connected', address)",
          '    except OSError as error:',
          "        print('refused', address[0], error.errno)",
          'print(sorted(name for _, name in socket.if_nameindex()))',
        ].join('\n'),
      );
      expect(result.status).toBe('ok');
      expect(result.logs).not.toContain('connected');
      expect(result.logs.match(/^refused /gm)).toHaveLength(3);
      // Its network namespace has a loopback of its own and nothing else.
      expect(result.logs).toContain("['lo']");
      expect(connections).toBe(0);
    } finally {
      listener.close();
    }
  });

  it('reads nothing of the gateway: its database, its environment, its keys, its files', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sandbox-host-'));
    const secret = `secret-${Date.now()}`;
    writeFileSync(join(dataDir, 'gateway.db'), secret);
    writeFileSync(join(dataDir, 'encryption.key'), secret);
    process.env.SANDBOX_TEST_SECRET = secret;
    try {
      const result = await runAlone(
        [
          'import os, glob',
          `for path in ['${dataDir}/gateway.db', '${dataDir}/encryption.key', '${ROOT}', '/root', '/home', '/work', '/etc/passwd', '/etc/shadow']:`,
          '    print(path, os.path.exists(path))',
          "print('environ', sorted(os.environ))",
          "print('pid 1 environ', open('/proc/1/environ', 'rb').read())",
          "print('processes', sorted(open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')[0].decode() for p in os.listdir('/proc') if p.isdigit()))",
          "print('root', sorted(os.listdir('/')))",
        ].join('\n'),
      );
      expect(result.status).toBe('ok');
      expect(result.logs).not.toContain(secret);
      expect(result.logs.match(/ True$/gm)).toBeNull();
      expect(result.logs).toContain(
        "environ ['HOME', 'LANG', 'MPLBACKEND', 'MPLCONFIGDIR', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE']",
      );
      expect(result.logs).toContain("pid 1 environ b''");
      // Its own PID namespace: bubblewrap's init and the interpreter, nothing of the host.
      expect(result.logs).toMatch(/^processes \['(bwrap|\/usr\/bin\/bwrap)', '\/usr\/bin\/python3'\]$/m);
      expect(result.logs).toContain("root ['bin', 'dev', 'etc', 'lib', 'lib64', 'mnt', 'proc', 'tmp', 'usr']");
    } finally {
      delete process.env.SANDBOX_TEST_SECRET;
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('reads nothing of another session’s /mnt/data', async () => {
    const owner = await sessionOf();
    await owner.putFile('theirs.txt', new TextEncoder().encode('private'));
    expect((await owner.run("open('mine.txt', 'w').write('private too')")).status).toBe('ok');
    const other = await sessionOf();
    const result = await other.run(
      [
        'import glob, os',
        "print(os.listdir('/mnt/data'))",
        "print(glob.glob('/proc/*/root/mnt/data/*') + glob.glob('/proc/*/cwd/*'))",
        "print([path for root in ('/mnt', '/tmp', '/dev', '/etc') for path in glob.glob(root + '/**', recursive=True) if 'theirs' in path or 'mine' in path])",
      ].join('\n'),
    );
    expect(result).toMatchObject({ status: 'ok', logs: '[]\n[]\n[]\n' });
    await Promise.all([owner.close(), other.close()]);
  });

  it('contains a fork bomb: the process count stops it, the wall time kills it whole, the gateway keeps its pace', async () => {
    const marker = `bomb-${Date.now()}`;
    const bomb = [
      'import os',
      'while True:',
      '    try:',
      '        if os.fork() == 0:',
      `            os.execv('/usr/bin/python3', ['python3', '-c', 'while True: pass', '${marker}'])`,
      '    except OSError:',
      '        pass',
    ].join('\n');
    const { value: result, p99Ms, rssGrowthMb } = await gatewayDuring(() => runAlone(bomb, 5000));
    expect(result).toMatchObject({ status: 'timeout', reason: expect.stringContaining('GATEWAY_SANDBOX_TIMEOUT_MS') });
    expect(p99Ms).toBeLessThan(50);
    expect(rssGrowthMb).toBeLessThan(50);
    // Every process it started died with the session.
    expect(
      await waitFor(
        () => processesWith(marker),
        (left) => left.length === 0,
      ),
    ).toEqual([]);
  });

  it('ends what a call started with the call: nothing of it runs between calls', async () => {
    const marker = `left-running-${Date.now()}`;
    const session = await sessionOf();
    const started = await session.run(
      `import subprocess\nsubprocess.Popen(['/usr/bin/python3', '-c', 'while True: pass', '${marker}'])\nprint('started')`,
    );
    expect(started).toMatchObject({ status: 'ok', logs: 'started\n' });
    expect(session.alive).toBe(true);
    expect(
      await waitFor(
        () => processesWith(marker),
        (left) => left.length === 0,
      ),
    ).toEqual([]);
    // And reaped: calls that each leave a third of the session's processes running all succeed,
    // where the zombies of the calls before would have used up the count.
    const third = Math.floor(limits.processes / 3);
    const leave = `import os\nfor _ in range(${third}):\n    if os.fork() == 0:\n        import time; time.sleep(60)\nprint('left')`;
    for (let call = 0; call < 5; call++) {
      expect(await session.run(leave)).toMatchObject({ status: 'ok', logs: 'left\n' });
    }
    expect(await session.run('print("next")')).toMatchObject({ status: 'ok', logs: 'next\n' });
    await session.close();
  });

  it('refuses 10 GiB: a MemoryError, and the session lives on', async () => {
    const session = await sessionOf();
    const result = await session.run('data = bytearray(10 * 1024 ** 3)');
    expect(result).toMatchObject({ status: 'error', error: { name: 'MemoryError' } });
    expect(await session.run('print("still here")')).toMatchObject({ status: 'ok', logs: 'still here\n' });
    await session.close();
  });

  it('fills only its own bounded disk: /mnt/data and /tmp are full at their size, the rest read-only', async () => {
    const session = await sessionOf();
    const fill = (path: string) =>
      session.run(
        [
          `with open('${path}', 'wb') as file:`,
          '    for _ in range(1024):',
          '        file.write(b"0" * 1024 * 1024)',
        ].join('\n'),
      );
    for (const path of ['/mnt/data/fill', '/tmp/fill']) {
      const result = await fill(path);
      expect(result).toMatchObject({ status: 'error', error: { name: 'OSError' } });
      expect(result.error?.value).toMatch(/No space left on device|File too large/);
    }
    // Nowhere else to write: bubblewrap's root and /dev are read-only, /dev/shm has a size of its own.
    const elsewhere = await session.run(
      [
        "for path in ['/fill', '/etc/fill', '/mnt/fill', '/dev/fill', '/usr/fill', '/dev/shm/fill']:",
        '    try:',
        "        with open(path, 'wb') as file:",
        '            for _ in range(1024):',
        '                file.write(b"0" * 1024 * 1024)',
        "        print('filled', path)",
        '    except OSError as error:',
        "        print('refused', path, error.strerror)",
      ].join('\n'),
    );
    expect(elsewhere.logs).not.toContain('filled');
    expect(elsewhere.logs.match(/^refused \S+ Read-only file system$/gm)).toHaveLength(5);
    expect(elsewhere.logs).toContain('refused /dev/shm/fill No space left on device');
    // The file written is too large to give back whole: left out, the session intact.
    expect(await session.run('import os; os.path.getsize("/mnt/data/fill") <= 64 * 1024 * 1024')).toMatchObject({
      status: 'ok',
      logs: 'True\n',
    });
    await session.close();
  });

  it('stops reading past its output limit: 1 GB printed kills the session, the logs keep their bound', async () => {
    const { value: result, rssGrowthMb } = await gatewayDuring(() =>
      runAlone('import sys\nchunk = "x" * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)'),
    );
    expect(result).toMatchObject({
      status: 'killed',
      logsTruncated: true,
      reason: expect.stringContaining('GATEWAY_SANDBOX_OUTPUT_BYTES'),
    });
    expect(result.logs.length).toBe(limits.logBytes);
    expect(rssGrowthMb).toBeLessThan(50);
  });

  it('kills a busy loop at its wall time; the session is then dead and says so, the thread gets a new one', async () => {
    const key = { workspaceId: 'ws_escape', threadId: `thread_${++threads}` };
    const session = await sandbox.open(key);
    await session.run('kept = 1');
    const { value: result, p99Ms } = await gatewayDuring(() =>
      session.run('while True:\n    pass', { timeoutMs: 3000 }),
    );
    expect(result).toMatchObject({ status: 'timeout' });
    expect(p99Ms).toBeLessThan(50);
    expect(session.alive).toBe(false);
    await expect(session.run('print(1)')).rejects.toMatchObject({ code: 'session_ended' });
    const next = await sandbox.open(key);
    expect(next.id).not.toBe(session.id);
    expect(await next.run("'kept' in globals()")).toMatchObject({ status: 'ok', logs: 'False\n' });
    await next.close();
  });

  it('cannot trace the gateway, mount, make a namespace, or raise its limits', async () => {
    const result = await runAlone(
      [
        'import ctypes, os, resource',
        'libc = ctypes.CDLL(None, use_errno=True)',
        'def attempt(name, outcome):',
        '    print(name, outcome, ctypes.get_errno())',
        `attempt('ptrace', libc.ptrace(16, ${process.pid}, 0, 0))`,
        "attempt('mount', libc.mount(b'none', b'/usr', b'tmpfs', 0, None))",
        "attempt('unshare', libc.unshare(0x10000000))",
        'for limit in (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU):',
        '    soft, hard = resource.getrlimit(limit)',
        '    try:',
        '        resource.setrlimit(limit, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))',
        "        print('raised', limit)",
        '    except ValueError:',
        "        print('refused', limit)",
        "print('nice', os.nice(0))",
        'try:',
        '    os.nice(-19)',
        "    print('priority raised')",
        'except OSError:',
        "    print('priority refused')",
      ].join('\n'),
    );
    expect(result.status).toBe('ok');
    // EPERM (1): the seccomp filter refuses ptrace before the kernel looks for the process.
    expect(result.logs).toMatch(/^ptrace -1 1$/m);
    expect(result.logs).toMatch(/^mount -1 1$/m);
    expect(result.logs).toMatch(/^unshare -1 (1|28)$/m);
    expect(result.logs).not.toContain('raised');
    expect(result.logs.match(/^refused /gm)).toHaveLength(3);
    expect(result.logs).toContain('nice 19');
    expect(result.logs).toContain('priority refused');
  });

  it('refuses, through its seccomp filter, the system calls escapes use: each EPERM (clone3 ENOSYS)', async () => {
    // Their numbers from the kernel's own tables (x86_64's syscall_64.tbl, aarch64's asm-generic/unistd.h).
    const calls: Record<string, [x86_64: number, aarch64: number]> = {
      keyctl: [250, 219],
      add_key: [248, 217],
      bpf: [321, 280],
      io_uring_setup: [425, 425],
      perf_event_open: [298, 241],
      userfaultfd: [323, 282],
      process_vm_readv: [310, 270],
      setns: [308, 268],
      open_tree: [428, 428],
      open_tree_attr: [467, 467],
      fsopen: [430, 430],
      clone: [56, 220],
      clone3: [435, 435],
    };
    const result = await runAlone(
      [
        'import ctypes, os, signal, time',
        'libc = ctypes.CDLL(None, use_errno=True)',
        `calls = {name: numbers[0 if os.uname().machine == 'x86_64' else 1] for name, numbers in ${JSON.stringify(calls)}.items()}`,
        'def attempt(name, outcome):',
        '    print(name, outcome, ctypes.get_errno())',
        '    ctypes.set_errno(0)',
        "attempt('traceme', libc.ptrace(0, 0, 0, 0))",
        'child = os.fork()',
        'if child == 0:',
        '    time.sleep(60)',
        '    os._exit(0)',
        "attempt('attach', libc.ptrace(16, child, 0, 0))",
        "attempt('seize', libc.ptrace(0x4206, child, 0, 0))",
        'os.kill(child, signal.SIGKILL)',
        'os.waitpid(child, 0)',
        "attempt('unshare-user', libc.unshare(0x10000000))",
        "attempt('unshare-net', libc.unshare(0x40000000))",
        "attempt('unshare-mount', libc.unshare(0x00020000))",
        "attempt('mount', libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))",
        "attempt('umount', libc.umount2(b'/tmp', 0))",
        "attempt('chroot', libc.chroot(b'/tmp'))",
        "attempt('keyctl', libc.syscall(calls['keyctl'], 0, 0, 0, 0, 0))",
        "attempt('add_key', libc.syscall(calls['add_key'], b'user', b'k', b'v', 1, -2))",
        "attempt('bpf', libc.syscall(calls['bpf'], 0, 0, 0))",
        'params = ctypes.create_string_buffer(120)',
        "attempt('io_uring_setup', libc.syscall(calls['io_uring_setup'], 1, params))",
        "attempt('perf_event_open', libc.syscall(calls['perf_event_open'], 0, 0, -1, -1, 0))",
        "attempt('userfaultfd', libc.syscall(calls['userfaultfd'], 0))",
        "attempt('process_vm_readv', libc.syscall(calls['process_vm_readv'], os.getpid(), 0, 0, 0, 0, 0))",
        "attempt('setns', libc.syscall(calls['setns'], os.open('/proc/self/ns/net', os.O_RDONLY), 0))",
        "attempt('open_tree', libc.syscall(calls['open_tree'], -100, b'/tmp', 0))",
        "attempt('fsopen', libc.syscall(calls['fsopen'], b'tmpfs', 0))",
        "attempt('open_tree_attr', libc.syscall(calls['open_tree_attr'], -100, b'/tmp', 0, None, 0))",
        // A new user namespace asked of clone itself: refused, so no child runs this code twice.
        "attempt('clone-newuser', libc.syscall(calls['clone'], 0x10000000 | 17, 0, 0, 0, 0))",
        "attempt('clone3', libc.syscall(calls['clone3'], 0, 0))",
        "attempt('personality-bsd', libc.personality(0x0006))",
        "attempt('personality-query', libc.personality(0xffffffff))",
        "attempt('settimeofday', libc.settimeofday(ctypes.create_string_buffer(16), None))",
        "if os.uname().machine == 'x86_64':",
        "    attempt('x32-getpid', libc.syscall(0x40000000 | 39))",
        'else:',
        "    print('x32-getpid -1 1')",
      ].join('\n'),
    );
    expect(result).toMatchObject({ status: 'ok' });
    const outcomes = Object.fromEntries(
      result.logs
        .trim()
        .split('\n')
        .map((line) => {
          const [name = '', outcome, errno] = line.split(' ');
          return [name, `${outcome} ${errno}`];
        }),
    );
    const refused = [
      'traceme',
      'attach',
      'seize',
      'unshare-user',
      'unshare-net',
      'unshare-mount',
      'mount',
      'umount',
      'chroot',
      'keyctl',
      'add_key',
      'bpf',
      'io_uring_setup',
      'perf_event_open',
      'userfaultfd',
      'process_vm_readv',
      'setns',
      'open_tree',
      'fsopen',
      'open_tree_attr',
      'clone-newuser',
      'personality-bsd',
      'settimeofday',
      'x32-getpid',
    ];
    expect(outcomes).toEqual({
      ...Object.fromEntries(refused.map((name) => [name, '-1 1'])),
      clone3: '-1 38',
      // The query answers the persona, PER_LINUX.
      'personality-query': '0 0',
    });
  });

  it('runs what a data session needs under that filter: threads, fork, subprocess, multiprocessing, numpy', async () => {
    const result = await runAlone(
      [
        'import os, subprocess, sys, threading, multiprocessing',
        'import numpy, pandas',
        'done = []',
        'thread = threading.Thread(target=lambda: done.append(1))',
        'thread.start(); thread.join()',
        'child = os.fork()',
        'if child == 0:',
        '    os._exit(7)',
        "print('fork', os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))",
        "print('subprocess', subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout.strip())",
        "print('shell', subprocess.run('echo $((1 + 1))', shell=True, capture_output=True, text=True).stdout.strip())",
        'with multiprocessing.Pool(2) as pool:',
        "    print('pool', pool.map(abs, [-1, -2, -3]))",
        "print('threads', done, 'numpy', int(numpy.arange(10).sum()), 'pandas', int(pandas.Series([1, 2]).sum()))",
      ].join('\n'),
    );
    expect(result).toMatchObject({ status: 'ok' });
    expect(result.logs).toBe('fork 7\nsubprocess 42\nshell 2\npool [1, 2, 3]\nthreads [1] numpy 45 pandas 3\n');
  });

  it.skipIf(!cgroups?.root)(
    'bounds a session’s memory as a whole: processes each under RLIMIT_AS, together over it, are killed',
    async () => {
      const session = await sessionOf();
      const directories = cgroupOf(session);
      expect(directories.length).toBeGreaterThan(0);
      // The session's own processes are in it: bubblewrap, its init and the interpreter.
      expect(
        readFileSync(join(directories[0] ?? '', 'cgroup.procs'), 'utf8')
          .trim()
          .split('\n').length,
      ).toBeGreaterThanOrEqual(3);
      // Four processes of 400 MiB each, each far under its 1 GiB of address space, 1.6 GiB together:
      // more than the session's 1 GiB (and its 144 MiB of tmpfs).
      const result = await session.run(
        [
          'import subprocess, sys',
          "hold = \"import sys; x = b'1' * (400 << 20); print('held', flush=True); sys.stdin.read()\"",
          'children = [subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(4)]',
          "held = sum(child.stdout.readline() == b'held\\n' for child in children)",
          'for child in children:',
          '    child.stdin.close()',
          "print('held', held, 'exits', [child.wait() for child in children])",
        ].join('\n'),
      );
      expect(result).toMatchObject({
        status: 'killed',
        reason: expect.stringMatching(/more than its 1168 MiB of memory \(GATEWAY_SANDBOX_MEMORY_MB/),
      });
      expect(session.alive).toBe(false);
      // The code saw some of its processes killed (-9) before the session was ended. How many held
      // their 400 MiB first depends on the order the kernel charged them: one killed may have held
      // (and said so) before the others' pages pushed the session over.
      expect(result.logs).toMatch(/^held [0-4] exits .*-9/m);
      for (const directory of directories) expect(existsSync(directory)).toBe(false);
    },
  );

  it.skipIf(!cgroups?.root)(
    'puts each session in a cgroup of its own, bounded, and removes it when the session ends',
    async () => {
      const session = await sessionOf();
      const other = await sessionOf();
      const directories = cgroupOf(session);
      expect(directories.every((directory) => existsSync(directory))).toBe(true);
      expect(cgroupOf(other).some((directory) => directories.includes(directory))).toBe(false);
      const version = cgroups?.root?.version;
      const memory = readFileSync(
        join(directories[0] ?? '', version === 2 ? 'memory.max' : 'memory.limit_in_bytes'),
        'utf8',
      );
      expect(Number(memory)).toBe(limits.memoryBytes + 2 * limits.diskBytes + 16 * 2 ** 20);
      expect(readFileSync(join(directories.at(-1) ?? '', 'pids.max'), 'utf8').trim()).toBe(
        String(limits.processes + 2),
      );
      // The interpreter inside is one of its processes (the host's view: the session has a cgroup namespace of its own).
      const inside = await session.run('import os; print(os.getpid())');
      expect(inside.logs).toMatch(/^\d+\n$/);
      const procs = readFileSync(join(directories[0] ?? '', 'cgroup.procs'), 'utf8')
        .trim()
        .split('\n');
      const python = procs.filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('/usr/bin/python3'));
      expect(python).toHaveLength(1);
      await session.close();
      for (const directory of directories) expect(existsSync(directory)).toBe(false);
      expect(cgroupOf(other).every((directory) => existsSync(directory))).toBe(true);
      await other.close();
    },
  );

  it('runs sessions without a cgroup where GATEWAY_SANDBOX_CGROUP is off, and its availability says so', async () => {
    const uncontained = localSandbox({ limits: { ...limits, cgroup: 'off' } });
    expect(await uncontained.availability()).toEqual({
      available: true,
      detail: expect.stringMatching(/^no cgroup per session: GATEWAY_SANDBOX_CGROUP is off; .* bounded per process/),
    });
    const session = await uncontained.open({ workspaceId: 'ws_off', threadId: 'off' });
    expect(await session.run('print(1)')).toMatchObject({ status: 'ok', logs: '1\n' });
    for (const directory of cgroupOf(session)) expect(existsSync(directory)).toBe(false);
    await uncontained.close();
  });

  it.skipIf(!cgroups?.root)('removes, at its start, the cgroups a gateway that is no longer running left', async () => {
    const root = cgroups?.root;
    if (!root) return;
    // A gateway's cgroup whose process is gone (a pid above the kernel's pid_max cannot be running).
    const stale = root.directories.map((directory) => join(directory, '4194305-leftover'));
    const live = root.directories.map((directory) => join(directory, `${process.pid}-kept`));
    // The sessions' directory too: a sandbox of another test file closing may just have removed it, empty.
    for (const directory of [...stale, ...live]) mkdirSync(directory, { recursive: true });
    try {
      const fresh = localSandbox({ limits });
      expect(await fresh.availability()).toEqual({ available: true });
      for (const directory of stale) expect(existsSync(directory)).toBe(false);
      for (const directory of live) expect(existsSync(directory)).toBe(true);
      await fresh.close();
    } finally {
      for (const directory of [...stale, ...live]) if (existsSync(directory)) rmdirSync(directory);
    }
  });

  it('keeps at most its sessions per workspace: the longest idle one makes room, none while all run', async () => {
    const first = await sessionOf('ws_bounds');
    const second = await sessionOf('ws_bounds');
    await first.run('1');
    await second.run('2');
    const third = await sessionOf('ws_bounds');
    expect(first.alive).toBe(false);
    expect(second.alive).toBe(true);
    // Both running code (a call is under way from the moment it is asked for): a fourth is refused
    // rather than ending one of them.
    const running = [second.run('import time\nwhile True: time.sleep(0.05)', { timeoutMs: 60_000 })];
    running.push(third.run('import time\nwhile True: time.sleep(0.05)', { timeoutMs: 60_000 }));
    const refused = await sessionOf('ws_bounds').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(SandboxError);
    expect(refused).toMatchObject({ code: 'busy', message: expect.stringContaining('SESSIONS_PER_WORKSPACE') });
    await Promise.all([second.close(), third.close()]);
    expect((await Promise.all(running)).map((result) => result.status)).toEqual(['killed', 'killed']);
  });

  it('counts sessions still starting: opens side by side never pass the bound together', async () => {
    const opened = await Promise.allSettled([1, 2, 3].map(() => sessionOf('ws_race')));
    const sessions = opened.flatMap((settled) => (settled.status === 'fulfilled' ? [settled.value] : []));
    expect(sessions).toHaveLength(2);
    expect(opened.find((settled) => settled.status === 'rejected')).toMatchObject({ reason: { code: 'busy' } });
    await Promise.all(sessions.map((session) => session.close()));
  });

  it('ends a session idle past GATEWAY_SANDBOX_IDLE_MS, and every session when it is closed', async () => {
    const brief = localSandbox({ limits: { ...limits, idleMs: 300 } });
    const idle = await brief.open({ workspaceId: 'ws_idle', threadId: 'idle' });
    await idle.run('x = 1');
    expect(
      await waitFor(
        () => idle.alive,
        (alive) => !alive,
      ),
    ).toBe(false);
    await expect(idle.run('x')).rejects.toMatchObject({
      code: 'session_ended',
      message: expect.stringContaining('idle'),
    });
    // Its cgroup goes with it, as it ends on its own.
    expect(
      await waitFor(
        () => cgroupOf(idle).filter((directory) => existsSync(directory)),
        (left) => left.length === 0,
      ),
    ).toEqual([]);
    await brief.close();

    const kept = localSandbox({ limits });
    const sessions = await Promise.all(['a', 'b'].map((threadId) => kept.open({ workspaceId: 'ws_stop', threadId })));
    await kept.close();
    expect(sessions.map((session) => session.alive)).toEqual([false, false]);
    await expect(kept.open({ workspaceId: 'ws_stop', threadId: 'c' })).rejects.toMatchObject({ code: 'unavailable' });
  });

  it('refuses a file name that is a path, and a session closed answers session_ended', async () => {
    const session: SandboxSession = await sessionOf();
    for (const name of ['../x', 'a/b', '.', '..', '', 'a\u0000b']) {
      await expect(session.putFile(name, new Uint8Array(1))).rejects.toMatchObject({ code: 'invalid_request' });
    }
    await session.close();
    await expect(session.run('1')).rejects.toMatchObject({ code: 'session_ended' });
  });
});
