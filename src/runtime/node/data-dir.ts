import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigurationError } from '../../config';
import { makeDirectory } from '../../lib/make-directory';

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
