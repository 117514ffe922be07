import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config';
import { localSandbox } from '../../src/runtime/node/sandbox';
import { sandboxLimits } from '../../src/sandbox/limits';
import type { Availability, CodeResult } from '../../src/sandbox/sandbox';
import { ROOT } from '../support/processes';

/**
 * The local sandbox run by a gateway that is not root (test/sandbox/local.test.ts runs it as the
 * suite's user, root in CI): a process started as `nobody` by setpriv opens a session, and the
 * escapes that matter still hold: no network, none of the host's files, its limits and its seccomp
 * filter. Skipped, saying why, where the suite is not root (it cannot start another user's process,
 * and local.test.ts is then the non-root test) or where the kernel forbids unprivileged user
 * namespaces (there is no local sandbox then at all).
 */

const NOBODY = 65534;
const SETPRIV = '/usr/bin/setpriv';
const limits = sandboxLimits(parseConfig({}));
const probe = localSandbox({ limits });
const available = (await probe.availability()).available;
await probe.close();
const userNamespaces = await unprivilegedUserNamespaces();
const skip = (() => {
  if (!available) return 'no local sandbox here (see test/sandbox/local.test.ts)';
  if (process.getuid?.() !== 0)
    return 'the suite is not root: test/sandbox/local.test.ts already runs the sandbox as a user';
  if (!existsSync(SETPRIV)) return `${SETPRIV} (util-linux) is missing`;
  if (!userNamespaces)
    return 'the kernel forbids unprivileged user namespaces (kernel.unprivileged_userns_clone or user.max_user_namespaces)';
  return null;
})();
if (skip !== null) console.warn(`test/sandbox/non-root.test.ts: skipped, ${skip}.`);

/** Whether a user who is not root may make a user namespace here (bubblewrap needs one). */
async function unprivilegedUserNamespaces(): Promise<boolean> {
  if (!existsSync(SETPRIV) || !existsSync('/usr/bin/unshare')) return false;
  const child = spawn(
    SETPRIV,
    [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', '--', '/usr/bin/unshare', '--user', '/usr/bin/true'],
    {
      stdio: 'ignore',
    },
  );
  return new Promise((resolve) => {
    child.once('error', () => resolve(false));
    child.once('exit', (code) => resolve(code === 0));
  });
}

const home = mkdtempSync(join(tmpdir(), 'sandbox-non-root-'));
chmodSync(home, 0o777);
afterAll(() => rmSync(home, { recursive: true, force: true }));

/**
 * non-root-gateway.ts bundled whole into `home`, with the driver beside it as dist/ has it: nobody
 * may not be able to read the checkout (a clone made by `mktemp -d` is its owner's alone).
 */
const script = join(home, 'non-root-gateway.mjs');
if (skip === null) {
  const { build } = await import('esbuild');
  await build({
    entryPoints: [join(ROOT, 'test/sandbox/non-root-gateway.ts')],
    outfile: script,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'warning',
  });
  copyFileSync(join(ROOT, 'src/runtime/node/sandbox-driver.py'), join(home, 'sandbox-driver.py'));
  for (const file of [script, join(home, 'sandbox-driver.py')]) chmodSync(file, 0o644);
}

/** Starts non-root-gateway.ts as nobody, with a home and a temporary directory it may write, running `code`. */
function asNobody(code: string): Promise<{ uid: number; availability: Availability; result: CodeResult | null }> {
  const child = spawn(
    SETPRIV,
    [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', '--', process.execPath, script, code],
    {
      cwd: home,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, TMPDIR: home },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (data: Buffer) => (stdout += data.toString('utf8')));
  child.stderr.on('data', (data: Buffer) => (stderr = (stderr + data.toString('utf8')).slice(-4096)));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (exit) => {
      try {
        resolve(JSON.parse(stdout));
      } catch {
        reject(new Error(`non-root-gateway.ts exited ${exit}: ${stderr}`));
      }
    });
  });
}

describe.skipIf(skip !== null)('the local sandbox of a gateway that is not root', () => {
  it('runs code, and keeps its escapes closed: network, host files, limits, system calls', async () => {
    const listener = createServer((socket) => socket.end('reached\n'));
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const { port } = listener.address() as AddressInfo;
    const secret = join(home, 'secret.txt');
    writeFileSync(secret, 'the gateway user’s file');
    try {
      const { uid, availability, result } = await asNobody(
        [
          'import ctypes, os, resource, socket',
          'libc = ctypes.CDLL(None, use_errno=True)',
          'print("uid", os.getuid())',
          'try:',
          `    socket.create_connection(("127.0.0.1", ${port}), timeout=5)`,
          '    print("loopback reached")',
          'except OSError as error:',
          '    print("loopback refused", type(error).__name__)',
          `for path in (${JSON.stringify(secret)}, ${JSON.stringify(home)}, ${JSON.stringify(ROOT)}, "/etc/passwd", "/home", "/root"):`,
          '    print("exists", path, os.path.exists(path))',
          'print("nproc", resource.getrlimit(resource.RLIMIT_NPROC)[0], "as", resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)',
          'try:',
          '    block = bytearray(10 << 30)',
          '    print("10 GiB allocated")',
          'except MemoryError:',
          '    print("10 GiB refused")',
          'print("ptrace", libc.ptrace(0, 0, 0, 0), ctypes.get_errno())',
          'print("unshare", libc.unshare(0x10000000), ctypes.get_errno())',
          'print("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None), ctypes.get_errno())',
        ].join('\n'),
      );
      expect(uid).toBe(NOBODY);
      expect(availability.available).toBe(true);
      expect(result).toMatchObject({ status: 'ok' });
      const logs = result?.logs ?? '';
      // The user namespace maps the gateway's user, nobody, to itself.
      expect(logs).toContain(`uid ${NOBODY}\n`);
      expect(logs).toMatch(/^loopback refused (ConnectionRefusedError|OSError)/m);
      expect(logs.match(/^exists .* False$/gm)).toHaveLength(6);
      expect(logs).toContain(`nproc ${limits.processes} as ${limits.memoryBytes >> 20}\n`);
      expect(logs).toContain('10 GiB refused');
      expect(logs).toContain('ptrace -1 1\n');
      expect(logs).toContain('unshare -1 1\n');
      expect(logs).toContain('mount -1 1\n');
    } finally {
      listener.close();
    }
  });
});
