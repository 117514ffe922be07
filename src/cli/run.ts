import { parseArgs } from 'node:util';
import type { CliIo, Command, ServerCommand } from './command';
import { commands } from './commands';

/**
 * The admin command line: `npm run gateway -- <command>` or the package's `gateway` bin. It works
 * on the database that the environment names (DATA_DIR, or LIBSQL_URL and LIBSQL_AUTH_TOKEN),
 * migrating it first, so it administers an embedded gateway and a remote one alike. Help, for
 * every command, every group (`gateway virtual-keys --help`) or all, and usage mistakes are
 * answered from commands.ts alone; execute.ts, which opens the database, is imported to run one.
 */

const FOOTER = [
  'Every command takes --help, and --json to print one JSON value instead of text.',
  'The database comes from the environment: DATA_DIR (default ./data) or LIBSQL_URL and LIBSQL_AUTH_TOKEN.',
  '',
].join('\n');

/** The commands whose names start with these words: all of them, a group's, or one. */
const commandsUnder = (words: string[]) =>
  commands.filter((command) => words.every((word, i) => command.name.split(' ')[i] === word));

function commandHelp(command: Command | ServerCommand): string {
  return `Usage: gateway ${command.usage}\n\n${command.summary}\n\n${FOOTER}`;
}

/** The commands under `words` (all, or a group's), a line of usage and one of summary each. */
function listHelp(words: string[]): string {
  return [
    `Usage: gateway ${[...words, '<command>'].join(' ')} [options]`,
    '',
    ...commandsUnder(words).map((command) => `  ${command.usage}\n      ${command.summary}`),
    '',
    FOOTER,
  ].join('\n');
}

/** The help of the command `words` name, or of the commands under them; null for none. */
function help(words: string[]): string | null {
  const command = commands.find((candidate) => candidate.name === words.join(' '));
  if (command) return commandHelp(command);
  return commandsUnder(words).length === 0 ? null : listHelp(words);
}

/** Finds the command named by the first one or two words. */
function findCommand(argv: string[]): { command: Command | ServerCommand; rest: string[] } | null {
  for (const words of [2, 1]) {
    const name = argv.slice(0, words).join(' ');
    const command = commands.find((candidate) => candidate.name === name);
    if (command) return { command, rest: argv.slice(words) };
  }
  return null;
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

/** Aborted by the first SIGINT or SIGTERM: a serving command then stops as it chooses. */
function stopSignal(): AbortSignal {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return stop.signal;
}

const isHelp = (arg: string) => arg === '--help' || arg === '-h';

/**
 * Runs one command; resolves to the exit code. Tests call it in-process with their own `io`, and
 * stop a serving command with their own signal.
 */
export async function runCli(
  argv: string[],
  env: Record<string, string | undefined>,
  io: CliIo = processIo,
  stop?: AbortSignal,
): Promise<number> {
  const found = argv[0] === 'help' ? null : findCommand(argv);
  if (!found) return answerWithoutCommand(argv, io);
  const { command, rest } = found;
  // Before parsing: help is what a user asks for whatever else the line holds, mistakes included.
  if (rest.some(isHelp)) {
    io.stdout(commandHelp(command));
    return 0;
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      options: { ...command.options, json: { type: 'boolean' } },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    io.stderr(`${error instanceof Error ? error.message : String(error)}\nUsage: gateway ${command.usage}\n`);
    return 2;
  }
  if ('serve' in command) return command.serve({ env, values: parsed.values, io, stop: stop ?? stopSignal() });
  const { execute } = await import('./execute');
  return execute(command, parsed, env, io);
}

/**
 * No command named: help when asked for (`--help`, `-h`, `help [words]`, nothing at all), exit 0;
 * otherwise a group without its command or an unknown command, with the help of the nearest
 * group (or of all), exit 2.
 */
function answerWithoutCommand(argv: string[], io: CliIo): number {
  const asked = argv.length === 0 || argv[0] === 'help' || argv.some(isHelp);
  const words = (argv[0] === 'help' ? argv.slice(1) : argv).filter((arg) => !isHelp(arg));
  const flag = words.findIndex((arg) => arg.startsWith('-'));
  const named = flag === -1 ? words : words.slice(0, flag);
  const text = help(named);
  if (text !== null && asked) {
    io.stdout(text);
    return 0;
  }
  if (text !== null) {
    io.stderr(`${['gateway', ...named].join(' ')} needs a command.\n\n${text}`);
    return 2;
  }
  const group = named.slice(0, commandsUnder(named.slice(0, 1)).length > 0 ? 1 : 0);
  io.stderr(`Unknown command: ${named.join(' ')}\n\n${listHelp(group)}`);
  return 2;
}
