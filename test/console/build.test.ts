import { describe, expect, it } from 'vitest';
import { buildConsole, CONSOLE_BUDGET_GZIP_BYTES, staleFiles } from '../../scripts/build-console';

/**
 * The console's committed files are what its sources build to, and within its budget: a change to
 * src/console/client without `npm run build:console` fails here, as one that grows it past the
 * budget does (docs/console.md).
 */
describe('the console build', () => {
  it('is committed as src/console/client builds it, within its gzipped budget', async () => {
    const built = await buildConsole();
    expect(staleFiles(built)).toEqual([]);
    expect(built.gzipBytes).toBeLessThanOrEqual(CONSOLE_BUDGET_GZIP_BYTES);
  });
});
