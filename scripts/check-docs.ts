import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startFakeUpstream } from '../test/support/fake-upstream';
import { ROOT, startGatewayProcess } from '../test/support/processes';

/**
 * `npm run check:docs`: follows the documentation as a reader does, so that none of it can drift
 * from what the gateway does. The chapters with shell examples (CHAPTERS, in their reading order)
 * run as one bash script with `set -euo pipefail`, one shell for all of them, against one gateway
 * (`npm start`'s build, on a new data directory) and the fake provider: each chapter starts from
 * the state the ones before it left. The script gets what the README's first run has a reader set
 * by hand (its ```sh no-run blocks): GATEWAY, GATEWAY_API_KEY, GATEWAY_ORG_KEY, FAKE_PROVIDER, and
 * DATA_DIR for the CLI; providers' keys are removed from its environment, so that a developer's
 * real ones never reach an example (the chapter that stores them sets placeholders).
 *
 * ```sh blocks run; ```sh no-run blocks do not (starting servers, real providers, deploying). Every
 * curl fails on an HTTP error, body shown. What a command prints is compared with what the docs
 * show after it, in `# →` lines (docs/development.md, "Examples in the docs", says how): an
 * example whose output changed fails, naming the file, the line, what is shown and what came back.
 * Exits non-zero when anything failed.
 */

/** The chapters with shell examples, in the order a reader follows them on one gateway. */
export const CHAPTERS = [
  'README.md',
  'docs/fake-provider.md',
  'docs/api.md',
  'docs/rate-limits.md',
  'docs/virtual-keys.md',
  'docs/operations.md',
  'docs/metrics.md',
];

/** What a `# →` group shows: the last lines printed by the commands above it, in its block. */
export interface ShownOutput {
  line: number;
  lines: string[];
}

export interface Example {
  file: string;
  line: number;
  code: string;
  shown: ShownOutput[];
}

const SHOWN = /^\s*# →(?: (.*))?$/;
/** A shown line too long for one line goes on over lines that start with `#` and two spaces. */
const CONTINUED = /^\s*# {2,}(\S.*)$/;
/** A comment that reads as output (JSON, an event stream's line) but is not compared. */
const UNMARKED_OUTPUT = /^\s*# (?:The answer: )?(?:\{"|\[\{|event: |data: )/;

/** The runnable ```sh blocks of a Markdown text, each with the outputs it shows. */
export function shellExamples(file: string, markdown: string): Example[] {
  const examples: Example[] = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)(.*)$/.exec(lines[i] ?? '');
    if (!open) continue;
    const end = lines.findIndex((line, j) => j > i && line.startsWith('```'));
    if (end === -1) break;
    if (open[1] === 'sh' && !/\bno-run\b/.test(open[2] ?? ''))
      examples.push(parseExample(file, i + 2, lines.slice(i + 1, end)));
    i = end;
  }
  return examples;
}

/**
 * A block's code, with a marker printed where each `# →` group stands: what the commands printed
 * between two markers is what the group shows (or shows the end of).
 */
function parseExample(file: string, firstLine: number, lines: string[]): Example {
  const shown: ShownOutput[] = [];
  const code: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? '';
    const match = SHOWN.exec(line);
    if (!match) {
      if (UNMARKED_OUTPUT.test(line)) {
        throw new Error(
          `${file}:${firstLine + i}: an output shown without '# →' is not compared: mark it, or say it in words`,
        );
      }
      code.push(line);
      continue;
    }
    const group: ShownOutput = { line: firstLine + i, lines: [] };
    for (; i < lines.length; i++) {
      const shownLine = SHOWN.exec(lines[i] ?? '');
      const continued = CONTINUED.exec(lines[i] ?? '');
      if (shownLine) group.lines.push(shownLine[1] ?? '');
      else if (continued) group.lines.push(`${group.lines.pop() ?? ''}${continued[1] ?? ''}`);
      else break;
    }
    i--;
    code.push(`printf '\\n${MARK}%s${MARK}\\n' ${EXAMPLE}.${shown.length}`);
    shown.push(group);
  }
  return { file, line: firstLine - 1, code: code.join('\n'), shown };
}

/** Separates what each group shows in the script's output: no command prints it. */
const MARK = '\u001e';
/** Where a group's marker names its example, numbered when the examples are put together. */
const EXAMPLE = '@@check-docs-example@@';

/**
 * Whether `printed` ends with the lines `shown`: `…` in a line matches any characters, a line that
 * is `…` alone any number of lines; trailing blank lines do not count.
 */
export function showsOutput(shown: readonly string[], printed: string): boolean {
  const pattern = shown
    .map((line) =>
      line.trim() === '…' ? '(?:[^\\n]*\\n)*?' : `${line.split('…').map(escapeRegExp).join('[^\\n]*?')}\\n`,
    )
    .join('');
  return new RegExp(`(?:^|\\n)${pattern}$`).test(`${printed.trimEnd()}\n`);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** What following the examples gave: what went wrong (null: nothing), and how long each file took. */
export interface ExamplesReport {
  problem: string | null;
  /** Seconds from a file's first block to the next file's, by file, in order. */
  seconds: Map<string, number>;
}

/**
 * Runs `examples` in order as one script with `env`, then compares each shown output with what its
 * commands printed.
 */
export async function runExamples(examples: Example[], env: NodeJS.ProcessEnv): Promise<ExamplesReport> {
  const script = [
    'set -euo pipefail',
    'curl() { command curl --fail-with-body "$@"; }',
    // Each block is announced on stderr, so that a failure shows which one it was, and starts a
    // new stretch of output (a group shows what its own block printed), with the time.
    ...examples.map(
      (example, index) =>
        `echo ${JSON.stringify(`--- ${relative(ROOT, example.file)}:${example.line}`)} >&2\n${startMarker(index)}\n${example.code.replaceAll(EXAMPLE, String(index))}`,
    ),
    startMarker(examples.length),
  ].join('\n');
  const result = await bash(script, env);
  const problems: string[] = [];
  if (result.code !== 0) {
    const printed = result.stdout.replaceAll(new RegExp(`\\n${MARK}[-.@\\d]+${MARK}\\n`, 'g'), '\n').trimEnd();
    problems.push(
      `an example failed (exit ${result.code})\n${tail(result.stderr, 30)}\nwhat it printed last:\n${indent(tail(printed, 10))}`,
    );
  }
  const stretches = printedStretches(result.stdout);
  const groups = examples.flatMap((example, index) =>
    example.shown.map((shown, group) => ({ file: example.file, shown, key: `${index}.${group}` })),
  );
  for (const { file, shown, key } of groups) {
    const printed = stretches.get(key);
    if (printed === undefined) {
      if (result.code === 0) problems.push(`${relative(ROOT, file)}:${shown.line}: the commands above it never ran`);
      continue;
    }
    if (!showsOutput(shown.lines, printed)) {
      problems.push(
        `${relative(ROOT, file)}:${shown.line}: shows\n${indent(shown.lines.join('\n'))}\nbut the commands above it printed\n${indent(tail(printed.trimEnd(), 12))}`,
      );
    }
  }
  return {
    problem: problems.length === 0 ? null : problems.join('\n\n'),
    seconds: secondsByFile(examples, result.stdout),
  };
}

/** Starts the stretch of output of example `index` (or ends the last), with the time in ns. */
const startMarker = (index: number) => `printf '\\n${MARK}-${index}@%s${MARK}\\n' "$(date +%s%N)"`;

/** How long each file's blocks took, from the times their start markers printed. */
function secondsByFile(examples: Example[], stdout: string): Map<string, number> {
  const started = new Map<number, number>();
  for (const match of stdout.matchAll(new RegExp(`${MARK}-(\\d+)@(\\d+)${MARK}`, 'g')))
    started.set(Number(match[1]), Number(match[2]) / 1e9);
  const seconds = new Map<string, number>();
  for (const [index, example] of examples.entries()) {
    const [from, to] = [started.get(index), started.get(index + 1)];
    if (from !== undefined && to !== undefined) seconds.set(example.file, (seconds.get(example.file) ?? 0) + to - from);
  }
  return seconds;
}

/** What was printed before each group's marker, since the previous marker, by group. */
function printedStretches(stdout: string): Map<string, string> {
  const stretches = new Map<string, string>();
  const marker = new RegExp(`\\n${MARK}(-\\d+@\\d+|\\d+\\.\\d+)${MARK}\\n`, 'g');
  let from = 0;
  for (const match of stdout.matchAll(marker)) {
    const name = match[1] ?? '';
    if (!name.startsWith('-')) stretches.set(name, stdout.slice(from, match.index));
    from = match.index + match[0].length;
  }
  return stretches;
}

const indent = (text: string) => text.replace(/^/gm, '    ');
const tail = (text: string, lines: number) => text.split('\n').slice(-lines).join('\n');

/** Every documentation file: the README and docs/*.md. */
export function documentationFiles(): string[] {
  const docs = join(ROOT, 'docs');
  return [
    join(ROOT, 'README.md'),
    ...readdirSync(docs)
      .filter((name) => name.endsWith('.md'))
      .sort()
      .map((name) => join(docs, name)),
  ];
}

/** The chapters' examples in reading order. */
export function chapterExamples(): Example[] {
  return CHAPTERS.flatMap((chapter) => shellExamples(join(ROOT, chapter), readFileSync(join(ROOT, chapter), 'utf8')));
}

/** Providers' keys a developer may have set: the examples get none of them. */
const PROVIDER_KEYS = ['OPENAI_API_KEY', 'NEW_OPENAI_API_KEY', 'AZURE_OPENAI_API_KEY', 'OPENAI_BASE_URL'];

/** Runs the chapters' examples in order on one fresh gateway and fake provider. */
export async function checkChapters(examples = chapterExamples()): Promise<ExamplesReport> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gateway-docs-'));
  const fake = await startFakeUpstream();
  const gateway = await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
  try {
    const key = (name: string) =>
      new RegExp(`${name} API key\\s+(gk_[A-Za-z0-9_-]+)`).exec(gateway.stdout())?.[1] ?? '';
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      // The CLI's examples administer the same database.
      DATA_DIR: dataDir,
      GATEWAY: gateway.url,
      GATEWAY_API_KEY: key('workspace'),
      GATEWAY_ORG_KEY: key('organisation'),
      FAKE_PROVIDER: fake.baseURL,
    };
    for (const name of PROVIDER_KEYS) delete env[name];
    return await runExamples(examples, env);
  } finally {
    await gateway.stop();
    await fake.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The chapters' examples get this long in all: one that starts a server and never returns fails. */
const SCRIPT_TIMEOUT_MS = 240_000;

function bash(
  script: string,
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      stderr += `\n(stopped after ${SCRIPT_TIMEOUT_MS / 1000} s: an example that does not return?)`;
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
    }, SCRIPT_TIMEOUT_MS);
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
    // What the commands print on stderr goes with the block announcements, as a terminal shows it.
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

if (process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url) {
  const examples = chapterExamples();
  const { problem, seconds } = await checkChapters(examples);
  process.stdout.write(
    `${problem ? 'FAIL' : 'ok  '} ${CHAPTERS.join(', ')}: ${examples.length} examples, ${examples.reduce((n, e) => n + e.shown.length, 0)} outputs compared\n`,
  );
  for (const [file, taken] of seconds) process.stdout.write(`  ${relative(ROOT, file)}: ${taken.toFixed(1)} s\n`);
  if (problem) process.stderr.write(`${problem}\n`);
  process.exit(problem ? 1 : 0);
}
