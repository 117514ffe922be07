import { eq } from 'drizzle-orm';
import type { Browser } from 'playwright-core';
import { runs, threads } from '../../src/db/schema';
import { newId } from '../../src/lib/ids';
import { newThread } from '../../src/resources/threads/rows';
import { fakeThread } from '../support/fake-upstream';
import type { Tenant, TestGateway } from '../support/gateway';
import { drawnAfter, signIn } from './browser';

/**
 * The console with many runs in its workspace (issue 41: "the console's pages load in under 1 s
 * with 10,000 runs"): runs seeded in bulk through the real database, then each page timed in
 * Chromium from the moment it is asked for to the moment it is drawn. load.test.ts checks what is
 * drawn and prints the times; `npm run bench:console` (bench/console.ts) measures them.
 */

const DAY_MS = 86_400_000;
const BATCH = 200;
/** The statuses the seeded runs end in, in turn (a run of seven fails). */
const ENDINGS = ['completed', 'completed', 'completed', 'incomplete', 'cancelled', 'expired', 'failed'] as const;

/**
 * `count` ended runs in the tenant's workspace, each on its own thread, created over the last 30
 * days: copies of one run made through the API against the fake provider (so every column is as
 * the gateway writes it), inserted a batch at a time. Answers the template run's id.
 */
export async function seedRuns(gateway: TestGateway, tenant: Tenant, count: number): Promise<string> {
  const key = { key: tenant.workspaceKey };
  const assistant = (await (
    await gateway.request('/v1/assistants', { ...key, body: { model: 'gpt-4o', name: 'load' } })
  ).json()) as { id: string };
  const started = (await (
    await gateway.request('/v1/threads/runs', {
      ...key,
      body: { assistant_id: assistant.id, thread: fakeThread('Seed', { reply: 'Seeded.' }) },
    })
  ).json()) as { id: string };
  await gateway.tasks.drain(10_000);
  const db = gateway.database.db;
  const [template] = await db.select().from(runs).where(eq(runs.id, started.id));
  if (!template) throw new Error(`no run ${started.id}`);
  const { seq: _seq, ...row } = template;
  const now = Date.now();
  for (let first = 0; first < count; first += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, count - first) }, (_, offset) => {
      const index = first + offset;
      const at = now - Math.floor(((count - index) / count) * 30 * DAY_MS);
      const thread = newThread(tenant.workspace.id, undefined, at);
      const status = ENDINGS[index % ENDINGS.length] ?? 'completed';
      return {
        thread,
        run: {
          ...row,
          id: newId('run'),
          threadId: thread.id,
          status,
          createdAt: at,
          startedAt: at,
          completedAt: status === 'completed' ? at + 1500 : null,
          failedAt: status === 'failed' ? at + 900 : null,
          lastError: status === 'failed' ? { code: 'server_error' as const, message: 'The provider failed.' } : null,
        },
      };
    });
    await db.insert(threads).values(batch.map((one) => one.thread));
    await db.insert(runs).values(batch.map((one) => one.run));
  }
  return started.id;
}

/** The pages timed, in the order they are opened. */
export const TIMED_PAGES = [
  'sign_in_to_overview',
  'runs',
  'runs_more',
  'runs_failed',
  'run_timeline',
  'threads',
  'assistants',
  'overview',
  'overview_month',
] as const;

/** Milliseconds from asking for each page to its being drawn. */
export type PageTimes = Record<(typeof TIMED_PAGES)[number], number>;

/** Signs in at `url` and opens each page in turn, timing it; the browser context is closed after. */
export async function timePages(browser: Browser, url: string, key: string): Promise<PageTimes> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const page = await context.newPage();
    await page.goto(`${url}/console`);
    const timed = async (ask: () => Promise<unknown>) => {
      const start = performance.now();
      await drawnAfter(page, ask);
      return Math.round(performance.now() - start);
    };
    const open = (hash: string) => timed(() => page.evaluate(`location.hash = ${JSON.stringify(hash)}`));
    // In this order: a literal's values are computed one after the other.
    return {
      sign_in_to_overview: await timed(() => signIn(page, key)),
      runs: await open('#/runs'),
      runs_more: await timed(() => page.getByRole('link', { name: 'More' }).click()),
      runs_failed: await open('#/runs?status=failed'),
      run_timeline: await timed(() => page.locator('main tbody a').first().click()),
      threads: await open('#/threads'),
      assistants: await open('#/assistants'),
      overview: await open('#/overview'),
      overview_month: await timed(() => page.getByLabel('Period').selectOption('month')),
    };
  } finally {
    await context.close();
  }
}
