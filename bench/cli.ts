import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { required, round, summarise } from './support';

/**
 * `npm run bench:cli`: how long the admin CLI takes to answer as users run it (`npm run -s gateway
 * -- …`, npm's own start included), and the build check that `npm start` and every CLI call run
 * first, with no source changed. Each command BENCH_RUNS times (10), in turn with the others, on
 * a fresh DATA_DIR that `init` made; wall time per process. The load average is printed with the
 * figures: on a shared machine they move with it.
 */

const RUNS = Number(process.env.BENCH_RUNS ?? 10);
const dataDir = mkdtempSync(join(tmpdir(), 'bench-cli-'));
const env = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'warn' };

const commands: Record<string, string[]> = {
  help: ['npm', 'run', '-s', 'gateway', '--', '--help'],
  group_help: ['npm', 'run', '-s', 'gateway', '--', 'virtual-keys', '--help'],
  workspaces_list: ['npm', 'run', '-s', 'gateway', '--', 'workspaces', 'list'],
  build_unchanged: [process.execPath, 'scripts/build-node.mjs'],
};

/** The 1-minute load average (Linux always reports three). */
const oneMinuteLoad = (): number => loadavg()[0] ?? NaN;

function time([program, ...args]: string[]): number {
  const started = performance.now();
  const result = spawnSync(required(program, 'a command'), args, { env, encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`${[program, ...args].join(' ')} exited ${result.status}: ${result.stderr}`);
  return performance.now() - started;
}

try {
  time(required(commands.build_unchanged, 'the build command'));
  time(['npm', 'run', '-s', 'gateway', '--', 'init']);
  const samples: Record<string, number[]> = Object.fromEntries(Object.keys(commands).map((name) => [name, []]));
  const loadBefore = oneMinuteLoad();
  for (let i = 0; i < RUNS; i++) {
    for (const [name, command] of Object.entries(commands))
      required(samples[name], `the samples of ${name}`).push(time(command));
  }
  console.log(
    JSON.stringify(
      {
        runs: RUNS,
        load_average: { before: round(loadBefore, 2), after: round(oneMinuteLoad(), 2) },
        ...Object.fromEntries(
          Object.entries(samples).map(([name, ms]) => [name, { min_ms: round(Math.min(...ms), 0), ...summarise(ms) }]),
        ),
      },
      null,
      2,
    ),
  );
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}
