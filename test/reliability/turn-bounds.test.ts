import { defined } from '../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fakeDirective, type FakeScenario } from '../support/fake-upstream';
import { memoryOf } from '../support/processes';
import {
  activeRunCount,
  atRest,
  closeArena,
  expectRunEnded,
  halfWrittenRows,
  openArena,
  percentile,
  postJson,
  runToEnd,
  sleep,
  waitFor,
  whileMeasured,
  type Arena,
  type EndedRun,
  type Measured,
  type Target,
  type Watch,
} from './support';

/**
 * What a run sends and holds, bounded per turn and per request, and shared fairly, as an attacker
 * tries it against a gateway process (docs/api.md, "What a provider may send" and "Fair shares"):
 *
 * - a provider that calls `file_search` with five queries of 700 KB each, round after round: the
 *   turn's rounds share the answer cap, and a search is sent back as what was searched;
 * - a 20 MiB PNG as `image_file`, eight runs at once, to providers that read the request slowly or
 *   not at all: the image is streamed from the blob store as the request is sent, never held;
 * - many runs of one workspace against a provider that never answers: the workspace holds its
 *   share of provider calls, the rest wait their turn.
 *
 * While each happens (whileMeasured, support.ts): /health's p99 of the gateway's own delay under
 * 50 ms with no answer slower, the peak RSS within a stated bound of what it was before, and the
 * other workspace's streamed runs complete, their median time within BYSTANDER_FACTOR of its
 * median at rest (openArena, atRest: the arena hostile.test.ts uses).
 */

const MIB = 1024 * 1024;
const FIRST_BYTE_MS = 8000;
/** Provider calls at once, per workspace and in all: small, so that one workspace can reach its share here. */
const CALLS_PER_WORKSPACE = 8;
const CALLS = 12;
/** The other workspace's median run time while an attack goes on, over its median at rest, at most. */
const BYSTANDER_FACTOR = 2;
const ENV = {
  LOG_LEVEL: 'warn',
  GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
  GATEWAY_UPSTREAM_FIRST_BYTE_TIMEOUT_MS: String(FIRST_BYTE_MS),
  GATEWAY_UPSTREAM_CALLS_PER_WORKSPACE: String(CALLS_PER_WORKSPACE),
  GATEWAY_UPSTREAM_CALLS: String(CALLS),
};
/** The answer cap (GATEWAY_MAX_ANSWER_BYTES's default), which a turn's rounds share. */
const ANSWER_CAP = 4 * MIB;

let arena: Arena;
/** The attacker's workspace; its virtual key `reliability` is its default and points at the hostile fake. */
let attacker: Target;
let watch: Watch;
/** The other workspace's median run time at rest. */
let baselineMs: number;
const tally = {
  hostileUpstreams: 0,
  gatewayStalls: 0,
  outOfMemoryDeaths: 0,
  runsCreated: 0,
  runsLost: 0,
  rowsHalfWritten: 0,
  answered5xx: 0,
};
const figures: Record<string, number> = {};

beforeAll(async () => {
  arena = await openArena('turn-bounds', ENV, tally);
  attacker = arena.attacker;
  // The attacker's default key embeds its vector store's file (F4), and a key per way of reading (F5).
  await postJson(attacker, '/v1/virtual-keys/reliability', { default: true }, tally);
  const fakeUrl = arena.fake.baseURL.replace(/\/v1$/, '');
  await postJson(
    attacker,
    '/v1/virtual-keys',
    { slug: 'unread', provider: 'openai', base_url: `${fakeUrl}/unread/v1`, api_key: 'sk-unread' },
    tally,
  );
  // 1 MiB/s: a 20 MiB image, base64, takes 27 s to read, past the first-byte timeout.
  await postJson(
    attacker,
    '/v1/virtual-keys',
    { slug: 'slow', provider: 'openai', base_url: `${fakeUrl}/slow-read/${MIB}/v1`, api_key: 'sk-slow' },
    tally,
  );
  // 64 MiB/s: read within the timeout.
  await postJson(
    attacker,
    '/v1/virtual-keys',
    { slug: 'reader', provider: 'openai', base_url: `${fakeUrl}/slow-read/${64 * MIB}/v1`, api_key: 'sk-reader' },
    tally,
  );
  ({ watch, baselineMs } = await atRest(arena, tally, figures));
});

afterAll(() => closeArena(arena, 'turn-bounds', tally, figures));

/** `work` measured (support.ts), then the other workspace's median run time held to BYSTANDER_FACTOR of its baseline. */
async function measured<T>(name: string, work: () => Promise<T>, rssBoundMb: number): Promise<Measured<T>> {
  const result = await whileMeasured(watch, name, work, rssBoundMb);
  const medianMs = percentile(
    result.healthy.map((run) => run.ms),
    0.5,
  );
  figures[`${name}_bystander_median_ms`] = Math.round(medianMs);
  console.log(
    `${name}: the other workspace's runs, median ${medianMs.toFixed(0)} ms over ${result.healthy.length} (at rest ${baselineMs.toFixed(0)} ms)`,
  );
  expect(medianMs).toBeLessThan(BYSTANDER_FACTOR * baselineMs);
  return result;
}

/** A run of the attacker's, with the virtual key `virtualKey`, followed to its end. */
function attackerRun(virtualKey: string, body: Record<string, unknown>): Promise<EndedRun> {
  tally.hostileUpstreams++;
  return runToEnd(
    { url: attacker.url, headers: { ...attacker.headers, 'x-gateway-virtual-key': virtualKey } },
    body,
    tally,
  );
}

const expectEnded = (run: EndedRun, expected: Record<string, unknown>) => expectRunEnded(run, expected, tally);

/** Uploads `bytes` as a file of the attacker's: its id. */
async function upload(bytes: Uint8Array, filename: string, purpose: string): Promise<string> {
  const form = new FormData();
  form.set('purpose', purpose);
  form.set('file', new Blob([bytes]), filename);
  const response = await fetch(`${attacker.url}/v1/files`, {
    method: 'POST',
    headers: { 'x-gateway-api-key': attacker.workspaceKey },
    body: form,
  });
  expect(response.status).toBe(200);
  return ((await response.json()) as { id: string }).id;
}

describe('bounds per turn and per run, fair shares of provider calls', () => {
  it('F4: five queries of 700 KB a round, four runs at once: the turn stops at the answer cap, its requests stay small', async () => {
    const fileId = await upload(
      new TextEncoder().encode('Refunds are granted within 30 days of purchase.'),
      'policies.txt',
      'assistants',
    );
    const store = await postJson(attacker, '/v1/vector_stores', { name: 'policies', file_ids: [fileId] }, tally);
    const ready = await waitFor(
      async () =>
        (await (await fetch(`${attacker.url}/v1/vector_stores/${store.id}`, { headers: attacker.headers })).json()) as {
          file_counts: { completed: number };
        },
      (current) => current.file_counts.completed === 1,
      30_000,
    );
    expect(ready.file_counts.completed).toBe(1);
    const assistant = await postJson(
      attacker,
      '/v1/assistants',
      {
        model: 'fake-model',
        tools: [{ type: 'file_search' }],
        tool_resources: { file_search: { vector_store_ids: [store.id] } },
      },
      tally,
    );
    const round: FakeScenario = {
      tool_calls: [{ name: 'file_search' }],
      tool_argument_queries: { count: 5, bytes: 700_000 },
      argument_chunk_chars: 16_384,
    };
    const body = {
      assistant_id: assistant.id,
      thread: {
        messages: [
          { role: 'user', content: `Search\n${fakeDirective([round, round, round, round, { reply: 'Found it.' }])}` },
        ],
      },
    };

    // What a run whose answer reached the cap holds at its end, four runs at once (hostile.test.ts's H2: 4 times the cap a run).
    const { result: runs } = await measured(
      'f4_search_rounds',
      () => Promise.all(Array.from({ length: 4 }, () => attackerRun('reliability', body))),
      4 * 16 + 32,
    );
    for (const run of runs) {
      // Round one searched (3.5 MB of arguments); round two passed the turn's 4 MiB.
      expectEnded(run, { status: 'incomplete', incomplete_details: { reason: 'max_completion_tokens' } });
      const steps = await arena.db.execute({
        sql: "SELECT status, length(step_details) FROM run_steps WHERE run_id = ? AND type = 'tool_calls' ORDER BY created_at",
        args: [run.id],
      });
      expect(steps.rows.map((row) => row[0])).toEqual(['completed', 'failed']);
      // The search's step keeps (and replays) what was searched: five queries cut to 4,096 characters.
      expect(Number(defined(steps.rows[0])[1])).toBeLessThan(64 * 1024);
    }
    const warnings = arena.gateway
      .stderr()
      .split('\n')
      .filter((line) => line.includes('the upstream answer reached the answer cap'));
    for (const run of runs)
      expect(warnings.some((line) => line.includes(run.id) && line.includes(`"cap_bytes":${ANSWER_CAP}`))).toBe(true);
  });

  it('F5: a 20 MiB image, eight runs at once, to providers that read slowly or not at all: streamed, never held', async () => {
    const png = new Uint8Array(20 * MIB).map((_, i) => (i * 31 + 7) % 251);
    png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    const fileId = await upload(png, 'large.png', 'vision');
    const body = (scenario: FakeScenario) => ({
      assistant_id: attacker.assistantId,
      thread: {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: `What is this?\n${fakeDirective(scenario)}` },
              { type: 'image_file', image_file: { file_id: fileId } },
            ],
          },
        ],
      },
    });
    const { result: runs, peakRssGrowthMb } = await measured(
      'f5_large_image',
      () =>
        Promise.all([
          ...Array.from({ length: 4 }, () => attackerRun('unread', body({ reply: 'never read' }))),
          ...Array.from({ length: 4 }, () => attackerRun('slow', body({ reply: 'read too late' }))),
        ]),
      64,
    );
    figures.f5_rss_growth_per_run_mb = Math.round((peakRssGrowthMb / 8) * 10) / 10;
    for (const run of runs) {
      expectEnded(run, {
        status: 'failed',
        last_error: { code: 'server_error', message: `The upstream sent no first byte within ${FIRST_BYTE_MS} ms.` },
      });
    }
    // Read at 64 MiB/s, the image arrives whole: the provider answers after reading it.
    const { result: read } = await measured(
      'f5_large_image_read',
      () => Promise.all(Array.from({ length: 2 }, () => attackerRun('reader', body({ reply: 'A picture.' })))),
      64,
    );
    for (const run of read) expectEnded(run, { status: 'completed' });
  });

  it(`fair shares: a workspace's runs against a provider that never answers hold ${CALLS_PER_WORKSPACE} calls at most, the rest wait their turn`, async () => {
    const hanging: FakeScenario = { first_byte_delay_ms: 600_000 };
    const body = {
      assistant_id: attacker.assistantId,
      thread: { messages: [{ role: 'user', content: `Wait\n${fakeDirective(hanging)}` }] },
    };
    let mostOpen = 0;
    let done = false;
    const { result: runs } = await measured(
      'fair_shares',
      async () => {
        // Counted while no call can have ended: none is sent before this, and none ends before its
        // first-byte timeout. Past it, a call the gateway has dropped (its share handed to a run
        // that waited) stays open in the fake until the fake reads the close, and a loaded machine
        // would count both.
        const before = Date.now() + FIRST_BYTE_MS;
        const counting = (async () => {
          while (!done) {
            const open = await arena.fake.openExchanges();
            if (Date.now() >= before) break;
            mostOpen = Math.max(mostOpen, open);
            await sleep(20);
          }
        })();
        try {
          return await Promise.all(
            Array.from({ length: 3 * CALLS_PER_WORKSPACE }, () => attackerRun('reliability', body)),
          );
        } finally {
          done = true;
          await counting;
        }
      },
      64,
    );
    figures.fair_shares_most_open_calls = mostOpen;
    expect(mostOpen).toBe(CALLS_PER_WORKSPACE);
    const waited = runs.filter((run) => /waiting for its turn|could start within/.test(run.last_error?.message ?? ''));
    figures.fair_shares_runs_that_waited = waited.length;
    for (const run of runs) {
      expectEnded(run, {
        status: 'failed',
        last_error: { message: expect.stringMatching(new RegExp(`within ${FIRST_BYTE_MS} ms`)) },
      });
    }
    expect(waited.length).toBeGreaterThanOrEqual(2 * CALLS_PER_WORKSPACE);
  });
});

describe('afterwards', () => {
  it('no run is left active, no row half-written, no 5xx answered, and the gateway is alive', async () => {
    expect(
      await waitFor(
        () => activeRunCount(arena.db),
        (n) => n === 0,
        10_000,
      ),
    ).toBe(0);
    const halfWritten = await halfWrittenRows(arena.db);
    tally.rowsHalfWritten += halfWritten.length;
    expect(halfWritten).toEqual([]);
    expect(tally.answered5xx).toBe(0);
    expect((await fetch(`${arena.gateway.url}/health`)).status).toBe(200);
    figures.final_rss_mb = Math.round(memoryOf(defined(arena.gateway.child.pid)).rssMb);
  });
});
