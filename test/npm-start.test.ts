import { cpSync, existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, startGatewayProcess } from './support/processes';

/**
 * `npm start` and `npm run gateway` on a checkout that was never built (no dist/), as on a fresh
 * clone after `npm install`: the scripts build what they run. (A prestart hook would not do: the
 * repository's .npmrc sets ignore-scripts, which skips npm's pre- and post- hooks too.) The
 * checkout is a copy of what the scripts use, beside this repository's node_modules.
 */

const CHECKOUT = ['package.json', '.npmrc', 'tsconfig.json', 'bin', 'scripts', 'src', 'drizzle'];

let checkout: string;
beforeAll(() => {
  checkout = mkdtempSync(join(tmpdir(), 'gateway-checkout-'));
  for (const entry of CHECKOUT) cpSync(join(ROOT, entry), join(checkout, entry), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(checkout, 'node_modules'), 'dir');
});
afterAll(() => rmSync(checkout, { recursive: true, force: true }));

describe('npm start on a checkout without dist/', () => {
  it('builds the server, starts it on an empty data directory and serves', async () => {
    expect(existsSync(join(checkout, 'dist'))).toBe(false);
    const dataDir = join(checkout, 'data');
    const gateway = await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'info' }, 60_000, { command: ['npm', 'start'], cwd: checkout });
    try {
      expect(existsSync(join(checkout, 'dist', 'node.js'))).toBe(true);
      expect(gateway.stdout()).toMatch(/workspace API key\s+gk_/);
      const health = await fetch(`${gateway.url}/health`);
      expect(health.status).toBe(200);
    } finally {
      await gateway.stop('SIGTERM');
    }
  });
});
