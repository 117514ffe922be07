import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseConfig } from '../src/config';
import { localSandbox } from '../src/runtime/node/sandbox';
import { sandboxLimits } from '../src/sandbox/limits';
import type { SandboxSession } from '../src/sandbox/sandbox';
import { round, summarise } from './support';

/**
 * `npm run bench:sandbox`: code_interpreter's local sandbox on this host. A cold session's start
 * (bubblewrap, Python, numpy, pandas and matplotlib loaded) BENCH_COLD times (5); a warm `print(1)`
 * round trip BENCH_WARM times (200) in one session; and the memory of BENCH_SESSIONS (8) idle
 * sessions side by side, as the resident and proportional set sizes of their processes (PSS counts
 * the libraries they share once between them), from which how many sessions fit in a GiB. The load
 * average is printed with the figures: on a shared machine they move with it.
 */

const COLD = Number(process.env.BENCH_COLD ?? 5);
const WARM = Number(process.env.BENCH_WARM ?? 200);
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 8);

const limits = sandboxLimits(parseConfig({ GATEWAY_SANDBOX_SESSIONS: String(SESSIONS + 1) }));
const sandbox = localSandbox({ limits });
const availability = await sandbox.availability();
if (!availability.available) {
  console.error(`No local sandbox here: ${availability.reason}`);
  process.exit(1);
}

/** The processes descended from this one (bubblewrap's and the sessions' inside it). */
function descendants(): number[] {
  const parents = new Map<number, number>();
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      parents.set(Number(pid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const found = new Set([process.pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, parent] of parents) {
      if (!found.has(pid) && found.has(parent)) {
        found.add(pid);
        grew = true;
      }
    }
  }
  found.delete(process.pid);
  return [...found];
}

/** A field of /proc/<pid>/smaps_rollup, in KiB (0 for a process gone). */
function rollupKb(pid: number, field: 'Rss' | 'Pss'): number {
  try {
    return Number(
      new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0,
    );
  } catch {
    return 0;
  }
}

const loadBefore = loadavg()[0] ?? NaN;
const cold: number[] = [];
for (let i = 0; i < COLD; i++) {
  const started = performance.now();
  const session = await sandbox.open({ workspaceId: 'ws_bench', threadId: `cold_${i}` });
  cold.push(performance.now() - started);
  await session.close();
}

const warmSession = await sandbox.open({ workspaceId: 'ws_bench', threadId: 'warm' });
const warm: number[] = [];
for (let i = 0; i < WARM; i++) {
  const started = performance.now();
  const result = await warmSession.run('print(1)');
  if (result.logs !== '1\n') throw new Error(`print(1) answered ${JSON.stringify(result)}`);
  warm.push(performance.now() - started);
}
await warmSession.close();

const idle: SandboxSession[] = [];
for (let i = 0; i < SESSIONS; i++) {
  const session = await sandbox.open({ workspaceId: `ws_bench_${i}`, threadId: 'idle' });
  await session.run('import pandas as pd, matplotlib.pyplot as plt\nx = 1');
  idle.push(session);
}
const pids = descendants();
const rssMb = pids.reduce((sum, pid) => sum + rollupKb(pid, 'Rss'), 0) / 1024 / SESSIONS;
const pssMb = pids.reduce((sum, pid) => sum + rollupKb(pid, 'Pss'), 0) / 1024 / SESSIONS;
await sandbox.close();

console.log(
  JSON.stringify(
    {
      load_average: { before: round(loadBefore, 2), after: round(loadavg()[0] ?? NaN, 2) },
      cold_session_start: summarise(cold),
      warm_print_round_trip: summarise(warm),
      idle_sessions: {
        sessions: SESSIONS,
        processes: pids.length,
        rss_mb_per_session: round(rssMb, 1),
        pss_mb_per_session: round(pssMb, 1),
        sessions_per_gib_by_pss: Math.floor(1024 / pssMb),
        sessions_per_gib_by_rss: Math.floor(1024 / rssMb),
      },
    },
    null,
    2,
  ),
);
