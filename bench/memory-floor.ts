import { join } from 'node:path';
import { fakeDirective } from '../test/support/fake-upstream';
import { freePort } from '../scripts/sqld';
import { defined } from '../test/support/defined';
import { memoryOf, resetPeakMemory, ROOT, START_FLAGS } from '../test/support/processes';
import {
  forSeconds,
  freshGateway,
  pidOf,
  pool,
  post,
  readStream,
  round,
  SHORT_REPLY,
  sleep,
  startFakeProvider,
  startServer,
  stopChild,
} from './support';

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
 *
 * And beside them, in the same run and measured the same way, the gateway as `npm start` runs it
 * (dist/node.js with its flags), its exchange bench:compare's (a whole streamed run of 8 words
 * BENCH_WORD_GAP_MS apart, from the fake provider in a process of its own), and
 * `gateway_over_database_floor`: what the gateway's own code holds over the stack it stands on.
 *
 * A single measurement moves by several MB from one run to the next (glibc's arenas, when V8
 * happens to collect), so the database floor and the gateway are measured BENCH_ROUNDS (3) times,
 * taking turns (which goes first alternates, so that a drift of the machine falls on both), each
 * round's difference printed (`rounds`) and the medians of both and of the differences given.
 */

const LOAD_SECONDS = Number(process.env.BENCH_LOAD_SECONDS ?? 8);
const SETTLE_SECONDS = Number(process.env.BENCH_SETTLE_SECONDS ?? 12);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = 32;
/** The gateway's own flags (package.json's start). */
const NODE_FLAGS = START_FLAGS;
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

/** A server under measure: its process, one of its exchanges, and how it stops. */
interface Measured {
  pid: number;
  exchange: () => Promise<void>;
  stop: () => Promise<unknown>;
}

async function floorServer(mode: 'framework' | 'database', flags: string[]): Promise<Measured> {
  const port = await freePort();
  const child = await startServer(
    `the ${mode} server`,
    [...flags, join(ROOT, 'bench/memory-floor-server.js'), String(port), mode],
    'ready',
  );
  const url = `http://127.0.0.1:${port}/echo`;
  return {
    pid: pidOf(child),
    exchange: async () => {
      const response = await fetch(url, { method: 'POST', body: BODY });
      if (!response.ok) throw new Error(`${mode}: HTTP ${response.status}`);
      await response.text();
    },
    stop: () => stopChild(child),
  };
}

async function gateway(fakeUrl: string): Promise<Measured> {
  const started = await freshGateway(fakeUrl);
  const assistant = (await post(`${started.url}/v1/assistants`, started.headers, { model: 'bench-model' })) as {
    id: string;
  };
  const body = JSON.stringify({
    assistant_id: assistant.id,
    stream: true,
    thread: { messages: [{ role: 'user', content: `go\n${fakeDirective(SHORT_REPLY)}` }] },
  });
  return {
    pid: started.pid,
    exchange: async () => {
      const response = await fetch(`${started.url}/v1/threads/runs`, {
        method: 'POST',
        headers: started.headers,
        body,
      });
      await readStream(response, () => undefined);
    },
    stop: started.stop,
  };
}

async function measure({ pid, exchange, stop }: Measured) {
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
    await stop();
  }
}

type Figures = Awaited<ReturnType<typeof measure>>;
const over = (a: Figures, b: Figures) => ({
  idle_rss_mb: round(a.idle_rss_mb - b.idle_rss_mb, 1),
  peak_rss_mb: round(a.peak_rss_mb - b.peak_rss_mb, 1),
  rss_after_load_settled_mb: round(a.rss_after_load_settled_mb - b.rss_after_load_settled_mb, 1),
});

/** The median of one of `all`'s figures. */
const median = <T>(all: T[], figure: (figures: T) => number): number =>
  defined(all.map(figure).sort((a, b) => a - b)[Math.floor(all.length / 2)]);

const { url: fakeUrl } = await startFakeProvider();
const databases: Figures[] = [];
const gateways: Figures[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const measureDatabase = async () => databases.push(await measure(await floorServer('database', NODE_FLAGS)));
  const measureGateway = async () => gateways.push(await measure(await gateway(fakeUrl)));
  if (round % 2 === 0) {
    await measureDatabase();
    await measureGateway();
  } else {
    await measureGateway();
    await measureDatabase();
  }
}
const rounds = gateways.map((ours, round) => over(ours, defined(databases[round])));
const medians = (all: Figures[]): Figures => ({
  rss_after_start_mb: median(all, (figures) => figures.rss_after_start_mb),
  idle_rss_mb: median(all, (figures) => figures.idle_rss_mb),
  peak_rss_mb: median(all, (figures) => figures.peak_rss_mb),
  rss_after_load_settled_mb: median(all, (figures) => figures.rss_after_load_settled_mb),
  exchanges_per_second: median(all, (figures) => figures.exchanges_per_second),
});
const database = medians(databases);
const ours = medians(gateways);

console.log(
  JSON.stringify(
    {
      benchmark: 'memory-floor',
      setup: `RSS of everything in the process (/proc), after start, after 300 requests 8 at a time, at the peak of ${LOAD_SECONDS} s of ${CONNECTIONS} at a time (this process as the client), and ${SETTLE_SECONDS} s after; database and gateway: medians of ${ROUNDS} rounds taking turns, rounds: each round's gateway over database`,
      goals: { gateway_over_database_floor: { idle_rss_mb: '<= 25' } },
      node_alone: await nodeAlone(),
      framework: await measure(await floorServer('framework', NODE_FLAGS)),
      framework_smallest_young_generation: await measure(
        await floorServer('framework', [...NODE_FLAGS, SMALLEST_YOUNG_GENERATION]),
      ),
      database,
      database_smallest_young_generation: await measure(
        await floorServer('database', [...NODE_FLAGS, SMALLEST_YOUNG_GENERATION]),
      ),
      gateway: ours,
      rounds,
      gateway_over_database_floor: {
        idle_rss_mb: median(rounds, (each) => each.idle_rss_mb),
        peak_rss_mb: median(rounds, (each) => each.peak_rss_mb),
        rss_after_load_settled_mb: median(rounds, (each) => each.rss_after_load_settled_mb),
      },
    },
    null,
    2,
  ),
);
process.exit(0);
