import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

/**
 * Driving the console in Chromium (Debian's /usr/bin/chromium, or the binary CHROMIUM_PATH names)
 * with playwright-core: for its browser tests (console.test.ts, load.test.ts) and `npm run bench:console`.
 */

export const INSTALL = 'apt-get install -y chromium, or CHROMIUM_PATH=<a Chromium binary>';

export const executablePath = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].find(
  (path): path is string => path !== undefined && path !== '' && existsSync(path),
);

export function launchChromium(): Promise<Browser> {
  if (!executablePath) throw new Error(`No Chromium binary: ${INSTALL}`);
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  return chromium.launch({ executablePath, args: ['--no-sandbox'] });
}

/** Signs in on the console's sign-in form, by keyboard (Enter in the field submits). */
export async function signIn(page: Page, key: string): Promise<void> {
  await page.getByLabel('API key').focus();
  await page.keyboard.type(key);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
}

/**
 * Does `ask` (a click, a new fragment) and waits until the page it leads to is drawn: a new view,
 * no longer busy (the one shown before is marked, so that it is not taken for it).
 */
export async function drawnAfter(page: Page, ask: () => Promise<unknown>): Promise<void> {
  await page.evaluate(`document.querySelector('.view')?.setAttribute('data-before', '')`);
  await ask();
  await page.locator('.view[aria-busy="false"]:not([data-before])').waitFor();
}
