import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestGateway, json, serveOverHttp, type TestGateway } from '../../support/gateway';
import { waitFor } from '../../support/wait';

/**
 * GET /docs in a real browser (Debian's chromium, driven by playwright-core) with every host but the
 * gateway's loopback address cut off: the reference renders from what the gateway serves alone, and
 * without JavaScript the page still says what the gateway is and where its description is.
 * CHROMIUM_PATH names another binary. .ci/run installs chromium where it can; without one, skipped.
 */

const INSTALL = 'apt-get install -y chromium, or CHROMIUM_PATH=<a Chromium binary>';
const executablePath = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].find(
  (path): path is string => path !== undefined && path !== '' && existsSync(path),
);
if (!executablePath)
  console.warn(`test/http/openapi/reference-page-browser.test.ts: skipped, no Chromium binary. To run it: ${INSTALL}`);

type Operation = { summary?: string };

describe.skipIf(!executablePath)(
  executablePath
    ? `GET /docs in Chromium (${executablePath}), offline`
    : `GET /docs in Chromium: skipped, no Chromium binary (${INSTALL})`,
  () => {
    let gateway: TestGateway;
    let server: { url: string; close(): Promise<void> };
    let browser: Browser;

    beforeAll(async () => {
      gateway = await createTestGateway();
      server = await serveOverHttp(gateway);
      // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
      browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
    });
    afterAll(async () => {
      await browser?.close();
      await server?.close();
      await gateway?.close();
    });

    /** /docs in a browser context of its own; `refused` collects what it asked of any other host. */
    async function open(options: { javaScriptEnabled: boolean }): Promise<{ page: Page; refused: string[] }> {
      const refused: string[] = [];
      const context = await browser.newContext(options);
      const origin = new URL(server.url).origin;
      await context.route('**/*', (route) => {
        const url = route.request().url();
        if (new URL(url).origin === origin) return route.continue();
        refused.push(url);
        return route.abort('internetdisconnected');
      });
      const page = await context.newPage();
      await page.goto(`${server.url}/docs`);
      return { page, refused };
    }

    it("renders the reference from the gateway's own files, naming every operation", async () => {
      const document = await json(await gateway.request('/openapi.json'));
      const names = Object.entries(document.paths as Record<string, Record<string, Operation>>).flatMap(
        ([path, item]) => Object.values(item).map((operation) => operation.summary ?? path),
      );
      expect(names.length).toBeGreaterThan(50);
      const { page, refused } = await open({ javaScriptEnabled: true });
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      const notRendered = async () => {
        const text = await page.locator('body').innerText();
        return names.filter((name) => !text.includes(name));
      };
      expect(await waitFor(notRendered, (missing) => missing.length === 0, 30_000)).toEqual([]);
      // The plain text gives way to the reference once it is mounted.
      await expect(page.locator('#about').isVisible()).resolves.toBe(false);
      expect(errors).toEqual([]);
      // Scalar's fonts, telemetry and hosted tools are off: nothing was asked of another host.
      expect(refused).toEqual([]);
      await page.context().close();
    });

    it('says what the gateway is and links its description without JavaScript', async () => {
      const { page } = await open({ javaScriptEnabled: false });
      const about = page.locator('#about');
      await expect(about.isVisible()).resolves.toBe(true);
      const text = await about.innerText();
      expect(text).toContain("OpenAI's Assistants v2 API");
      expect(text).toContain('needs JavaScript');
      expect(text).not.toContain('Loading');
      await expect(about.locator('a[href="/openapi.json"]').count()).resolves.toBe(1);
      await page.context().close();
    });
  },
);
