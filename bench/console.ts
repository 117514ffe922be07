import { loadavg } from 'node:os';
import { createFakeUpstream } from '../test/support/fake-upstream';
import { gatewayWithDefaultKey, serveOverHttp } from '../test/support/gateway';
import { launchChromium } from '../test/console/browser';
import { seedRuns, TIMED_PAGES, timePages, type PageTimes } from '../test/console/load';
import { summarise } from './support';

/**
 * `npm run bench:console`: the console in Chromium with BENCH_RUNS (10,000) runs in its workspace,
 * seeded through the real database (test/console/load.ts), served over HTTP by the real app: each
 * page timed from being asked for to being drawn, BENCH_ITERATIONS (5) times in a fresh browser
 * context (its first visit, nothing cached but what the gateway marks immutable). Prints JSON:
 * each page's times in milliseconds (p50, p99, max).
 */

const RUNS = Number(process.env.BENCH_RUNS ?? 10_000);
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 5);

const { gateway, tenant } = await gatewayWithDefaultKey(createFakeUpstream().fetch);
const seedStart = performance.now();
await seedRuns(gateway, tenant, RUNS);
const seedMs = Math.round(performance.now() - seedStart);
const server = await serveOverHttp(gateway);
const browser = await launchChromium();
try {
  const samples: PageTimes[] = [];
  for (let i = 0; i < ITERATIONS; i++) samples.push(await timePages(browser, server.url, tenant.workspaceKey));
  console.log(
    JSON.stringify(
      {
        runs: RUNS,
        iterations: ITERATIONS,
        seed_ms: seedMs,
        load_average: loadavg().map((load) => Number(load.toFixed(2))),
        pages: Object.fromEntries(TIMED_PAGES.map((name) => [name, summarise(samples.map((times) => times[name]))])),
      },
      null,
      2,
    ),
  );
} finally {
  await browser.close();
  await server.close();
  await gateway.close();
}
