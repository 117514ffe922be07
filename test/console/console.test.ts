import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createFakeUpstream, fakeDirective, fakeThread, type FakeUpstream } from '../support/fake-upstream';
import { storeFile } from '../support/files';
import { errorOf, gatewayWithDefaultKey, serveOverHttp, type Tenant, type TestGateway } from '../support/gateway';
import { ROOT } from '../support/processes';
import { LOOKUP_TOOL } from '../support/threads';
import { waitFor } from '../support/wait';
import { defined } from '../support/defined';
import { executablePath, INSTALL, launchChromium, signIn } from './browser';
import type OpenAI from 'openai';

/**
 * The console (/console) in a real browser, Debian's chromium driven by playwright-core, against the
 * real app served over HTTP with the fake provider behind it: signing in and out, each page's work,
 * and what must never happen (a stored name run as markup, the key in a URL, storage or a log line,
 * another workspace's data on screen). Each page is checked with axe-core (no serious or critical
 * violation) and photographed, at a laptop's width and a phone's, into test/console/screenshots/
 * (gitignored; docs/console.md). CHROMIUM_PATH names another binary; without one, skipped.
 */

if (!executablePath) console.warn(`test/console/console.test.ts: skipped, no Chromium binary. To run it: ${INSTALL}`);

const SCREENSHOTS = join(ROOT, 'test', 'console', 'screenshots');
const AXE = readFileSync(join(ROOT, 'node_modules', 'axe-core', 'axe.min.js'), 'utf8');
const LAPTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
const MARKUP = '<img src=x onerror="document.title=\'pwned\'"><b>bold</b>';

let gateway: TestGateway;
let tenant: Tenant;
/** Another workspace of tenant's organisation, and a workspace of another organisation. */
let sibling: Tenant;
let stranger: Tenant;
let client: OpenAI;
let upstream: FakeUpstream;
let server: { url: string; close(): Promise<void> };
let browser: Browser;
/** Every URL any page asked for, and every key the test used: no URL may hold a key. */
const requested: string[] = [];
const keys: string[] = [];
/** Every uncaught error of a page's script: none, checked after each test. */
const pageErrors: string[] = [];
const SIBLING_MARKER = `sibling-${crypto.randomUUID()}`;
const STRANGER_MARKER = `stranger-${crypto.randomUUID()}`;

/** Keys, policies, virtual keys, files, vector stores, an assistant and a thread of another workspace, each named with its marker. */
async function plant(owner: Tenant, marker: string): Promise<void> {
  const key = owner.workspaceKey;
  await errorFree(gateway.request('/v1/api-keys', { key, body: { name: marker } }));
  await errorFree(
    gateway.request('/v1/policies/rate-limits', {
      key,
      body: {
        name: marker,
        conditions: [{ key: 'model', value: '*' }],
        group_by: [{ key: 'api_key' }],
        type: 'requests',
        unit: 'rpm',
        value: 1000,
      },
    }),
  );
  await gateway.virtualKey(owner, { slug: marker, base_url: 'http://fake.test/v1', models: ['gpt-4o'] });
  const file = await storeFile(gateway, owner, { filename: `${marker}.txt`, content: marker });
  await errorFree(
    gateway.request('/v1/vector_stores', {
      key,
      headers: { 'x-gateway-virtual-key': marker },
      body: { name: marker, file_ids: [file] },
    }),
  );
  await errorFree(gateway.request('/v1/assistants', { key, body: { model: 'gpt-4o', name: marker } }));
  await errorFree(
    gateway.request('/v1/threads', {
      key,
      body: { metadata: { marker }, messages: [{ role: 'user', content: marker }] },
    }),
  );
}

async function errorFree(answer: Promise<Response>): Promise<void> {
  const response = await answer;
  if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
}

async function newPage(viewport = LAPTOP): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport });
  const origin = new URL(server.url).origin;
  // Offline: anything but the gateway is refused, and recorded.
  await context.route('**/*', (route) => {
    const url = route.request().url();
    requested.push(url);
    if (new URL(url).origin === origin) return route.continue();
    return route.abort('internetdisconnected');
  });
  const page = await context.newPage();
  page.on('dialog', (dialog) => void dialog.accept());
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.goto(`${server.url}/console`);
  return { context, page };
}

async function openPage(page: Page, name: string): Promise<void> {
  await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name }).click();
  await page.getByRole('heading', { level: 1, name }).waitFor();
}

/** axe-core's serious and critical violations on the page as it is. */
async function accessibilityProblems(page: Page): Promise<string[]> {
  // Through the DevTools protocol, which the page's Content-Security-Policy does not govern.
  await page.evaluate(AXE);
  // A string, run in the page: the DOM's types are not this program's.
  return page.evaluate<string[]>(`axe.run().then(({ violations }) => violations
    .filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
    .map((violation) => violation.id + ': ' + JSON.stringify(violation.nodes.map((node) => node.target))))`);
}

/** Checks the page with axe, and photographs it at a laptop's width and a phone's. */
async function review(page: Page, name: string): Promise<void> {
  expect(await accessibilityProblems(page), name).toEqual([]);
  await page.screenshot({ path: join(SCREENSHOTS, `${name}-laptop.png`), fullPage: true });
  await page.setViewportSize(PHONE);
  expect(await accessibilityProblems(page), `${name} on a phone`).toEqual([]);
  await page.screenshot({ path: join(SCREENSHOTS, `${name}-phone.png`), fullPage: true });
  await page.setViewportSize(LAPTOP);
}

/** Nothing of the session is kept by the browser: no storage, no cookie. */
async function expectNothingStored(page: Page): Promise<void> {
  const kept = await page.evaluate(
    '({ local: localStorage.length, session: sessionStorage.length, cookie: document.cookie })',
  );
  expect(kept).toEqual({ local: 0, session: 0, cookie: '' });
}

/** The page's text and markup hold nothing of the other workspaces. */
async function expectOwnDataOnly(page: Page): Promise<void> {
  const content = await page.content();
  expect(content).not.toContain(SIBLING_MARKER);
  expect(content).not.toContain(STRANGER_MARKER);
}

const requestsShown = async (page: Page) =>
  Number(await page.getByRole('img', { name: /^Requests by model/ }).getAttribute('data-total'));

describe.skipIf(!executablePath)(
  executablePath
    ? `The console in Chromium (${executablePath}), offline`
    : `The console in Chromium: skipped, no Chromium binary (${INSTALL})`,
  () => {
    beforeAll(async () => {
      upstream = createFakeUpstream();
      ({ gateway, tenant, client } = await gatewayWithDefaultKey(upstream.fetch));
      sibling = await gateway.tenant({ organisationId: tenant.organisationId });
      stranger = await gateway.tenant();
      await plant(sibling, SIBLING_MARKER);
      await plant(stranger, STRANGER_MARKER);
      keys.push(tenant.workspaceKey, tenant.orgKey, sibling.workspaceKey, stranger.workspaceKey);
      server = await serveOverHttp(gateway);
      mkdirSync(SCREENSHOTS, { recursive: true });
      browser = await launchChromium();
    });
    afterEach(() => {
      expect(pageErrors).toEqual([]);
    });
    afterAll(async () => {
      await browser?.close();
      await server?.close();
      await gateway?.close();
    });

    it('serves its page uncached and its files immutable, from the gateway alone', async () => {
      const page = await fetch(`${server.url}/console`);
      expect(page.headers.get('cache-control')).toBe('no-cache');
      expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
      const html = await page.text();
      const files = [...html.matchAll(/\/console\/assets\/(console-[0-9a-f]{12}\.(?:js|css))/g)].map((m) => m[0]);
      expect(files).toHaveLength(2);
      for (const file of files) {
        const asset = await fetch(`${server.url}${file}`);
        expect(asset.status).toBe(200);
        expect(asset.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
        await asset.arrayBuffer();
      }
      const unknown = await fetch(`${server.url}/console/assets/openapi.json`);
      expect(unknown.status).toBe(404);
      await unknown.arrayBuffer();
    });

    it('signs in with a workspace key, refuses a wrong one, and signs out', async () => {
      const { context, page } = await newPage();
      await review(page, 'sign-in');
      await page.getByLabel('API key').fill('gk_not-a-key');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect(page.getByRole('alert').textContent()).resolves.toContain('Not signed in');
      await signIn(page, tenant.workspaceKey);
      await expect(page.getByRole('banner').textContent()).resolves.toContain(`Workspace: ${tenant.workspace.slug}`);
      await expectNothingStored(page);
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByRole('heading', { name: 'Sign in to the gateway console' }).waitFor();
      // Signed out, the pages are out of reach: a page's address shows the sign-in form.
      await page.goto(`${server.url}/console#/api-keys`);
      await page.getByRole('heading', { name: 'Sign in to the gateway console' }).waitFor();
      await context.close();
    });

    it("offers an organisation key its organisation's workspaces, never another's", async () => {
      const { context, page } = await newPage();
      await signIn(page, tenant.orgKey);
      const picker = page.getByLabel('Workspace');
      const offered = await Promise.all(
        (await picker.locator('option').all()).map((option) => option.getAttribute('value')),
      );
      expect(offered.sort()).toEqual([tenant.workspace.id, sibling.workspace.id].sort());
      await picker.selectOption(tenant.workspace.id);
      for (const name of [
        'Playground',
        'Assistants',
        'Threads',
        'Runs',
        'Files',
        'Vector stores',
        'API keys',
        'Virtual keys',
        'Rate-limit policies',
      ]) {
        await openPage(page, name);
        await page.locator('.view > *').first().waitFor();
        await expect(page.getByRole('alert').count(), name).resolves.toBe(0);
        await expectOwnDataOnly(page);
      }
      // The sibling's, once picked, and still nothing of the other organisation.
      await picker.selectOption(sibling.workspace.id);
      await page.locator('[data-policy-id]').first().waitFor();
      const content = await page.content();
      expect(content).toContain(SIBLING_MARKER);
      expect(content).not.toContain(STRANGER_MARKER);
      await context.close();
    });

    it('draws usage, and the chart counts a chat completion made meanwhile', async () => {
      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await page.getByRole('img', { name: /^Requests by model/ }).waitFor();
      const before = await requestsShown(page);
      await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Count me' }] });
      await gateway.tasks.drain(10_000);
      const after = await waitFor(
        async () => {
          await page.getByRole('button', { name: 'Refresh' }).click();
          await page.locator('.charts[aria-busy="false"]').waitFor();
          return requestsShown(page);
        },
        (shown) => shown === before + 1,
      );
      expect(after).toBe(before + 1);
      await expect(page.getByRole('img', { name: /^Requests by model/ }).textContent()).resolves.toContain('gpt-4o');
      for (const period of ['day', 'month']) {
        await page.getByLabel('Period').selectOption(period);
        await page.locator('.charts[aria-busy="false"]').waitFor();
        expect(await requestsShown(page), period).toBeGreaterThanOrEqual(before + 1);
      }
      await page.getByLabel('Period').selectOption('hour');
      await page.getByLabel('By', { exact: true }).selectOption('api_key_id');
      await page.locator('.charts[aria-busy="false"]').waitFor();
      await review(page, 'overview');
      await expectOwnDataOnly(page);
      await context.close();
    });

    it('creates an API key shown once, shows a stored name as text, and revokes a key', async () => {
      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await openPage(page, 'API keys');
      await page.getByLabel('Name').fill(MARKUP);
      await page.getByRole('button', { name: 'Create key' }).click();
      const shown = await page.getByLabel('The new key').inputValue();
      expect(shown).toMatch(/^gk_/);
      keys.push(shown);
      expect((await gateway.request('/v1/assistants', { key: shown })).status).toBe(200);
      await page.getByRole('button', { name: 'Done' }).click();
      // Once: the list has its prefix, never the key.
      const row = page.getByRole('row').filter({ hasText: MARKUP });
      await row.waitFor();
      expect(await page.content()).not.toContain(shown);
      // The name is its characters, not markup: no image, no bold, nothing ran.
      await expect(row.getByRole('rowheader').textContent()).resolves.toBe(MARKUP);
      await expect(page.locator('main img, main b').count()).resolves.toBe(0);
      await expect(page.title()).resolves.not.toBe('pwned');
      await review(page, 'api-keys');
      await row.getByRole('button', { name: /^Revoke/ }).click();
      await row.getByText(/^revoked/).waitFor();
      const refused = await errorOf(await gateway.request('/v1/assistants', { key: shown }));
      expect(refused.status).toBe(401);
      await expectOwnDataOnly(page);
      await context.close();
    });

    it('signs out when the key it signed in with is revoked, from its own page', async () => {
      const created = await gateway.request('/v1/api-keys', {
        key: tenant.workspaceKey,
        body: { name: 'short-lived' },
      });
      const { key } = (await created.json()) as { key: string };
      keys.push(key);
      const { context, page } = await newPage();
      await signIn(page, key);
      await openPage(page, 'API keys');
      await page
        .getByRole('row')
        .filter({ hasText: 'short-lived' })
        .getByRole('button', { name: /^Revoke/ })
        .click();
      await page.getByRole('heading', { name: 'Sign in to the gateway console' }).waitFor();
      await expect(page.getByRole('alert').textContent()).resolves.toContain('Signed out');
      await context.close();
    });

    it('creates a virtual key, tests it with one call, changes its models and rotates its secret', async () => {
      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await openPage(page, 'Virtual keys');
      const create = page.getByRole('form', { name: 'Create a virtual key' });
      await create.getByLabel('Slug').fill('console-key');
      await create.getByLabel('Base URL').fill('http://fake.test/v1');
      await create.getByLabel('Provider API key').fill('sk-console-secret');
      await create.getByLabel('Models').fill('gpt-console');
      await create.getByRole('button', { name: 'Create virtual key' }).click();
      const card = page.locator('[data-slug="console-key"]');
      await card.waitFor();
      await card.getByRole('button', { name: 'Test connection' }).click();
      await card.getByText(/^Connected: console-key answered/).waitFor();
      await card.locator('summary', { hasText: 'Settings' }).click();
      await card.getByLabel('Models').fill('gpt-console, gpt-console-mini');
      await card.getByRole('button', { name: 'Save settings' }).click();
      await page.locator('[data-slug="console-key"]').getByText('gpt-console, gpt-console-mini').waitFor();
      const listed = await gateway.request('/v1/virtual-keys', { key: tenant.workspaceKey });
      const stored = (await listed.json()) as { data: { slug: string; models: string[] }[] };
      expect(stored.data.find((key) => key.slug === 'console-key')?.models).toEqual([
        'gpt-console',
        'gpt-console-mini',
      ]);
      const again = page.locator('[data-slug="console-key"]');
      await again.locator('summary', { hasText: 'Rotate secret' }).click();
      await again.getByLabel('New provider API key').fill('sk-console-rotated');
      await again.getByRole('button', { name: 'Rotate secret' }).click();
      await again.getByText('The secret of console-key was replaced.').waitFor();
      // The provider's secret is sent, never shown.
      expect(await page.content()).not.toContain('sk-console-');
      await review(page, 'virtual-keys');
      await expectOwnDataOnly(page);
      await context.close();
    });

    it('creates, edits and archives a rate-limit policy', async () => {
      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await openPage(page, 'Rate-limit policies');
      const create = page.getByRole('form', { name: 'Create a policy' });
      await create.getByLabel('Name').fill(MARKUP);
      await create.getByLabel('Limit').fill('50');
      await create.getByRole('button', { name: 'Create policy' }).click();
      const card = page.locator('[data-policy-id]').filter({ hasText: MARKUP });
      await card.waitFor();
      await expect(card.getByRole('heading').textContent()).resolves.toBe(MARKUP);
      await expect(page.locator('main img, main b').count()).resolves.toBe(0);
      await card.locator('summary', { hasText: 'Edit' }).click();
      await card.getByLabel('Limit').fill('75');
      await card.getByRole('button', { name: 'Save policy' }).click();
      await page
        .locator('[data-policy-id]')
        .filter({ hasText: MARKUP })
        .getByText(/^75 requests per minute/)
        .waitFor();
      await review(page, 'policies');
      await page
        .locator('[data-policy-id]')
        .filter({ hasText: MARKUP })
        .getByRole('button', { name: /^Archive/ })
        .click();
      await waitFor(
        () => page.locator('[data-policy-id]').filter({ hasText: MARKUP }).count(),
        (count) => count === 0,
      );
      await expect(page.locator('[data-policy-id]').filter({ hasText: MARKUP }).count()).resolves.toBe(0);
      const archived = await gateway.request('/v1/policies/rate-limits?status=archived', { key: tenant.workspaceKey });
      expect(await archived.text()).toContain('75');
      await expectOwnDataOnly(page);
      await context.close();
    });

    it('lists assistants, threads and runs; reads a thread as a chat and a run as its timeline', async () => {
      const assistant = await client.beta.assistants.create({ model: 'gpt-4o', name: MARKUP, tools: [LOOKUP_TOOL] });
      const waiting = await client.beta.threads.createAndRunPoll({
        assistant_id: assistant.id,
        thread: fakeThread(MARKUP, [{ tool_calls: 1 }, { reply: 'Found it.' }]),
      });
      const call = waiting.required_action?.submit_tool_outputs.tool_calls[0];
      expect(call?.function.name).toBe('lookup');
      // Longer than the timeline shows: it is cut, saying so, and its end is not on the page.
      const output = `${'result '.repeat(400)}END-OF-OUTPUT`;
      const done = await client.beta.threads.runs.submitToolOutputsAndPoll(waiting.id, {
        thread_id: waiting.thread_id,
        tool_outputs: [{ tool_call_id: call?.id ?? '', output }],
      });
      expect(done.status).toBe('completed');
      const failed = await client.beta.threads.createAndRunPoll({
        assistant_id: assistant.id,
        thread: fakeThread('Fail, please', { status: 500 }),
      });
      expect(failed.status).toBe('failed');

      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await page.getByRole('img', { name: /^Runs by status/ }).waitFor();
      expect(
        Number(await page.getByRole('img', { name: /^Runs by status/ }).getAttribute('data-total')),
      ).toBeGreaterThanOrEqual(2);
      const errors = page.getByRole('img', { name: /^Failed runs by error/ });
      expect(Number(await errors.getAttribute('data-total'))).toBeGreaterThanOrEqual(1);
      await expect(errors.textContent()).resolves.toContain('server_error');

      await openPage(page, 'Assistants');
      const row = page.getByRole('row').filter({ hasText: MARKUP });
      await expect(row.getByRole('rowheader').textContent()).resolves.toBe(MARKUP);
      await expect(row.textContent()).resolves.toContain('lookup');
      await review(page, 'assistants');
      await row.getByRole('link', { name: `Threads of ${MARKUP}` }).click();
      await page.waitForURL(/#\/threads\?assistant_id=/);
      await page.getByRole('link', { name: failed.thread_id }).waitFor();
      // The assistant's two threads, and no other.
      await expect(page.locator('main tbody tr').count()).resolves.toBe(2);
      await review(page, 'threads');

      await page.getByRole('link', { name: waiting.thread_id }).click();
      const chat = page.getByRole('list', { name: 'Messages' });
      await chat.waitFor();
      await expect(chat.locator('.bubble.user .text').textContent()).resolves.toContain(MARKUP);
      await expect(chat.locator('.bubble.assistant .text').textContent()).resolves.toBe('Found it.');
      await expect(page.locator('main img, main b').count()).resolves.toBe(0);
      await expect(page.title()).resolves.not.toBe('pwned');
      await review(page, 'conversation');

      await chat.getByRole('link', { name: 'its run' }).click();
      await page.getByRole('heading', { name: `Run ${waiting.id}` }).waitFor();
      const steps = page.getByRole('list', { name: 'Steps' });
      await expect(steps.locator('.step').count()).resolves.toBe(2);
      const timeline = (await steps.textContent()) ?? '';
      expect(timeline).toContain('lookup');
      expect(timeline).toContain(call?.function.arguments ?? 'no arguments');
      expect(timeline).toMatch(/more characters/);
      expect(timeline).not.toContain('END-OF-OUTPUT');
      await expect(page.locator('.facts').first().textContent()).resolves.toContain('completed');
      await review(page, 'run-timeline');

      await openPage(page, 'Runs');
      await page.getByLabel('Status').selectOption('failed');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(/#\/runs\?status=failed/);
      await page.getByRole('link', { name: failed.id }).waitFor();
      await expect(page.getByRole('link', { name: waiting.id }).count()).resolves.toBe(0);
      await review(page, 'runs');
      await page.getByRole('link', { name: failed.id }).click();
      await page.getByText(/^Last error: server_error/).waitFor();
      // A thread's runs, filtered again: the thread is kept.
      await page.evaluate(`location.hash = '#/runs?thread_id=${waiting.thread_id}'`);
      await page.getByText(`Runs of thread ${waiting.thread_id}.`).waitFor();
      await page.getByLabel('Status').selectOption('completed');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(`${server.url}/console#/runs?thread_id=${waiting.thread_id}&status=completed`);
      await page.getByRole('link', { name: waiting.id }).waitFor();
      await expect(page.getByRole('link', { name: failed.id }).count()).resolves.toBe(0);
      await expectOwnDataOnly(page);
      await context.close();
    });

    it('uploads a file, makes a vector store of it, shows its ingestion end, searches it, and deletes the file', async () => {
      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await openPage(page, 'Files');
      const upload = page.getByRole('form', { name: 'Upload a file' });
      // Its name has HTML in it: shown as text on every page, never run.
      const filename = `${MARKUP}.txt`;
      await upload.getByLabel('File').setInputFiles({
        name: filename,
        mimeType: 'text/plain',
        buffer: Buffer.from('Refunds are accepted within 30 days of purchase.\n\nOur office is in Paris.\n'),
      });
      await upload.getByRole('button', { name: 'Upload' }).click();
      const row = page.getByRole('row').filter({ hasText: filename });
      await row.waitFor();
      await expect(row.getByRole('rowheader').textContent()).resolves.toBe(filename);
      const fileId = await row.getAttribute('data-file-id');
      // A file ingestion cannot read, for a failure and its last_error.
      await upload.getByLabel('File').setInputFiles({
        name: 'unreadable.bin',
        mimeType: 'application/octet-stream',
        buffer: Buffer.from([0, 159, 146, 150, 255, 0, 1, 2]),
      });
      await upload.getByRole('button', { name: 'Upload' }).click();
      await page.getByRole('row').filter({ hasText: 'unreadable.bin' }).waitFor();
      await review(page, 'files');

      await openPage(page, 'Vector stores');
      const create = page.getByRole('form', { name: 'Create a vector store' });
      await create.getByLabel('Name').fill('console-docs');
      await create.getByLabel('File').selectOption({ label: filename });
      await create.getByRole('button', { name: 'Create vector store' }).click();
      const card = page.locator('[data-store-id]').filter({ hasText: 'console-docs' });
      // Drawn in progress, then asked again until ingestion ends: completed, with no reload.
      await card.getByRole('row').filter({ hasText: filename }).filter({ hasText: 'completed' }).waitFor();
      await card
        .locator('dl')
        .getByText(/^completed$/)
        .waitFor();
      await card.locator('summary', { hasText: 'Add a file' }).click();
      await card.getByLabel('File', { exact: true }).selectOption({ label: 'unreadable.bin' });
      await card.getByRole('button', { name: 'Add file' }).click();
      const failed = card.getByRole('row').filter({ hasText: 'unreadable.bin' }).filter({ hasText: 'failed' });
      await failed.waitFor();
      await expect(failed.textContent()).resolves.toContain('unsupported_file: ');

      await card.getByLabel('Query').fill('Are refunds accepted?');
      await card.getByRole('button', { name: 'Search' }).click();
      const found = card.getByRole('list', { name: /^Chunks found/ }).getByRole('listitem');
      await found.first().waitFor();
      const best = await found.first().textContent();
      expect(best).toContain(filename);
      expect(best).toContain('Refunds are accepted within 30 days');
      expect(best).toMatch(/score \d\.\d{3}/);
      await expect(page.locator('main img, main b').count()).resolves.toBe(0);
      await expect(page.title()).resolves.not.toBe('pwned');
      await review(page, 'vector-stores');
      await expectOwnDataOnly(page);

      await openPage(page, 'Files');
      const fileRow = page.getByRole('row').filter({ hasText: filename });
      await fileRow.getByRole('button', { name: /^Delete/ }).click();
      await waitFor(
        () => fileRow.count(),
        (count) => count === 0,
      );
      const gone = await errorOf(await gateway.request(`/v1/files/${fileId}`, { key: tenant.workspaceKey }));
      expect(gone.status).toBe(404);
      await context.close();
    });

    it('chats with an assistant in the playground: streamed, followed up, failed, stopped', async () => {
      await errorFree(
        gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'gpt-4o', name: MARKUP } }),
      );
      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await openPage(page, 'Playground');
      await expect(page.getByLabel('Assistant').locator('option').first().textContent()).resolves.toBe(
        `${MARKUP} (gpt-4o)`,
      );
      const conversation = page.getByRole('log', { name: 'Conversation' });
      const answers = conversation.locator('.answer');
      const say = async (text: string) => {
        await page.getByLabel('Message', { exact: true }).fill(text);
        await page.getByRole('button', { name: 'Send' }).click();
      };
      const settled = () => page.locator('.chat[aria-busy="false"]').waitFor();

      // Every text the answer had, as the page drew it.
      await page.evaluate(`window.seen = [];
        new MutationObserver(() => {
          const answer = document.querySelector('.chat .turn:last-child .answer');
          if (answer) window.seen.push(answer.textContent);
        }).observe(document.querySelector('.chat'), { childList: true, subtree: true, characterData: true })`);
      const reply = 'This answer arrives in seven separate pieces';
      await say(`Hello\n${fakeDirective({ reply, chunk_delay_ms: 100 })}`);
      await answers.nth(0).getByText(reply).waitFor();
      await settled();
      const seen = await page.evaluate<string[]>('window.seen');
      const pieces = [...new Set(seen)].filter((text) => text !== '' && text !== reply);
      expect(pieces.length, JSON.stringify(seen)).toBeGreaterThanOrEqual(2);
      for (const piece of pieces) expect(reply.startsWith(piece), piece).toBe(true);

      // A follow-up on the same thread: the provider is sent the conversation so far.
      await say('And a follow-up?');
      await answers.nth(1).getByText('You said: And a follow-up?').waitFor();
      await settled();
      const history = upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).at(-1)
        ?.body?.messages;
      expect(JSON.stringify(history)).toContain(reply);

      await say(`Fail now\n${fakeDirective({ reply: 'Half an answer', error_after_chunks: 1 })}`);
      const failure = conversation.locator('.turn').nth(2).getByRole('alert');
      await expect(failure.textContent()).resolves.toMatch(/^The run failed: server_error: /);
      await settled();

      await say(`Stall\n${fakeDirective({ reply: 'Words that never all arrive', stall_after_chunks: 2 })}`);
      await answers
        .nth(3)
        .getByText(/^Words/)
        .waitFor();
      await page.getByRole('button', { name: 'Stop' }).click();
      await conversation.getByText('Stopped: the run was cancelled.').waitFor();
      // And the provider's call with it.
      const stalled = upstream.requests.filter((request) => request.path.endsWith('/chat/completions')).at(-1);
      await waitFor(
        () => stalled?.outcome,
        (outcome) => outcome === 'cancelled',
      );
      await settled();
      expect(await answers.nth(3).textContent()).not.toBe('Words that never all arrive');
      await expect(page.locator('main img, main b').count()).resolves.toBe(0);
      await review(page, 'playground');
      await expectOwnDataOnly(page);
      await context.close();
    });

    it("shows a policy's counter per group and its refusals once the policy refuses", async () => {
      // A policy of its own, matched only by the metadata sent below, so that no other test is held back.
      const marker = `refusing-${crypto.randomUUID().slice(0, 8)}`;
      await errorFree(
        gateway.request('/v1/policies/rate-limits', {
          key: tenant.workspaceKey,
          body: {
            name: marker,
            conditions: [{ key: `metadata.console`, value: marker }],
            group_by: [{ key: 'api_key' }],
            type: 'requests',
            // A day's window: no boundary falls between the two calls, short of midnight UTC.
            unit: 'rpd',
            value: 1,
          },
        }),
      );
      const call = () =>
        client.chat.completions.create(
          { model: 'gpt-4o', messages: [{ role: 'user', content: 'Count me' }] },
          { headers: { 'x-gateway-metadata': JSON.stringify({ console: marker }) } },
        );
      await call();
      await expect(call()).rejects.toMatchObject({ status: 429 });
      await gateway.tasks.drain(10_000);

      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await openPage(page, 'Rate-limit policies');
      const card = page.locator('[data-policy-id]').filter({ hasText: marker });
      await card.locator('summary', { hasText: 'Counters and refusals' }).click();
      const counters = card.getByRole('table', { name: 'Counters per group' });
      await counters.waitFor();
      const group = `api_key = ${tenant.workspaceKeyId}`;
      await expect(counters.getByRole('row', { name: group }).textContent()).resolves.toContain('1 of 1');
      const refusals = card.getByRole('table', { name: 'Recent refusals' });
      await expect(refusals.getByRole('row').count()).resolves.toBe(2);
      const refusal = refusals.getByRole('row', { name: new RegExp(group) });
      await expect(refusal.textContent()).resolves.toContain('1 of 1');
      // The key by its prefix, as the API keys page shows it.
      const prefix = defined(/^gk_[A-Za-z0-9_-]{4}/.exec(tenant.workspaceKey))[0];
      await expect(refusal.textContent()).resolves.toContain(prefix);

      // Another refusal appears on refreshing.
      await expect(call()).rejects.toMatchObject({ status: 429 });
      await card.getByRole('button', { name: 'Refresh counters' }).click();
      await waitFor(
        () => refusals.getByRole('row').count(),
        (rows) => rows === 3,
      );
      await expect(refusals.getByRole('row').count()).resolves.toBe(3);
      await review(page, 'policy-counters');
      await expectOwnDataOnly(page);
      await context.close();
    });

    it("shows a run's provider attempts, its log line and its events in its timeline: a fallback's too", async () => {
      // A key whose provider fails once (the fake's queued 500), falling back to a steady one.
      await gateway.virtualKey(tenant, { slug: 'steady', base_url: 'http://fake.test/v1' });
      await gateway.virtualKey(tenant, { slug: 'flaky', base_url: 'http://fake.test/v1', fallbacks: ['steady'] });
      const assistant = await client.beta.assistants.create({ model: 'gpt-4o', name: 'traced' });
      upstream.enqueue({ status: 500 });
      const run = await client.beta.threads.createAndRunPoll(
        { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content: 'Trace me' }] } },
        { headers: { 'x-gateway-virtual-key': 'flaky' } },
      );
      expect(run.status).toBe('completed');

      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await page.evaluate(`location.hash = '#/runs/${run.thread_id}/${run.id}'`);
      await page.getByRole('heading', { name: `Run ${run.id}` }).waitFor();
      const attempts = page.getByRole('table', { name: 'Provider attempts (2 of 2)' });
      await attempts.waitFor();
      const [failedAttempt, servedAttempt] = await attempts.locator('tbody tr').allTextContents();
      expect(failedAttempt).toMatch(/flaky.*gpt-4o.*http_5xx.*500/);
      expect(servedAttempt).toMatch(/steady.*gpt-4o.*ok.*200/);
      const log = page.getByRole('definition').filter({ hasText: /^steady$/ });
      await expect(log.count()).resolves.toBe(1);
      const line = (await page.locator('dl[aria-label="Log line"]').textContent()) ?? '';
      expect(line).toContain(`run_id${run.id}`);
      expect(line).toContain('statuscompleted');
      expect(line).toMatch(/time_to_first_token_ms\d+/);
      const events = await page
        .getByRole('list', { name: 'Events in time order' })
        .getByRole('listitem')
        .allTextContents();
      expect(events.map((event) => /^\+[\d,.\s]+ ms (\w+)/.exec(event)?.[1])).toEqual([
        'created',
        'started',
        'attempt',
        'attempt',
        'step_created',
        'step_ended',
        'ended',
      ]);
      expect(events[2]).toContain('attempt 1 · http_5xx');
      expect(events[3]).toContain('attempt 2 · ok');
      await review(page, 'run-trace');
      await expectOwnDataOnly(page);
      await context.close();
    });

    it('pages files and vector stores 20 at a time, with More and Newest links', async () => {
      const paged = await gateway.tenant();
      keys.push(paged.workspaceKey);
      // Its stores are made empty, but making one needs a key for their embeddings.
      await gateway.virtualKey(paged, { base_url: 'http://fake.test/v1', default: true });
      for (let i = 1; i <= 23; i++) {
        await storeFile(gateway, paged, { filename: `paged-${String(i).padStart(2, '0')}.txt`, content: `file ${i}` });
        await errorFree(
          gateway.request('/v1/vector_stores', { key: paged.workspaceKey, body: { name: `store-${i}`, file_ids: [] } }),
        );
      }
      const { context, page } = await newPage();
      await signIn(page, paged.workspaceKey);
      for (const [name, hash, item, first, last] of [
        ['Files', '#/files', page.locator('main tbody tr'), 'paged-23.txt', 'paged-01.txt'],
        ['Vector stores', '#/vector-stores', page.locator('[data-store-id]'), 'store-23', 'store-1'],
      ] as const) {
        await openPage(page, name);
        await page.getByText(first, { exact: true }).first().waitFor();
        await expect(item.count()).resolves.toBe(20);
        await expect(page.getByText(last, { exact: true }).count()).resolves.toBe(0);
        await page.getByRole('navigation', { name: 'Pages of the list' }).getByRole('link', { name: 'More' }).click();
        await page.waitForURL(new RegExp(`${hash}\\?after=`));
        await page.getByText(last, { exact: true }).first().waitFor();
        await expect(item.count()).resolves.toBe(3);
        await expect(page.getByRole('link', { name: 'More' }).count()).resolves.toBe(0);
        if (name === 'Files') await review(page, 'files-second-page');
        await page.getByRole('link', { name: 'Newest' }).click();
        await page.getByText(first, { exact: true }).first().waitFor();
      }
      await context.close();
    });

    it("refuses a change another site's page sends while the console is signed in: no credential goes with it", async () => {
      const { context, page } = await newPage();
      await signIn(page, tenant.workspaceKey);
      await openPage(page, 'API keys');
      // A page of another origin, in the same browser, posting to the gateway as a forged request
      // would: a form whose text/plain body is JSON, which needs no preflight. The key is in the
      // console's memory only, so nothing of it goes along.
      const name = `forged-${crypto.randomUUID().slice(0, 8)}`;
      const form =
        `<form method="post" action="${server.url}/v1/api-keys" enctype="text/plain">` +
        `<input name='{"name":"${name}","x":"' value='"}'></form>`;
      const forger = await context.newPage();
      await forger.goto(`data:text/html,${encodeURIComponent(form)}`);
      const answer = forger.waitForResponse((response) => response.url() === `${server.url}/v1/api-keys`);
      await forger.evaluate('document.forms[0].submit()');
      // Refused for its body (not JSON) before its key is even looked for; it had none to show.
      expect((await answer).status()).toBe(415);
      expect(await (await answer).request().headerValue('authorization')).toBeNull();
      const listed = await gateway.request('/v1/api-keys', { key: tenant.workspaceKey });
      expect(listed.status).toBe(200);
      expect(await listed.text()).not.toContain(name);
      await context.close();
    });

    it('never put a key in a URL or a log line', () => {
      expect(requested.length).toBeGreaterThan(10);
      for (const key of keys) {
        expect(requested.filter((url) => url.includes(key))).toEqual([]);
        expect(gateway.logs.filter((line) => line.includes(key))).toEqual([]);
      }
    });
  },
);
