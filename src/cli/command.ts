import type { ParseArgsConfig } from 'node:util';
import type { Config } from '../config';
import type { Db } from '../db/client';
import type { SecretBox } from '../lib/secrets';

/** What every CLI command gets: the migrated database, the clock and the output mode. */
export interface CommandContext {
  db: Db;
  config: Config;
  /**
   * The gateway's secret box, loaded as the server loads it (runtime/node/key-file.ts's loadSecretBox). Asked
   * for only by commands that encrypt, so the others work without GATEWAY_ENCRYPTION_KEY (e.g.
   * `migrate` against the remote database of a Workers deployment).
   */
  secrets(): Promise<SecretBox>;
  /** All of standard input, as text. */
  readStdin(): Promise<string>;
  /** The environment the CLI was started with (e.g. for `--api-key-env NAME`). */
  env: Record<string, string | undefined>;
  now: () => number;
  /** `--json`: print one JSON value for scripts instead of text for people. */
  json: boolean;
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  print(text: string): void;
}

export interface Command {
  /** e.g. `api-keys create` */
  name: string;
  usage: string;
  summary: string;
  options?: NonNullable<ParseArgsConfig['options']>;
  /** The command's work: commands.ts imports its group's module here, so that help never loads it. */
  run(ctx: CommandContext): Promise<void>;
}

/**
 * A command that serves rather than administers (`gateway sandbox`): it opens no database, and runs
 * until the process is told to stop; resolves to the exit code.
 */
export interface ServerCommand extends Omit<Command, 'run'> {
  serve(ctx: ServeContext): Promise<number>;
}

export interface ServeContext {
  env: Record<string, string | undefined>;
  values: Record<string, string | boolean | undefined>;
  io: CliIo;
  /** Aborted when the process is told to stop (SIGINT, SIGTERM), or by a test. */
  stop: AbortSignal;
}

/** Where the CLI writes and reads: the process's streams, or a test's. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** All of standard input. */
  stdin?(): Promise<string>;
}

/** A usage mistake: printed with the command's usage, exit code 2. */
export class UsageError extends Error {}

/** Work done in part, after what was done is printed: the message on standard error, exit code 1. */
export class CommandFailed extends Error {}

export function requireString(ctx: CommandContext, name: string): string {
  const value = ctx.values[name];
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

export function optionalString(ctx: CommandContext, name: string): string | undefined {
  const value = ctx.values[name];
  return typeof value === 'string' && value !== '' ? value : undefined;
}
