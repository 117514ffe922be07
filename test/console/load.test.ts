import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { createFakeUpstream } from '../support/fake-upstream';
import { gatewayWithDefaultKey, serveOverHttp, type Tenant, type TestGateway } from '../support/gateway';
import { drawnAfter, executablePath, INSTALL, launchChromium, signIn } from './browser';
import { seedRuns, timePages } from './load';

/**
 * The console with 10,000 runs in its workspace: its lists are paginated (20 rows and a "More"
 * link), its overview counts every run, and each page's time to draw is printed (not asserted: a
 * shared machine's times are not a test's to judge; `npm run bench:console` measures them).
 */

const RUNS = 10_000;

let gateway: TestGateway;
let tenant: Tenant;
let server: { url: string; close(): Promise<void> };
let browser: Browser;

describe.skipIf(!executablePath)(
  `The console with ${RUNS.toLocaleString()} runs${executablePath ? '' : `: skipped (${INSTALL})`}`,
  () => {
    beforeAll(async () => {
      ({ gateway, tenant } = await gatewayWithDefaultKey(createFakeUpstream().fetch));
      await seedRuns(gateway, tenant, RUNS);
      server = await serveOverHttp(gateway);
      browser = await launchChromium();
    }, 120_000);
    afterAll(async () => {
      await browser?.close();
      await server?.close();
      await gateway?.close();
    });

    it('draws a page of runs with a More link, and the overview counts them all', async () => {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(`${server.url}/console`);
      await signIn(page, tenant.workspaceKey);
      await drawnAfter(page, () => page.evaluate(`location.hash = '#/runs'`));
      await expect(page.locator('main tbody tr').count()).resolves.toBe(20);
      await page.getByRole('link', { name: 'More' }).waitFor();
      await drawnAfter(page, () => page.evaluate(`location.hash = '#/overview'`));
      await drawnAfter(page, () => page.getByLabel('Period').selectOption('month'));
      // The seeded runs and their template, made through the API.
      const total = await page.getByRole('img', { name: /^Runs by status/ }).getAttribute('data-total');
      expect(Number(total)).toBe(RUNS + 1);
      await context.close();
    });

    it('times each page', async () => {
      const times = await timePages(browser, server.url, tenant.workspaceKey);
      console.log(JSON.stringify({ seeded_runs: RUNS, milliseconds: times }));
      expect(Object.values(times).every((ms) => ms > 0)).toBe(true);
    });
  },
);
