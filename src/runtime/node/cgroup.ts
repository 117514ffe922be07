import { chown, mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A cgroup per sandbox session, where the gateway may make them: it bounds the session as a whole
 * (the memory of all its processes and of its tmpfs together, and its process count), where rlimits
 * bound each process alone. Either cgroup v2 (one directory, with the memory and pids controllers
 * enabled for its children) or v1 (a directory in each of the memory and pids hierarchies). The
 * sessions' cgroups go under a directory of their own, by default in the gateway's own cgroup (so
 * that whatever bounds the gateway bounds its sessions too); each is named after the gateway's
 * process, so that one gateway's start removes what a gateway that crashed left and no other's.
 */

/** Where the sessions' cgroups go: each hierarchy's directory (one on v2, memory's and pids' on v1). */
export interface CgroupRoot {
  version: 1 | 2;
  directories: string[];
}

export type CgroupSetup = { root: CgroupRoot } | { root: null; reason: string };

/** One session's cgroup, made before its process starts, removed after it ends. */
export interface SessionCgroup {
  /** The `cgroup.procs` files a process writes its pid to, to join the session's cgroup. */
  procs: string[];
  /** The processes the kernel killed out of memory in it so far. */
  oomKills(): Promise<number>;
  /** Kills what is left in it and removes it. */
  remove(): Promise<void>;
}

const MOUNTINFO = '/proc/self/mountinfo';
const OWN_CGROUP = '/proc/self/cgroup';
/** The directory, in the gateway's cgroup, that holds its sessions' cgroups. */
const SESSIONS_DIRECTORY = 'gateway-sandbox';
/** How long removing a cgroup waits for its last processes to go (a killed PID namespace ends asynchronously). */
const REMOVE_MS = 5_000;

/**
 * The directory sessions' cgroups go under: `setting` is GATEWAY_SANDBOX_CGROUP (`off`; a cgroup
 * path such as `/gateway-sandbox`, the same in each hierarchy; or unset, detected), made if it is
 * missing. Its leftovers of gateways that are no longer running are removed. Where there is none,
 * why not.
 */
export async function cgroupRoot(setting: string | undefined): Promise<CgroupSetup> {
  if (setting === 'off') return { root: null, reason: 'GATEWAY_SANDBOX_CGROUP is off' };
  const found = await hierarchies();
  if (typeof found === 'string') return { root: null, reason: found };
  const directories = found.hierarchies.map(({ mount, own }) => join(mount, setting ?? join(own, SESSIONS_DIRECTORY)));
  const root: CgroupRoot = { version: found.version, directories };
  try {
    for (const directory of directories) await mkdir(directory, { recursive: true });
    if (root.version === 2) await enableControllers(root);
    // Made and removed once, to know now, not at a session's start, that sessions' cgroups can be.
    const probe = await sessionCgroup(root, 'probe', { memoryBytes: 64 * 1024 * 1024, processes: 1 });
    await probe.remove();
  } catch (error) {
    return { root: null, reason: `its cgroups cannot be made in ${directories.join(' and ')} (${message(error)})` };
  }
  await removeStale(root);
  return { root };
}

/**
 * Makes the session's cgroup (named `name`) with its bounds; `owner`, when the session runs as
 * another user than the gateway, may then move its own process in.
 */
export async function sessionCgroup(
  root: CgroupRoot,
  name: string,
  bounds: { memoryBytes: number; processes: number },
  owner?: number,
): Promise<SessionCgroup> {
  const directories = root.directories.map((directory) => join(directory, `${process.pid}-${name}`));
  // The sessions' directory too: another sandbox closing (of this gateway or another) may have removed it.
  for (const directory of directories) await mkdir(directory, { recursive: true });
  const group = cgroupOf(root.version, directories);
  try {
    if (root.version === 2) {
      await enableControllers(root);
      const [directory = ''] = directories;
      await writeFile(join(directory, 'memory.max'), String(bounds.memoryBytes));
      // Swapped out, a session's memory would pass its bound: none of it is.
      await writeFile(join(directory, 'memory.swap.max'), '0').catch(() => undefined);
      await writeFile(join(directory, 'pids.max'), String(bounds.processes));
    } else {
      const [memory = '', pids = ''] = directories;
      await writeFile(join(memory, 'memory.limit_in_bytes'), String(bounds.memoryBytes));
      // Present only where swap is accounted; it cannot be below the memory's bound.
      await writeFile(join(memory, 'memory.memsw.limit_in_bytes'), String(bounds.memoryBytes)).catch(() => undefined);
      await writeFile(join(pids, 'pids.max'), String(bounds.processes));
    }
    if (owner !== undefined) for (const procs of group.procs) await chown(procs, owner, owner);
  } catch (error) {
    await group.remove();
    throw error;
  }
  return group;
}

/** On v2, the controllers a child cgroup has are those its parent enables for it. */
async function enableControllers(root: CgroupRoot): Promise<void> {
  await writeFile(join(root.directories[0] ?? '', 'cgroup.subtree_control'), '+memory +pids');
}

/** Removes the sessions' directory once empty (another gateway's sessions may keep it: then it stays). */
export async function removeCgroupRoot(root: CgroupRoot): Promise<void> {
  await Promise.all(root.directories.map((directory) => rmdir(directory).catch(() => undefined)));
}

function cgroupOf(version: 1 | 2, directories: string[]): SessionCgroup {
  const [memory = ''] = directories;
  return {
    procs: directories.map((directory) => join(directory, 'cgroup.procs')),
    async oomKills() {
      const text = await readFile(join(memory, version === 2 ? 'memory.events' : 'memory.oom_control'), 'utf8').catch(
        () => '',
      );
      return Number(/^oom_kill (\d+)$/m.exec(text)?.[1] ?? 0);
    },
    async remove() {
      const deadline = Date.now() + REMOVE_MS;
      for (const directory of directories) {
        for (;;) {
          try {
            await rmdir(directory);
            break;
          } catch (error) {
            if (code(error) === 'ENOENT') break;
            if (code(error) !== 'EBUSY' || Date.now() > deadline) throw error;
          }
          await killAll(directory);
          await sleep(10);
        }
      }
    },
  };
}

async function killAll(directory: string): Promise<void> {
  const pids = await readFile(join(directory, 'cgroup.procs'), 'utf8').catch(() => '');
  for (const pid of pids.split('\n').filter(Boolean)) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/** Removes the cgroups of gateways no longer running (a crash leaves them), named `<pid>-<session>`. */
async function removeStale(root: CgroupRoot): Promise<void> {
  const [first = ''] = root.directories;
  const names = await readdir(first).catch(() => []);
  const stale = names.filter((name) => {
    const pid = /^(\d+)-/.exec(name)?.[1];
    return pid !== undefined && Number(pid) !== process.pid && !running(Number(pid));
  });
  await Promise.all(
    stale.map((name) =>
      cgroupOf(
        root.version,
        root.directories.map((directory) => join(directory, name)),
      )
        .remove()
        .catch(() => undefined),
    ),
  );
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return code(error) === 'EPERM';
  }
}

/** The memory and pids hierarchies mounted here, with the gateway's own cgroup in each; or why none. */
async function hierarchies(): Promise<{ version: 1 | 2; hierarchies: { mount: string; own: string }[] } | string> {
  const [mountinfo, cgroups] = await Promise.all([
    readFile(MOUNTINFO, 'utf8').catch(() => ''),
    readFile(OWN_CGROUP, 'utf8').catch(() => ''),
  ]);
  // mountinfo: `id parent major:minor root mountpoint options [optional…] - type source super-options`
  const mounts = mountinfo.split('\n').flatMap((line) => {
    const [before, after] = line.split(' - ');
    const [type, , superOptions = ''] = after?.split(' ') ?? [];
    const mountpoint = before?.split(' ')[4];
    if (mountpoint === undefined || (type !== 'cgroup' && type !== 'cgroup2')) return [];
    return [{ type, mountpoint: unescape(mountpoint), controllers: superOptions.split(',') }];
  });
  // /proc/self/cgroup: `id:controllers:path`, v2's with id 0 and no controllers.
  const own = new Map(
    cgroups
      .split('\n')
      .filter(Boolean)
      .flatMap((line) => {
        const [, , controllers = '', path = '/'] = /^(\d+):([^:]*):(.*)$/.exec(line) ?? [];
        return controllers === '' ? [['', path] as const] : controllers.split(',').map((name) => [name, path] as const);
      }),
  );
  const v1 = ['memory', 'pids'].map((controller) => {
    const mount = mounts.find((entry) => entry.type === 'cgroup' && entry.controllers.includes(controller));
    const path = own.get(controller);
    return mount && path !== undefined ? { mount: mount.mountpoint, own: path } : null;
  });
  if (v1.every((entry) => entry !== null)) return { version: 1, hierarchies: v1.filter((entry) => entry !== null) };
  const unified = mounts.find((entry) => entry.type === 'cgroup2');
  const path = own.get('');
  if (!unified || path === undefined) return 'no cgroup v2, nor v1 memory and pids hierarchies, are mounted here';
  const controllers = await readFile(join(unified.mountpoint, path, 'cgroup.controllers'), 'utf8').catch(() => '');
  if (!/\bmemory\b/.test(controllers) || !/\bpids\b/.test(controllers)) {
    return `the gateway's cgroup (${path}) has no memory and pids controllers`;
  }
  return { version: 2, hierarchies: [{ mount: unified.mountpoint, own: path }] };
}

/** mountinfo escapes a space, tab, newline and backslash as octal. */
const unescape = (path: string) =>
  path.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));

const code = (error: unknown) => (error instanceof Error && 'code' in error ? error.code : undefined);
const message = (error: unknown) => (error instanceof Error ? error.message : String(error));
