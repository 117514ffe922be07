import { join } from 'node:path';
import { freePort } from '../scripts/sqld';
import { memoryOf, resetPeakMemory, ROOT } from '../test/support/processes';
import { forSeconds, pidOf, pool, round, sleep, startServer, stopChild } from './support';

/**
 * `npm run bench:memory-floor`: what this gateway's stack holds in memory before any of the
 * gateway's own code, measured at the points `bench:compare` measures the gateway (RSS after the
 * same warm-up, the peak under 32 requests at a time, BENCH_SETTLE_SECONDS after the load), so
 * that the gateway's memory can be read against it:
 *
 * - `node_alone`: Node with the gateway's flags, running nothing;
 * - `framework`: hono on @hono/node-server, answering each request its own body
 *   (bench/memory-floor-server.js);
 * - `database`: the same with the embedded database opened as the gateway opens it: a libSQL
 *   connection on the event loop and a writer thread committing each request's body.
 *
 * Each also with `--max-semi-space-size=1`, the smallest young generation V8 takes: what the
 * framework holds when the heap is held as small as it goes.
 */

const LOAD_SECONDS = Number(process.env.BENCH_LOAD_SECONDS ?? 8);
const SETTLE_SECONDS = Number(process.env.BENCH_SETTLE_SECONDS ?? 12);
const CONNECTIONS = 32;
/** The gateway's own flags (package.json's start). */
const NODE_FLAGS = ['--v8-pool-size=1'];
const SMALLEST_YOUNG_GENERATION = '--max-semi-space-size=1';
const BODY = JSON.stringify({
  assistant_id: 'asst_bench',
  stream: true,
  thread: { messages: [{ role: 'user', content: 'x'.repeat(200) }] },
});

async function nodeAlone() {
  const child = await startServer(
    'node alone',
    [...NODE_FLAGS, '-e', "setInterval(() => {}, 1000); console.log('ready')"],
    'ready',
  );
  await sleep(1_500);
  const rss = memoryOf(pidOf(child)).rssMb;
  await stopChild(child);
  return { rss_mb: round(rss, 1) };
}

async function server(mode: 'framework' | 'database', flags: string[]) {
  const port = await freePort();
  const child = await startServer(
    `the ${mode} server`,
    [...flags, join(ROOT, 'bench/memory-floor-server.js'), String(port), mode],
    'ready',
  );
  const pid = pidOf(child);
  const url = `http://127.0.0.1:${port}/echo`;
  const exchange = async () => {
    const response = await fetch(url, { method: 'POST', body: BODY });
    if (!response.ok) throw new Error(`${mode}: HTTP ${response.status}`);
    await response.text();
  };
  try {
    await sleep(1_500);
    const started = memoryOf(pid).rssMb;
    // bench:compare's warm-up.
    await pool(300, 8, exchange);
    const idle = memoryOf(pid).rssMb;
    resetPeakMemory(pid);
    const exchanges = await forSeconds(LOAD_SECONDS, CONNECTIONS, exchange);
    const peak = memoryOf(pid).peakMb;
    await sleep(SETTLE_SECONDS * 1000);
    return {
      rss_after_start_mb: round(started, 1),
      idle_rss_mb: round(idle, 1),
      peak_rss_mb: round(peak, 1),
      rss_after_load_settled_mb: round(memoryOf(pid).rssMb, 1),
      exchanges_per_second: round(exchanges / LOAD_SECONDS, 0),
    };
  } finally {
    await stopChild(child);
  }
}

console.log(
  JSON.stringify(
    {
      benchmark: 'memory-floor',
      setup: `RSS of everything in the process (/proc), after start, after 300 requests 8 at a time, at the peak of ${LOAD_SECONDS} s of ${CONNECTIONS} at a time (this process as the client), and ${SETTLE_SECONDS} s after`,
      goals: { idle_rss_mb: '<= 60', peak_rss_mb: '<= 120' },
      node_alone: await nodeAlone(),
      framework: await server('framework', NODE_FLAGS),
      framework_smallest_young_generation: await server('framework', [...NODE_FLAGS, SMALLEST_YOUNG_GENERATION]),
      database: await server('database', NODE_FLAGS),
      database_smallest_young_generation: await server('database', [...NODE_FLAGS, SMALLEST_YOUNG_GENERATION]),
    },
    null,
    2,
  ),
);
