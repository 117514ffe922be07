import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { ConfigurationError } from '../../config';

/**
 * `mkdir -p` that fails instead of hanging: Node's recursive mkdir loops forever where the kernel
 * refuses a directory with ENOENT although its parent exists (`/proc/nope`). Creates the missing
 * directories one by one, each with `mode`, and throws the first refusal (ENOENT, EACCES, ENOTDIR,
 * EROFS). Answers whether `path` itself was created.
 */
export function makeDirectory(path: string, mode: number): boolean {
  const missing: string[] = [];
  for (let current = resolve(path); !existsSync(current); current = dirname(current)) {
    missing.unshift(current);
    if (dirname(current) === current) break;
  }
  for (const directory of missing) {
    try {
      mkdirSync(directory, { mode });
    } catch (error) {
      // Another process created it in between: as good as done.
      if (!(error instanceof Error && 'code' in error && error.code === 'EEXIST' && statSync(directory).isDirectory())) throw error;
    }
  }
  return missing.length > 0;
}

/**
 * Stops a start whose DATA_DIR cannot hold the gateway's files (the database, the key file, uploaded
 * files): created if missing, then written to once. Throws ConfigurationError with the cause.
 */
export function checkDataDir(dataDir: string): void {
  try {
    makeDirectory(dataDir, 0o700);
    const probe = join(dataDir, `.write-check-${process.pid}-${randomBytes(4).toString('hex')}`);
    writeFileSync(probe, '', { flag: 'wx', mode: 0o600 });
    rmSync(probe);
  } catch (error) {
    throw new ConfigurationError(
      `DATA_DIR (${dataDir}) is not a directory the gateway can write to: ${error instanceof Error ? error.message : String(error)}.`,
    );
  }
}
