/**
 * The sandbox's seccomp filter: a classic-BPF program bubblewrap installs (`--seccomp FD`) on the
 * session's Python just before it starts, inherited by every process it starts and not removable.
 * A deny-list: the system calls a Python data sandbox never needs and escapes from a namespace use
 * (tracing, mounting, new namespaces, kernel keyrings, BPF, io_uring, modules, the clock) fail with
 * EPERM; everything else is allowed, so that numpy, pandas, matplotlib, threads and subprocesses
 * run as they do outside. Only x86_64 and aarch64 calls pass the architecture check (a 32-bit call
 * on x86_64 kills the process: its numbers are another table), and x86_64's x32 calls are refused.
 *
 * The numbers are the kernel's (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/
 * unistd.h for aarch64), checked against Debian's linux-libc-dev headers; calls added since 5.1 have
 * one number on every architecture.
 */

/** seccomp_data: `int nr; u32 arch; u64 instruction_pointer; u64 args[6]` (little-endian on both). */
const NR = 0;
const ARCH = 4;
/** The low 32 bits of args[0]: the flags of clone and unshare, personality's persona. */
const ARG0_LOW = 16;

const AUDIT_ARCH_X86_64 = 0xc000003e;
const AUDIT_ARCH_AARCH64 = 0xc00000b7;
/** x86_64 marks an x32 call with this bit of its number. */
const X32_SYSCALL_BIT = 0x40000000;

const RET_KILL_PROCESS = 0x80000000;
const RET_ALLOW = 0x7fff0000;
const retErrno = (errno: number) => 0x00050000 | errno;
const EPERM = 1;
const ENOSYS = 38;

/** CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET. */
const NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;
/** personality(PER_LINUX) and the query personality(0xffffffff) are allowed; any other persona is refused. */
const PER_LINUX = 0;
const PERSONALITY_QUERY = 0xffffffff;

type Syscall = { x86_64: number; aarch64?: number };

/** Denied whatever their arguments: EPERM. */
const DENIED: Record<string, Syscall> = {
  ptrace: { x86_64: 101, aarch64: 117 },
  process_vm_readv: { x86_64: 310, aarch64: 270 },
  process_vm_writev: { x86_64: 311, aarch64: 271 },
  pidfd_getfd: { x86_64: 438, aarch64: 438 },
  mount: { x86_64: 165, aarch64: 40 },
  umount2: { x86_64: 166, aarch64: 39 },
  pivot_root: { x86_64: 155, aarch64: 41 },
  chroot: { x86_64: 161, aarch64: 51 },
  open_tree: { x86_64: 428, aarch64: 428 },
  // Since 6.15, and not yet in Debian's headers: syscall_64.tbl's 467, one number everywhere.
  open_tree_attr: { x86_64: 467, aarch64: 467 },
  move_mount: { x86_64: 429, aarch64: 429 },
  fsopen: { x86_64: 430, aarch64: 430 },
  fsconfig: { x86_64: 431, aarch64: 431 },
  fsmount: { x86_64: 432, aarch64: 432 },
  fspick: { x86_64: 433, aarch64: 433 },
  mount_setattr: { x86_64: 442, aarch64: 442 },
  setns: { x86_64: 308, aarch64: 268 },
  keyctl: { x86_64: 250, aarch64: 219 },
  add_key: { x86_64: 248, aarch64: 217 },
  request_key: { x86_64: 249, aarch64: 218 },
  bpf: { x86_64: 321, aarch64: 280 },
  perf_event_open: { x86_64: 298, aarch64: 241 },
  userfaultfd: { x86_64: 323, aarch64: 282 },
  kexec_load: { x86_64: 246, aarch64: 104 },
  kexec_file_load: { x86_64: 320, aarch64: 294 },
  init_module: { x86_64: 175, aarch64: 105 },
  finit_module: { x86_64: 313, aarch64: 273 },
  delete_module: { x86_64: 176, aarch64: 106 },
  swapon: { x86_64: 167, aarch64: 224 },
  swapoff: { x86_64: 168, aarch64: 225 },
  reboot: { x86_64: 169, aarch64: 142 },
  syslog: { x86_64: 103, aarch64: 116 },
  acct: { x86_64: 163, aarch64: 89 },
  quotactl: { x86_64: 179, aarch64: 60 },
  quotactl_fd: { x86_64: 443, aarch64: 443 },
  name_to_handle_at: { x86_64: 303, aarch64: 264 },
  open_by_handle_at: { x86_64: 304, aarch64: 265 },
  io_uring_setup: { x86_64: 425, aarch64: 425 },
  io_uring_enter: { x86_64: 426, aarch64: 426 },
  io_uring_register: { x86_64: 427, aarch64: 427 },
  settimeofday: { x86_64: 164, aarch64: 170 },
  clock_settime: { x86_64: 227, aarch64: 112 },
  clock_adjtime: { x86_64: 305, aarch64: 266 },
  adjtimex: { x86_64: 159, aarch64: 171 },
  lookup_dcookie: { x86_64: 212, aarch64: 18 },
  iopl: { x86_64: 172 },
  ioperm: { x86_64: 173 },
};
/** Denied with any namespace flag in args[0]: a plain fork or thread still goes through. */
const CLONE = { x86_64: 56, aarch64: 220 };
const UNSHARE = { x86_64: 272, aarch64: 97 };
/** ENOSYS, not EPERM: glibc then falls back to clone, whose flags the filter can read (clone3's are behind a pointer). */
const CLONE3 = { x86_64: 435, aarch64: 435 };
const PERSONALITY = { x86_64: 135, aarch64: 92 };

type Arch = 'x86_64' | 'aarch64';
/** One `struct sock_filter`: code, jump-if-true, jump-if-false (counted from the next instruction), k. */
type Instruction = [code: number, jt: number, jf: number, k: number];

const LD_ABS = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET = 0x06; // BPF_RET | BPF_K
const JA = 0x05; // BPF_JMP | BPF_JA: its offset is k, 32 bits

/**
 * The rules of one architecture, each jumping only over itself (a jump's offset is one byte): the
 * call's number already loaded, each rule either returns or falls through to the next.
 */
function archRules(arch: Arch): Instruction[] {
  const rules: Instruction[] = [[LD_ABS, 0, 0, NR]];
  if (arch === 'x86_64') rules.push([JGE, 0, 1, X32_SYSCALL_BIT], [RET, 0, 0, retErrno(EPERM)]);
  for (const call of Object.values(DENIED)) {
    const nr = call[arch];
    if (nr !== undefined) rules.push([JEQ, 0, 1, nr], [RET, 0, 0, retErrno(EPERM)]);
  }
  rules.push([JEQ, 0, 1, CLONE3[arch]], [RET, 0, 0, retErrno(ENOSYS)]);
  // Past the number, the accumulator holds an argument: each of these rules returns either way.
  for (const call of [CLONE, UNSHARE]) {
    rules.push(
      [JEQ, 0, 4, call[arch]],
      [LD_ABS, 0, 0, ARG0_LOW],
      [JSET, 0, 1, NAMESPACE_FLAGS],
      [RET, 0, 0, retErrno(EPERM)],
      [RET, 0, 0, RET_ALLOW],
    );
  }
  rules.push(
    [JEQ, 0, 5, PERSONALITY[arch]],
    [LD_ABS, 0, 0, ARG0_LOW],
    [JEQ, 2, 0, PER_LINUX],
    [JEQ, 1, 0, PERSONALITY_QUERY],
    [RET, 0, 0, retErrno(EPERM)],
    [RET, 0, 0, RET_ALLOW],
  );
  rules.push([RET, 0, 0, RET_ALLOW]);
  return rules;
}

/** The whole program: the architecture picks its rules; any other architecture is killed. */
export function seccompProgram(): Buffer {
  const x86 = archRules('x86_64');
  const arm = archRules('aarch64');
  const program: Instruction[] = [
    [LD_ABS, 0, 0, ARCH],
    [JEQ, 3, 0, AUDIT_ARCH_X86_64],
    [JEQ, 1, 0, AUDIT_ARCH_AARCH64],
    [RET, 0, 0, RET_KILL_PROCESS],
    // A conditional jump's offset is one byte, too short to pass x86_64's rules: aarch64's start by this one.
    [JA, 0, 0, x86.length],
    ...x86,
    ...arm,
  ];
  return encode(program);
}

function encode(program: Instruction[]): Buffer {
  const bytes = Buffer.alloc(program.length * 8);
  program.forEach(([code, jt, jf, k], index) => {
    bytes.writeUInt16LE(code, index * 8);
    bytes.writeUInt8(jt, index * 8 + 2);
    bytes.writeUInt8(jf, index * 8 + 3);
    bytes.writeUInt32LE(k >>> 0, index * 8 + 4);
  });
  return bytes;
}
