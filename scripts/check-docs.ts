import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startFakeUpstream } from '../test/support/fake-upstream';
import { ROOT, startGatewayProcess } from '../test/support/processes';

/**
 * `npm run check:docs`: runs every shell example of README.md and docs/*.md as written, so that
 * none can drift from what the gateway does. Each file's ```sh blocks run in order, as one bash
 * script with `set -euo pipefail`, against a fresh gateway (`npm start`'s build, on a new data
 * directory) and the fake provider; the script gets what a reader sets by hand (the blocks marked
 * ```sh no-run say how): GATEWAY, GATEWAY_API_KEY, GATEWAY_ORG_KEY, FAKE_PROVIDER, and placeholder
 * provider keys (OPENAI_API_KEY, …) for the examples that store one. Blocks marked
 * `no-run` are skipped: starting servers, real providers' keys, deploying.
 * Their curl calls fail on any HTTP error. Exits non-zero naming the file, the block and what it printed when one fails. Files named as
 * arguments are the only ones run (`npm run check:docs -- docs/api.md`).
 */

export interface Example {
  file: string;
  line: number;
  code: string;
}

/** The runnable ```sh blocks of a Markdown text. */
export function shellExamples(file: string, markdown: string): Example[] {
  const examples: Example[] = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const end = lines.findIndex((line, j) => j > i && line.startsWith('```'));
    if (end === -1) break;
    if (open[1] === 'sh' && !/\bno-run\b/.test(open[2]!)) examples.push({ file, line: i + 1, code: lines.slice(i + 1, end).join('\n') });
    i = end;
  }
  return examples;
}

export function documentationFiles(): string[] {
  const docs = join(ROOT, 'docs');
  return [join(ROOT, 'README.md'), ...readdirSync(docs).filter((name) => name.endsWith('.md')).sort().map((name) => join(docs, name))];
}

/** Runs one file's examples against a fresh gateway; resolves to null, or what went wrong. */
export async function runExamples(file: string, examples: Example[]): Promise<string | null> {
  if (examples.length === 0) return null;
  const dataDir = mkdtempSync(join(tmpdir(), 'gateway-docs-'));
  const fake = await startFakeUpstream();
  const gateway = await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
  try {
    const key = (name: string) => new RegExp(`${name} API key\\s+(gk_[A-Za-z0-9_-]+)`).exec(gateway.stdout())?.[1] ?? '';
    const env = {
      ...process.env,
      // The CLI's examples administer the same database.
      DATA_DIR: dataDir,
      GATEWAY: gateway.url,
      GATEWAY_API_KEY: key('workspace'),
      GATEWAY_ORG_KEY: key('organisation'),
      FAKE_PROVIDER: fake.baseURL,
      // Provider keys a reader has: the examples only store them (no provider is called), so
      // placeholders do, and a developer's real keys never reach the examples' output.
      OPENAI_API_KEY: 'sk-docs-example-openai-0000',
      NEW_OPENAI_API_KEY: 'sk-docs-example-openai-0001',
      AZURE_OPENAI_API_KEY: 'docs-example-azure-0000',
    };
    // Each block is announced on stderr, so a failure shows which one it was.
    // Every curl of an example fails on an HTTP error, body shown: an example that no longer works
    // cannot pass by printing an error envelope.
    const script = [
      'set -euo pipefail',
      'curl() { command curl --fail-with-body "$@"; }',
      ...examples.map((example) => `echo ${JSON.stringify(`--- ${relative(ROOT, example.file)}:${example.line}`)} >&2\n${example.code}`),
    ].join('\n');
    const result = await bash(script, env);
    if (result.code === 0) return null;
    return `${relative(ROOT, file)}: an example failed (exit ${result.code})\n${result.output.split('\n').slice(-40).join('\n')}`;
  } finally {
    await gateway.stop();
    await fake.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** A file's examples get this long in all: one that starts a server and never returns fails. */
const FILE_TIMEOUT_MS = 120_000;

function bash(script: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let output = '';
    const timer = setTimeout(() => {
      output += `\n(stopped after ${FILE_TIMEOUT_MS / 1000} s: an example that does not return?)`;
      process.kill(-child.pid!, 'SIGKILL');
    }, FILE_TIMEOUT_MS);
    child.stdout.on('data', (chunk: Buffer) => (output += chunk));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

if (process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url) {
  let failed = false;
  // Files named on the command line, or all of them.
  const named = process.argv.slice(2).map((file) => resolve(file));
  for (const file of named.length > 0 ? named : documentationFiles()) {
    const examples = shellExamples(file, readFileSync(file, 'utf8'));
    const problem = await runExamples(file, examples);
    process.stdout.write(`${problem ? 'FAIL' : 'ok  '} ${relative(ROOT, file)} (${examples.length} examples)\n`);
    if (problem) {
      failed = true;
      process.stderr.write(`${problem}\n`);
    }
  }
  process.exit(failed ? 1 : 0);
}
