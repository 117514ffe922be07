import { defined } from '../support/defined';
import { spawnSync } from 'node:child_process';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '@libsql/client';
import { commands } from '../../src/cli/commands';
import { runCliCaptured } from '../support/cli';
import { ROOT, runCli as runCliProcess } from '../support/processes';

/** Most commands run in-process; one test goes through the real entry. */
const runCli = runCliCaptured;

/** The admin CLI as users run it, against a fresh embedded database. */

let dataDir: string;
let env: Record<string, string>;
beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'gateway-cli-'));
  env = { DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

const json = async (args: string[]) => {
  const result = await runCli([...args, '--json'], env);
  expect(result.stderr).toBe('');
  expect(result.code).toBe(0);
  return JSON.parse(result.stdout);
};

describe('gateway CLI', () => {
  let init: Record<string, string>;

  it('runs as a process, as `npm run gateway` runs it', async () => {
    const result = await runCliProcess(['workspaces', 'list', '--json'], env);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual([]);
  });

  it('init --json creates the organisation, the default workspace and two keys, once', async () => {
    init = await json(['init']);
    expect(Object.keys(init).sort()).toEqual(
      ['organisation_api_key', 'organisation_id', 'workspace_api_key', 'workspace_id', 'workspace_slug'].sort(),
    );
    expect(init.workspace_slug).toBe('default');
    expect(init.organisation_api_key).toMatch(/^gk_[A-Za-z0-9_-]{43}$/);
    expect(init.workspace_api_key).toMatch(/^gk_[A-Za-z0-9_-]{43}$/);
    expect(init.workspace_api_key).not.toBe(init.organisation_api_key);

    const again = await json(['init']);
    expect(again).toEqual({
      already_initialised: true,
      organisation_id: init.organisation_id,
      workspace_id: init.workspace_id,
      workspace_slug: 'default',
      create_keys: ['gateway api-keys create --workspace default', 'gateway api-keys create --organisation-key'],
      message: expect.stringContaining('not stored'),
    });
    const text = await runCli(['init'], env);
    expect(text.stdout).toContain('Already initialised');
    expect(text.stdout).toContain(init.workspace_id);
    expect(text.stdout).toContain('gateway api-keys create --workspace default');
  });

  it('stores only hashes and prefixes of the keys', async () => {
    const client = createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
    const rows = await client.execute('SELECT * FROM api_keys');
    client.close();
    const dump = JSON.stringify(rows.rows);
    expect(rows.rows).toHaveLength(2);
    expect(dump).not.toContain(init.organisation_api_key);
    expect(dump).not.toContain(init.workspace_api_key);
    expect(dump).toContain(defined(init.workspace_api_key).slice(0, 10));
  });

  it('creates and lists workspaces', async () => {
    const created = await json(['workspaces', 'create', '--slug', 'team-a', '--name', 'Team A']);
    expect(created).toMatchObject({ slug: 'team-a', name: 'Team A', organisation_id: init.organisation_id });
    const listed = await json(['workspaces', 'list']);
    expect(listed.map((w: { slug: string }) => w.slug)).toEqual(['default', 'team-a']);

    const duplicate = await runCli(['workspaces', 'create', '--slug', 'team-a'], env);
    expect(duplicate.code).toBe(1);
    expect(duplicate.stderr).toContain("'team-a' already exists");
    const bad = await runCli(['workspaces', 'create', '--slug', 'Team A', '--json'], env);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stdout).error).toMatchObject({ code: 'invalid_value', param: 'slug' });
  });

  it('creates, lists and revokes API keys', async () => {
    const workspaceKey = await json(['api-keys', 'create', '--workspace', 'team-a', '--name', 'ci']);
    expect(workspaceKey).toMatchObject({ kind: 'workspace', name: 'ci', revoked_at: null });
    expect(workspaceKey.key).toMatch(/^gk_/);
    expect(workspaceKey.prefix).toBe(workspaceKey.key.slice(0, 10));
    const orgKey = await json(['api-keys', 'create', '--organisation-key']);
    expect(orgKey).toMatchObject({ kind: 'organisation', workspace_id: null });

    const listed = await json(['api-keys', 'list']);
    expect(listed).toHaveLength(4);
    expect(JSON.stringify(listed)).not.toContain(workspaceKey.key);
    expect(listed.every((key: Record<string, unknown>) => !('key' in key) && !('hash' in key))).toBe(true);

    const revoked = await json(['api-keys', 'revoke', workspaceKey.id]);
    expect(revoked.revoked_at).toEqual(expect.any(String));
    const again = await json(['api-keys', 'revoke', workspaceKey.id]);
    expect(again.revoked_at).toBe(revoked.revoked_at);

    const unknown = await runCli(['api-keys', 'revoke', '00000000-0000-4000-8000-000000000000'], env);
    expect(unknown.code).toBe(1);
  });

  it('explains usage mistakes with exit code 2', async () => {
    for (const args of [
      ['api-keys', 'create'],
      ['api-keys', 'create', '--workspace', 'x', '--organisation-key'],
      ['workspaces', 'create'],
      ['frobnicate'],
      ['workspaces', 'list', '--bogus'],
    ]) {
      const result = await runCli(args, env);
      expect(result.code).toBe(2);
      expect(result.stderr.length).toBeGreaterThan(0);
    }
    const help = await runCliProcess(['--help'], env);
    expect(help.code).toBe(0);
    for (const command of [
      'init',
      'workspaces create',
      'workspaces list',
      'api-keys create',
      'api-keys list',
      'api-keys revoke',
    ]) {
      expect(help.stdout).toContain(command);
    }
  });
});

describe('gateway help', () => {
  // Where the database would be if help opened one: a path no command could use.
  const nowhere = { DATA_DIR: '/proc/nope' };
  const all = commands.map((command) => command.name);
  const groups = [...new Set(all.filter((name) => name.includes(' ')).map((name) => defined(name.split(' ')[0])))];

  /** The commands a help text lists (its lines of usage). */
  const listed = (text: string) =>
    all.filter((name) => text.includes(`\n  ${name} `) || text.includes(`\n  ${name}\n`));

  it('lists every command, with --help, -h, help or nothing at all, exit 0', async () => {
    expect(groups.sort()).toEqual(['api-keys', 'encryption-key', 'virtual-keys', 'workspaces']);
    for (const args of [['--help'], ['-h'], ['help'], []]) {
      const result = await runCli(args, nowhere);
      expect(result, args.join(' ')).toMatchObject({ code: 0, stderr: '' });
      expect(result.stdout).toMatch(/^Usage: gateway <command> \[options\]\n/);
      expect(listed(result.stdout)).toEqual(all);
    }
  });

  it("answers each group's --help, and help <group>, with its commands, exit 0", async () => {
    for (const group of groups) {
      for (const args of [
        [group, '--help'],
        [group, '-h'],
        ['help', group],
      ]) {
        const result = await runCli(args, nowhere);
        expect(result, args.join(' ')).toMatchObject({ code: 0, stderr: '' });
        expect(result.stdout).toMatch(new RegExp(`^Usage: gateway ${group} <command> \\[options\\]\n`));
        expect(listed(result.stdout)).toEqual(all.filter((name) => name.startsWith(`${group} `)));
      }
    }
  });

  it("answers each command's --help, and help <command>, with its usage and summary, exit 0, whatever else the line holds", async () => {
    for (const command of commands) {
      const words = command.name.split(' ');
      for (const args of [
        [...words, '--help'],
        [...words, '-h'],
        ['help', ...words],
        [...words, '--bogus', '--help'],
      ]) {
        const result = await runCli(args, nowhere);
        expect(result, args.join(' ')).toMatchObject({ code: 0, stderr: '' });
        expect(result.stdout.startsWith(`Usage: gateway ${command.usage}\n\n${command.summary}\n\n`)).toBe(true);
      }
    }
  });

  it('refuses a group without its command and an unknown command with exit 2 and the help of the nearest group', async () => {
    const bare = await runCli(['virtual-keys'], nowhere);
    expect(bare).toMatchObject({ code: 2, stdout: '' });
    expect(bare.stderr).toMatch(/^gateway virtual-keys needs a command\.\n\nUsage: gateway virtual-keys <command>/);

    const typo = await runCli(['virtual-keys', 'craete', '--workspace', 'x'], nowhere);
    expect(typo).toMatchObject({ code: 2, stdout: '' });
    expect(typo.stderr).toMatch(/^Unknown command: virtual-keys craete\n\nUsage: gateway virtual-keys <command>/);
    expect(listed(typo.stderr)).toEqual(all.filter((name) => name.startsWith('virtual-keys ')));

    for (const args of [['frobnicate'], ['help', 'frobnicate'], ['frobnicate', '--help']]) {
      const unknown = await runCli(args, nowhere);
      expect(unknown, args.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(unknown.stderr).toMatch(/^Unknown command: frobnicate\n\nUsage: gateway <command>/);
      expect(listed(unknown.stderr)).toEqual(all);
    }
  });

  it('is answered by the built CLI without loading a package: its entry imports only Node built-ins until a command runs', () => {
    const packages = new Set<string>();
    const seen = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      // Static imports only (`import … from "x"`, `import "x"`), not `import("x")`.
      for (const [, specifier] of readFileSync(join(ROOT, 'dist', file), 'utf8').matchAll(
        /^import\s[^;(]*?["']([^"']+)["'];?$/gm,
      )) {
        if (defined(specifier).startsWith('./')) visit(defined(specifier).slice(2));
        else packages.add(defined(specifier));
      }
    };
    visit('cli.js');
    expect([...packages].filter((specifier) => !specifier.startsWith('node:'))).toEqual([]);
    // The check reads imports as esbuild writes them: the server's entry shows it finds packages.
    visit('node.js');
    expect(packages).toContain('hono');
  });

  it('builds zod and drizzle-orm into the server, with only what it imports, and writes its source in Latin-1', () => {
    // What the server holds for as long as it runs (docs/development.md): every module it loads,
    // and its own source, in two bytes a character if one is past Latin-1. Its files: dist/node.js and
    // the chunks it shares with its lazy route groups and they are (dist/node-*.js).
    const server = ['node.js', ...readdirSync(join(ROOT, 'dist')).filter((name) => /^node-.*\.js$/.test(name))]
      .map((name) => readFileSync(join(ROOT, 'dist', name), 'utf8'))
      .join('\n');
    const imported = [...server.matchAll(/^import\s[^;(]*?["']([^"']+)["'];?$/gm)].map(([, specifier]) => specifier);
    expect(imported).toContain('hono');
    expect(imported.filter((specifier) => /^(zod|drizzle-orm)(\/|$)/.test(defined(specifier)))).toEqual([]);
    // esbuild names each module it built in: of zod's locales, the one zod sets.
    expect(server.match(/^\/\/ node_modules\/zod\/v4\/locales\/.*$/gm)).toEqual([
      '// node_modules/zod/v4/locales/en.js',
    ]);
    expect(server).not.toMatch(/[^\u0000-\u00ff]/);
  });
});

describe('the build that npm start and npm run gateway run first', () => {
  /** A checkout of what the build reads, beside this repository's node_modules. */
  let checkout: string;
  beforeAll(() => {
    checkout = mkdtempSync(join(tmpdir(), 'gateway-build-'));
    for (const entry of ['package.json', 'package-lock.json', 'tsconfig.json', 'bin', 'scripts', 'src']) {
      cpSync(join(ROOT, entry), join(checkout, entry), { recursive: true });
    }
    symlinkSync(join(ROOT, 'node_modules'), join(checkout, 'node_modules'), 'dir');
  });
  afterAll(() => rmSync(checkout, { recursive: true, force: true }));

  /** dist/'s files and when each was last written. */
  const dist = () =>
    Object.fromEntries(
      readdirSync(join(checkout, 'dist')).map((name) => [name, statSync(join(checkout, 'dist', name)).mtimeMs]),
    );
  const run = (args: string[]) => {
    const result = spawnSync(process.execPath, args, { cwd: checkout, encoding: 'utf8' });
    expect(result.status, result.stderr).toBe(0);
    return result.stdout;
  };

  it('builds when a source changed since the last build, and only then', { timeout: 180_000 }, () => {
    // The bin builds a checkout that was never built, then answers.
    expect(run(['bin/gateway.js', 'virtual-keys', '--help'])).toMatch(/^Usage: gateway virtual-keys <command>/);
    const first = dist();
    expect(Object.keys(first)).toEqual(
      expect.arrayContaining(['node.js', 'cli.js', 'chunker-process.js', 'embedded-writer.js']),
    );

    run(['scripts/build-node.mjs']);
    run(['bin/gateway.js', '--help']);
    expect(dist()).toEqual(first);

    // A source touched, its content the same: built again (by its time, not its content).
    const source = join(checkout, 'src', 'cli', 'identities.ts');
    const later = new Date(statSync(source).mtimeMs + 1_000);
    utimesSync(source, later, later);
    run(['scripts/build-node.mjs']);
    const touched = dist();
    expect(Object.keys(touched).sort()).toEqual(Object.keys(first).sort());
    expect(touched['cli.js']).toBeGreaterThan(defined(first['cli.js']));
    run(['scripts/build-node.mjs']);
    expect(dist()).toEqual(touched);

    // A source changed: its chunk, named by its content, replaces the last one, which is deleted.
    const chunk = (files: Record<string, number>) =>
      Object.keys(files).filter((name) => /^cli-identities-\w+\.js$/.test(name));
    appendFileSync(source, '\nexport const rebuilt = true;\n');
    expect(run(['bin/gateway.js', 'api-keys', '--help'])).toMatch(/^Usage: gateway api-keys <command>/);
    const changed = dist();
    expect(chunk(changed)).toHaveLength(1);
    expect(chunk(changed)).not.toEqual(chunk(first));
    expect(readFileSync(join(checkout, 'dist', defined(chunk(changed)[0])), 'utf8')).toContain('rebuilt');

    // An output lost (deleted by hand) is built again too.
    rmSync(join(checkout, 'dist', 'node.js'));
    run(['scripts/build-node.mjs']);
    expect(existsSync(join(checkout, 'dist', 'node.js'))).toBe(true);
  });
});
