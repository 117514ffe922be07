import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Tally } from '../test/support/tally';

/**
 * `npm run test:reliability`: the suites that take minutes, then one table of what they did.
 *
 * 1. the bad-input property tests of `npm test` (the files under test/ named *-fuzz.test.ts) with many more runs
 *    (FUZZ_RUNS, default 2000 here);
 * 2. the `reliability` vitest project (test/reliability): kill -9 rounds, upstream faults over real
 *    HTTP, client disconnects, hostile upstreams, a load minute (LOAD_SECONDS, default 60) with 5%
 *    faults, rate limits across gateway processes, the Node server's timeouts and connection cap,
 *    and one active run per thread and token reservations under racers while a CPU hog keeps every
 *    core busy, on Node and on workerd (starvation.test.ts).
 *
 * Every suite appends its figures to RELIABILITY_REPORT_DIR (test/support/tally.ts,
 * test/reliability/support.ts); this script sums them. It fails when a test failed or when runs
 * were lost, rows half-written, requests answered 5xx, the gateway stalled over 50 ms while hostile
 * upstreams were at work, it ran out of memory, or a concurrency guarantee broke under CPU
 * starvation.
 */

const ROOT = new URL('..', import.meta.url).pathname;
const reportDir = mkdtempSync(join(tmpdir(), 'reliability-report-'));
const env = { ...process.env, RELIABILITY_REPORT_DIR: reportDir, FUZZ_RUNS: process.env.FUZZ_RUNS ?? '2000' };

function vitest(args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', ...args], {
      cwd: ROOT,
      env,
      stdio: 'inherit',
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

const started = performance.now();
const failures: string[] = [];
const fuzzFiles = readdirSync(join(ROOT, 'test'), { recursive: true, encoding: 'utf8' })
  .filter((name) => /(^|\/)[^/]*fuzz\.test\.ts$/.test(name))
  .map((name) => `test/${name}`);
if (fuzzFiles.length === 0) failures.push('no test/**/*-fuzz.test.ts found');
else if ((await vitest(['--project', 'node', ...fuzzFiles])) !== 0) failures.push('the fuzz tests failed');
if ((await vitest(['--project', 'reliability'])) !== 0) failures.push('the reliability tests failed');

// ── The table ─────────────────────────────────────────────────────────────────────────────────

const COLUMNS: [keyof Tally, string, boolean][] = [
  ['inputsTried', 'inputs tried', false],
  ['faultsInjected', 'faults injected', false],
  ['runsCreated', 'runs created', false],
  ['runsLost', 'runs lost', true],
  ['rowsHalfWritten', 'rows half-written', true],
  ['answered5xx', 'answered 5xx', true],
  ['hostileUpstreams', 'hostile upstreams tried', false],
  ['gatewayStalls', 'gateway stalls over 50 ms', true],
  ['outOfMemoryDeaths', 'out-of-memory deaths', true],
  ['starvationViolations', 'run under CPU starvation: violations', true],
];

const lines = (file: string): Record<string, any>[] =>
  existsSync(join(reportDir, file))
    ? readFileSync(join(reportDir, file), 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line))
    : [];

const bySuite = new Map<string, Tally>();
for (const { suite, ...tally } of lines('tally.jsonl')) {
  const sum = bySuite.get(suite) ?? {};
  for (const [key] of COLUMNS) if (typeof tally[key] === 'number') sum[key] = (sum[key] ?? 0) + tally[key];
  bySuite.set(suite, sum);
}
const total: Tally = {};
for (const tally of bySuite.values()) for (const [key] of COLUMNS) total[key] = (total[key] ?? 0) + (tally[key] ?? 0);

const header = ['suite', ...COLUMNS.map(([, label, mustBeZero]) => (mustBeZero ? `${label} (must be 0)` : label))];
const rows = [...bySuite.entries()]
  .sort(([a], [b]) => a.localeCompare(b))
  .map(([suite, tally]) => [suite, ...COLUMNS.map(([key]) => String(tally[key] ?? 0))]);
rows.push(['**total**', ...COLUMNS.map(([key]) => `**${total[key] ?? 0}**`)]);
const table = [header, header.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');

for (const [key, label, mustBeZero] of COLUMNS) {
  if (mustBeZero && (total[key] ?? 0) !== 0) failures.push(`${label}: ${total[key]}, must be 0`);
}
if (bySuite.size === 0) failures.push('no suite reported any figures');

const figures = lines('figures.jsonl')
  .map(
    ({ suite, ...values }) =>
      `- ${suite}: ${Object.entries(values)
        .map(([name, value]) => `${name} ${value}`)
        .join(', ')}`,
  )
  .join('\n');

process.stdout.write(
  `\n## Reliability summary (${Math.round((performance.now() - started) / 1000)} s)\n\n${table}\n\n${figures}\n\n`,
);
rmSync(reportDir, { recursive: true, force: true });
if (failures.length > 0) {
  process.stdout.write(`FAILED:\n${failures.map((failure) => `- ${failure}`).join('\n')}\n`);
  process.exit(1);
}
process.stdout.write('All must-be-0 figures are 0 and every test passed.\n');
