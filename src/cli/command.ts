import type { ParseArgsConfig } from 'node:util';
import type { Db } from '../db/client';

/** What every CLI command gets: the migrated database, the clock and the output mode. */
export interface CommandContext {
  db: Db;
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
  run(ctx: CommandContext): Promise<void>;
}

/** A usage mistake: printed with the command's usage, exit code 2. */
export class UsageError extends Error {}

export function requireString(ctx: CommandContext, name: string): string {
  const value = ctx.values[name];
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

export function optionalString(ctx: CommandContext, name: string): string | undefined {
  const value = ctx.values[name];
  return typeof value === 'string' && value !== '' ? value : undefined;
}
