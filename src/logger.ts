/**
 * Structured logs: one JSON object per line. Runtime-neutral (console exists on Node and Workers).
 * Callers pass ids and counts, never secrets: API keys, provider keys and request bodies stay out.
 */

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  /** Whether a level would be written, so hot paths can skip building fields. */
  enabled(level: Exclude<LogLevel, 'silent'>): boolean;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

/** @param write receives each finished line; defaults to the console. Tests capture it. */
export function createLogger(
  level: LogLevel,
  write: (line: string, level: Exclude<LogLevel, 'silent'>) => void = defaultWrite,
): Logger {
  const threshold = RANK[level];
  const log = (lvl: Exclude<LogLevel, 'silent'>) => (message: string, fields?: LogFields) => {
    if (RANK[lvl] < threshold) return;
    write(JSON.stringify({ time: new Date().toISOString(), level: lvl, message, ...fields }, errorReplacer), lvl);
  };
  return {
    debug: log('debug'),
    info: log('info'),
    warn: log('warn'),
    error: log('error'),
    enabled: (lvl) => RANK[lvl] >= threshold,
  };
}

function defaultWrite(line: string, level: Exclude<LogLevel, 'silent'>) {
  if (level === 'error' || level === 'warn') console.error(line);
  else console.log(line);
}

// Errors are not enumerable: log their name, message, stack frames and cause (our own logs only,
// never a response). Drizzle's query errors append the statement's parameters to the message, and
// parameters carry user data and hashes, so everything from "params:" on is dropped.
function errorReplacer(_key: string, value: unknown) {
  return value instanceof Error ? describeError(value, 0) : value;
}

function describeError(error: Error, depth: number): Record<string, unknown> {
  const frames = (error.stack ?? '')
    .split('\n')
    .filter((line) => line.trimStart().startsWith('at '))
    .slice(0, 12)
    .join('\n');
  return {
    name: error.name,
    message: error.message.split(/\nparams:/)[0],
    stack: frames,
    cause: error.cause instanceof Error && depth < 3 ? describeError(error.cause, depth + 1) : undefined,
  };
}
