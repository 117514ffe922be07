import { execFileSync } from 'node:child_process';
import { ROOT } from './processes';

/**
 * vitest global setup: builds dist/ (scripts/build-node.mjs) before the tests, so that the ones
 * that start the gateway or its CLI as processes run the compiled JavaScript `npm start` and
 * `npm run gateway` run, never a stale build.
 */
export default function setup(): void {
  execFileSync(process.execPath, ['scripts/build-node.mjs'], { cwd: ROOT, stdio: 'inherit' });
}
