import { parseArgs } from 'node:util';
import { migrateDatabase, openDatabase } from '../db/node';
import { ApiError } from '../errors';
import type { SecretBox } from '../lib/secrets';
import { nodeConfig } from '../node/config';
import { checkDataDir } from '../node/data-dir';
import { encryptionKeySource, loadSecretBox } from '../node/key-file';
import { checkEncryptionKey } from '../services/encryption-check';
import { UsageError, type Command } from './command';
import { identityCommands } from './identities';
import { usageCommands } from './usage';
import { virtualKeyCommands } from './virtual-keys';

/**
 * The admin command line: `npm run gateway -- <command>` or the package's `gateway` bin. It works
 * on the database that the environment names (DATA_DIR, or LIBSQL_URL and LIBSQL_AUTH_TOKEN),
 * migrating it first, so it administers an embedded gateway and a remote one alike.
 */

const commands: Command[] = [
  ...identityCommands,
  ...virtualKeyCommands,
  ...usageCommands,
  {
    name: 'migrate',
    usage: 'migrate',
    summary: 'Apply the migrations in drizzle/ to the database (done by every command too).',
    async run(ctx) {
      ctx.print(ctx.json ? JSON.stringify({ migrated: true }) : 'Database migrated.\n');
    },
  },
];

function help(): string {
  return [
    'Usage: gateway <command> [options]',
    '',
    ...commands.map((command) => `  ${command.usage}\n      ${command.summary}`),
    '',
    'The database comes from the environment: DATA_DIR (default ./data) or LIBSQL_URL and LIBSQL_AUTH_TOKEN.',
    '',
  ].join('\n');
}

/** Finds the command named by the first one or two words. */
function findCommand(argv: string[]): { command: Command; rest: string[] } | null {
  for (const words of [2, 1]) {
    const name = argv.slice(0, words).join(' ');
    const command = commands.find((candidate) => candidate.name === name);
    if (command) return { command, rest: argv.slice(words) };
  }
  return null;
}

export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** All of standard input. */
  stdin?(): Promise<string>;
}

const processIo: CliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  async stdin() {
    if (process.stdin.isTTY) process.stderr.write('Reading standard input; end it with Ctrl-D.\n');
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8');
  },
};

/** Runs one command; resolves to the exit code. Tests call it in-process with their own `io`. */
export async function runCli(
  argv: string[],
  env: Record<string, string | undefined>,
  io: CliIo = processIo,
): Promise<number> {
  const print = (text: string) => io.stdout(text.endsWith('\n') ? text : `${text}\n`);
  const found = findCommand(argv);
  if (!found) {
    const asked = argv.length === 0 || argv[0] === 'help' || argv[0] === '--help' || argv[0] === '-h';
    io[asked ? 'stdout' : 'stderr']((asked ? '' : `Unknown command: ${argv.join(' ')}\n\n`) + help());
    return asked ? 0 : 2;
  }
  const { command, rest } = found;
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      options: { ...command.options, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    io.stderr(`${(error as Error).message}\nUsage: gateway ${command.usage}\n`);
    return 2;
  }
  if (parsed.values.help) {
    print(`Usage: gateway ${command.usage}\n\n${command.summary}`);
    return 0;
  }
  const json = parsed.values.json === true;
  const config = nodeConfig(env);
  if (!config.LIBSQL_URL) checkDataDir(config.DATA_DIR);
  const database = await openDatabase(config);
  for (const warning of database.warnings) io.stderr(`warning: ${warning}\n`);
  let secrets: Promise<SecretBox> | undefined;
  try {
    await migrateDatabase(database.db);
    await command.run({
      db: database.db,
      config,
      // Checked as the server checks it: a wrong key must not seal new secrets beside the others.
      secrets: () =>
        (secrets ??= loadSecretBox(config).then(async (box) => {
          await checkEncryptionKey(database.db, box, { keySource: encryptionKeySource(config), now: Date.now() });
          return box;
        })),
      readStdin: () => io.stdin?.() ?? Promise.resolve(''),
      env,
      now: Date.now,
      json,
      values: parsed.values,
      positionals: parsed.positionals,
      print,
    });
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr(`error: ${error.message}\nUsage: gateway ${command.usage}\n`);
      return 2;
    }
    if (error instanceof ApiError) {
      if (json) print(JSON.stringify(error.body));
      else io.stderr(`error: ${error.message}\n`);
      return 1;
    }
    throw error;
  } finally {
    database.close();
  }
}

