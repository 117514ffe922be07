import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

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
      if (!(error instanceof Error && 'code' in error && error.code === 'EEXIST' && statSync(directory).isDirectory()))
        throw error;
    }
  }
  return missing.length > 0;
}
