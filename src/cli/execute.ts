import { migrateDatabase, openDatabase } from '../db/node';
import { ApiError } from '../errors';
import type { SecretBox } from '../lib/secrets';
import { nodeConfig } from '../runtime/node/config';
import { checkDataDir } from '../runtime/node/data-dir';
import { encryptionKeySource, loadSecretBox } from '../runtime/node/key-file';
import { checkEncryptionKey } from '../resources/identities/encryption-check';
import { CommandFailed, UsageError, type CliIo, type Command, type CommandContext } from './command';

/**
 * A command's run, on the database that the environment names, migrated first; resolves to the
 * exit code. Imported by run.ts only once a command is to run: help never loads what this does.
 */
export async function execute(
  command: Command,
  parsed: Pick<CommandContext, 'values' | 'positionals'>,
  env: Record<string, string | undefined>,
  io: CliIo,
): Promise<number> {
  const print = (text: string) => io.stdout(text.endsWith('\n') ? text : `${text}\n`);
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
    if (error instanceof CommandFailed) {
      io.stderr(`error: ${error.message}\n`);
      return 1;
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
