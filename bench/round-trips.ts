import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startSqld, type RunningSqld } from '../scripts/sqld';
import { migrateDatabase, openDatabase } from '../src/db/node';
import { generateKeyBase64 } from '../src/lib/secrets';
import { initialise } from '../src/resources/identities/organisations';
import { DatabaseProxy } from '../test/support/database-proxy';
import { fakeDirective } from '../test/support/fake-upstream';
import { startGatewayProcess } from '../test/support/processes';
import { startLocalWorker } from '../test/support/workerd';
import { post, readStream, required, round, startFakeProvider, summarise } from './support';

/**
 * `npm run bench:round-trips`: what the database's distance costs a request. The gateway (the
 * Worker in workerd, as bench:worker runs it, and the Node server on LIBSQL_URL) reaches a local
 * sqld through a proxy here that holds each HTTP request to the database BENCH_DB_DELAYS ms (0, 20
 * and 50: a Turso primary from an edge location is 30 to 80 ms away) and counts them. Each request
 * to the database is one round trip: a statement, a batch, or one step of a transaction.
 *
 * For each kind of request, BENCH_REPEATS (5) times one after another: the round trips it made
 * (counted until the database has been quiet for 400 ms, so that writes after the answer, such
 * as a run's last ones, count too), how many were answered before a streamed run's first token arrived, its wall
 * time, and for streamed runs the first token's latency beyond the provider's own (the fake
 * provider called directly, the same answer). The SDK turn is an application's: with the official
 * SDK, a message added, a run streamed to its end, the messages listed. A run on a thread is timed
 * as the thread's first run and as a later one (after a run, its turn's message just added). A
 * streamed response is timed fresh, going on from a previous one (previous_response_id) known to
 * the gateway and one it does not know (made in the background), and in a conversation that has
 * had a response, known to the gateway or not (made in the background); and an agent's tool loop:
 * the response giving the output of a function call known to the gateway, and on a thread, the
 * streamed submission of a function's output to a run waiting for it, and the run after it.
 *
 * Only loopback and one process per part; the figures that matter are the counts and how the
 * times grow with the delay, not the times at 0 ms.
 */

const DELAYS = (process.env.BENCH_DB_DELAYS ?? '0,20,50').split(',').map(Number);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 5);
const TARGETS = (process.env.BENCH_TARGETS ?? 'worker,node').split(',');
/** BENCH_KINDS: a pattern; only the kinds of request whose names match it are measured (all by default). */
const KINDS = process.env.BENCH_KINDS ? new RegExp(process.env.BENCH_KINDS) : null;
/** BENCH_SHOW_STATEMENTS=1: each request's round trips with their statements, to see what they are. */
const SHOW_STATEMENTS = process.env.BENCH_SHOW_STATEMENTS === '1';
/**
 * BENCH_PROVIDER_FIRST_BYTE_MS (0): how long the fake provider waits before it answers, as a model
 * takes a few hundred ms to its first token; what the gateway does meanwhile (a run's commit)
 * then adds nothing to the first token.
 */
const PROVIDER_FIRST_BYTE_MS = Number(process.env.BENCH_PROVIDER_FIRST_BYTE_MS ?? 0);
const ANSWER = {
  reply: 'a b c d e f g h',
  ...(PROVIDER_FIRST_BYTE_MS > 0 ? { first_byte_delay_ms: PROVIDER_FIRST_BYTE_MS } : {}),
};
const content = `go\n${fakeDirective(ANSWER)}`;

interface Gateway {
  url: string;
  key: string;
  stop(): Promise<unknown>;
}

/** Migrates sqld and creates the tenant; answers its workspace key. */
async function tenant(sqld: RunningSqld): Promise<string> {
  const database = await openDatabase({ DATA_DIR: sqld.dir, LIBSQL_URL: sqld.url });
  try {
    await migrateDatabase(database.db);
    const created = required(await initialise(database.db, Date.now()), 'a fresh tenant');
    return created.workspace_api_key;
  } finally {
    database.close();
  }
}

/** The gateway `name` (worker or node) on a fresh sqld behind `proxy`. */
async function startTarget(name: string, proxy: DatabaseProxy & { url: string }): Promise<Gateway> {
  if (name === 'worker') {
    const worker = await startLocalWorker({
      sqldArgs: ['--disable-intelligent-throttling'],
      bindings: { LIBSQL_URL: proxy.url },
    });
    proxy.target = new URL(worker.sqld.url);
    return { url: worker.url, key: worker.workspaceKey, stop: () => worker.stop() };
  }
  const sqld = await startSqld({ args: ['--disable-intelligent-throttling'] });
  proxy.target = new URL(sqld.url);
  const key = await tenant(sqld);
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-round-trips-'));
  const gateway = await startGatewayProcess({
    LIBSQL_URL: proxy.url,
    DATA_DIR: dataDir,
    GATEWAY_ENCRYPTION_KEY: generateKeyBase64(),
    GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
    LOG_LEVEL: 'warn',
  });
  return {
    url: gateway.url,
    key,
    stop: async () => {
      await gateway.stop();
      await sqld.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** What one request cost: its round trips (those answered before the first token, for streams) and its times. */
interface Sample {
  roundTrips: number;
  beforeFirstToken?: number;
  wallMs: number;
  firstTokenMs?: number;
  statements: string[][];
}

/** ms to the first content chunk straight from the fake provider: what the gateway's first token is compared with. */
async function providerFirstToken(fakeUrl: string): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${fakeUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-bench' },
    body: JSON.stringify({ model: 'bench-model', stream: true, messages: [{ role: 'user', content }] }),
  });
  let first = NaN;
  await readStream(response, (text) => {
    if (Number.isNaN(first) && /"content":"[^"]/.test(text)) first = performance.now() - started;
  });
  return first;
}

async function measureTarget(name: string, fakeUrl: string) {
  const proxy = await DatabaseProxy.start();
  proxy.keepStatements = SHOW_STATEMENTS;
  const gateway = await startTarget(name, proxy);
  try {
    const headers = { authorization: `Bearer ${gateway.key}`, 'content-type': 'application/json' };
    const api = (path: string) => `${gateway.url}/v1${path}`;
    await post(api('/virtual-keys'), headers, {
      slug: 'bench',
      provider: 'openai',
      base_url: `${fakeUrl}/v1`,
      api_key: 'sk-bench',
      default: true,
    });
    const assistant = (await post(api('/assistants'), headers, { model: 'bench-model' })) as { id: string };
    const thread = (await post(api('/threads'), headers, { messages: [{ role: 'user', content }] })) as { id: string };
    const client = new OpenAI({ baseURL: api(''), apiKey: gateway.key, maxRetries: 0 });
    // A run and a response that ended, for the reads of what they stored.
    const done = await client.beta.threads.createAndRunPoll(
      { assistant_id: assistant.id, thread: { messages: [{ role: 'user', content }] } },
      { pollIntervalMs: 20 },
    );
    const answered = (await post(api('/responses'), headers, { model: 'bench-model', input: content })) as {
      id: string;
    };
    const conversation = (await post(api('/conversations'), headers, {})) as { id: string };

    /** Runs `task` once and counts the round trips it made until the database is quiet. */
    const counted = async (task: (mark: () => number) => Promise<Partial<Sample>>): Promise<Sample> => {
      await proxy.quiet();
      const before = proxy.count;
      const answeredBefore = proxy.answered;
      const started = performance.now();
      // What a first token can have waited for: the round trips answered before it arrived. Those
      // begun by then are not: a write that leaves with the first token (the end of an answer that
      // came at once) races it to this process, which is both the proxy and the client.
      const partial = await task(() => proxy.answered - answeredBefore);
      const wallMs = performance.now() - started;
      await proxy.quiet();
      return { ...partial, wallMs, roundTrips: proxy.count - before, statements: proxy.statements.slice(before) };
    };
    const fetchJson = async (path: string, init: RequestInit = {}) => {
      const response = await fetch(api(path), { ...init, headers });
      if (!response.ok) throw new Error(`${path}: HTTP ${response.status} ${await response.text()}`);
      return response.json();
    };
    const posted = (path: string, body: unknown) => fetchJson(path, { method: 'POST', body: JSON.stringify(body) });
    const streamed = (path: string, body: unknown) =>
      counted(async (mark) => {
        const started = performance.now();
        const response = await fetch(api(path), { method: 'POST', headers, body: JSON.stringify(body) });
        let firstTokenMs: number | undefined;
        let beforeFirstToken: number | undefined;
        let tail = '';
        let ended = false;
        await readStream(response, (text) => {
          if (firstTokenMs === undefined && /thread\.message\.delta|output_text\.delta|"content":"[^"]/.test(text)) {
            firstTokenMs = performance.now() - started;
            beforeFirstToken = mark();
          }
          // A run's stream and a chat completion's end with [DONE]; a response's with its completed event.
          ended ||= /\[DONE\]|event: response\.completed/.test(tail + text);
          tail = (tail + text).slice(-64);
        });
        if (firstTokenMs === undefined || !ended) throw new Error(`${path}: no whole stream`);
        return { firstTokenMs, beforeFirstToken };
      });

    /** A response made in the background (`context`: what it goes on from), once it completed: its id. */
    const inBackground = async (context: Record<string, unknown>): Promise<string> => {
      const body = { model: 'bench-model', input: content, background: true, ...context };
      const { id } = (await post(api('/responses'), headers, body)) as { id: string };
      for (;;) {
        const { status } = (await fetchJson(`/responses/${id}`)) as { status: string };
        if (status === 'completed') return id;
        if (status !== 'queued' && status !== 'in_progress') throw new Error(`a background response ${status}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };

    /** A thread whose run called a function and waits for its output: the streamed submission of it. */
    const waitingForOutput = async () => {
      const tools = [
        { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } },
      ];
      const turns = [{ tool_calls: [{ name: 'lookup', arguments: {}, id: 'call_bench' }] }, ANSWER];
      const looped = (await post(api('/threads'), headers, {
        messages: [{ role: 'user', content: `look it up\n${fakeDirective(turns)}` }],
      })) as { id: string };
      const run = (await post(api(`/threads/${looped.id}/runs`), headers, { assistant_id: assistant.id, tools })) as {
        id: string;
      };
      for (;;) {
        const { status } = (await fetchJson(`/threads/${looped.id}/runs/${run.id}`)) as { status: string };
        if (status === 'requires_action') break;
        if (status !== 'queued' && status !== 'in_progress') throw new Error(`a run waiting for outputs ${status}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return {
        threadId: looped.id,
        path: `/threads/${looped.id}/runs/${run.id}/submit_tool_outputs`,
        body: { stream: true, tool_outputs: [{ tool_call_id: 'call_bench', output: 'found' }] },
      };
    };

    const kinds: Record<string, () => Promise<Sample>> = {
      'POST /threads/runs (streamed)': () =>
        streamed('/threads/runs', {
          assistant_id: assistant.id,
          stream: true,
          thread: { messages: [{ role: 'user', content }] },
        }),
      // On a thread of its own: the fake answers a conversation's first turn with the directive's answer.
      'POST /threads/{id}/runs (streamed)': async () => {
        const fresh = (await post(api('/threads'), headers, { messages: [{ role: 'user', content }] })) as {
          id: string;
        };
        return streamed(`/threads/${fresh.id}/runs`, { assistant_id: assistant.id, stream: true });
      },
      // A later turn: the thread has had a run, and the turn's message was just added (the chat app's every turn after the first).
      'POST /threads/{id}/runs (streamed, a later run)': async () => {
        const turned = (await post(api('/threads'), headers, { messages: [{ role: 'user', content }] })) as {
          id: string;
        };
        await streamed(`/threads/${turned.id}/runs`, { assistant_id: assistant.id, stream: true });
        await post(api(`/threads/${turned.id}/messages`), headers, { role: 'user', content });
        return streamed(`/threads/${turned.id}/runs`, { assistant_id: assistant.id, stream: true });
      },
      // An assistant's tool loop: a run that called a function waits for its output (requires_action),
      // and the output is submitted, the rest of the run streamed.
      'POST /threads/{id}/runs/{id}/submit_tool_outputs (streamed)': async () => {
        const { path, body } = await waitingForOutput();
        return streamed(path, body);
      },
      // The run after that exchange, on the same thread: the answer after the output handed back.
      'POST /threads/{id}/runs (streamed, after a tool exchange)': async () => {
        const { path, body, threadId } = await waitingForOutput();
        await readStream(
          await fetch(api(path), { method: 'POST', headers, body: JSON.stringify(body) }),
          () => undefined,
        );
        await post(api(`/threads/${threadId}/messages`), headers, { role: 'user', content });
        return streamed(`/threads/${threadId}/runs`, { assistant_id: assistant.id, stream: true });
      },
      'POST /responses (streamed)': () =>
        streamed('/responses', { model: 'bench-model', stream: true, input: content }),
      'POST /responses (streamed, previous_response_id)': async () => {
        const previous = (await post(api('/responses'), headers, { model: 'bench-model', input: content })) as {
          id: string;
        };
        return streamed('/responses', {
          model: 'bench-model',
          stream: true,
          input: content,
          previous_response_id: previous.id,
        });
      },
      // A chain this gateway does not know: its previous response was made in the background, whose
      // answer is not handed back (as one another gateway or isolate made), so it is read.
      'POST /responses (streamed, previous_response_id not known here)': async () => {
        const previous = await inBackground({});
        return streamed('/responses', {
          model: 'bench-model',
          stream: true,
          input: content,
          previous_response_id: previous,
        });
      },
      // The same after a tool exchange: a function called, then its output given, both in the background.
      'POST /responses (streamed, previous_response_id not known here, after a function call and its output)':
        async () => {
          const tools = [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} } }];
          const call = { tool_calls: [{ name: 'lookup', arguments: {}, id: 'call_bench' }] };
          const called = await inBackground({ input: `look it up\n${fakeDirective(call)}`, tools });
          const output = { type: 'function_call_output', call_id: 'call_bench', output: 'found' };
          const answered = await inBackground({ input: [output], tools, previous_response_id: called });
          return streamed('/responses', {
            model: 'bench-model',
            stream: true,
            input: content,
            previous_response_id: answered,
          });
        },
      // An agent's tool loop: a response that called a function (answered whole, so handed back),
      // then the response that gives its output, the call known here.
      'POST /responses (streamed, a function call known here given its output)': async () => {
        const tools = [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} } }];
        // The model's second turn (the output given) answers as every other kind's does.
        const turns = [{ tool_calls: [{ name: 'lookup', arguments: {}, id: 'call_bench' }] }, ANSWER];
        const called = (await post(api('/responses'), headers, {
          model: 'bench-model',
          input: `look it up\n${fakeDirective(turns)}`,
          tools,
        })) as { id: string };
        const output = { type: 'function_call_output', call_id: 'call_bench', output: 'found' };
        return streamed('/responses', {
          model: 'bench-model',
          stream: true,
          input: [output],
          tools,
          previous_response_id: called.id,
        });
      },
      // The same for a conversation whose last response was made in the background.
      'POST /responses (streamed, conversation not known here)': async () => {
        const conversation = (await post(api('/conversations'), headers, {})) as { id: string };
        await inBackground({ conversation: conversation.id });
        return streamed('/responses', {
          model: 'bench-model',
          stream: true,
          input: content,
          conversation: conversation.id,
        });
      },
      // A conversation that has had a response: the chat app's every turn after the first.
      'POST /responses (streamed, conversation)': async () => {
        const conversation = (await post(api('/conversations'), headers, {})) as { id: string };
        const turn = { model: 'bench-model', input: content, conversation: conversation.id };
        await post(api('/responses'), headers, turn);
        return streamed('/responses', { ...turn, stream: true });
      },
      'POST /chat/completions (streamed)': () =>
        streamed('/chat/completions', { model: 'bench-model', stream: true, messages: [{ role: 'user', content }] }),
      'GET /assistants/{id}': () => counted(async () => (await fetchJson(`/assistants/${assistant.id}`), {})),
      'GET /threads/{id}': () => counted(async () => (await fetchJson(`/threads/${thread.id}`), {})),
      'POST /threads/{id}/messages': () =>
        counted(async () => (await posted(`/threads/${thread.id}/messages`, { role: 'user', content: 'more' }), {})),
      'POST /threads': () =>
        counted(async () => (await posted('/threads', { messages: [{ role: 'user', content }] }), {})),
      'POST /threads/{id} (metadata)': () =>
        counted(async () => (await posted(`/threads/${thread.id}`, { metadata: { at: String(Date.now()) } }), {})),
      'POST /conversations': () =>
        counted(
          async () => (await posted('/conversations', { items: [{ type: 'message', role: 'user', content }] }), {}),
        ),
      'POST /conversations/{id}/items': () =>
        counted(
          async () => (
            await posted(`/conversations/${conversation.id}/items`, {
              items: [{ type: 'message', role: 'user', content: 'more' }],
            }),
            {}
          ),
        ),
      'DELETE /threads/{id}': async () => {
        const made = (await posted('/threads', {})) as { id: string };
        return counted(async () => (await fetchJson(`/threads/${made.id}`, { method: 'DELETE' }), {}));
      },
      'DELETE /conversations/{id}': async () => {
        const made = (await posted('/conversations', {})) as { id: string };
        return counted(async () => (await fetchJson(`/conversations/${made.id}`, { method: 'DELETE' }), {}));
      },
      'GET /threads/{id}/messages': () => counted(async () => (await fetchJson(`/threads/${thread.id}/messages`), {})),
      'GET /threads/{id}/messages?after= (the next page)': async () => {
        const [first] = ((await fetchJson(`/threads/${thread.id}/messages?limit=1`)) as { data: { id: string }[] })
          .data;
        return counted(async () => (await fetchJson(`/threads/${thread.id}/messages?limit=1&after=${first?.id}`), {}));
      },
      'GET /conversations/{id}/items': () =>
        counted(async () => (await fetchJson(`/conversations/${conversation.id}/items`), {})),
      'GET /conversations/{id}/items?after= (the next page)': async () => {
        const items = ['one', 'two'].map((text) => ({ type: 'message', role: 'user', content: text }));
        const made = (await posted('/conversations', { items })) as { id: string };
        const page = (await fetchJson(`/conversations/${made.id}/items?limit=1`)) as { data: { id: string }[] };
        const after = `/conversations/${made.id}/items?limit=1&after=${page.data[0]?.id}`;
        return counted(async () => (await fetchJson(after), {}));
      },
      'POST /vector_stores': () => counted(async () => (await posted('/vector_stores', { name: 'bench' }), {})),
      'GET /policies/rate-limits': () => counted(async () => (await fetchJson('/policies/rate-limits'), {})),
      'GET /models': () => counted(async () => (await fetchJson('/models'), {})),
      'GET /threads/{id}/runs/{id}/steps': () =>
        counted(async () => (await fetchJson(`/threads/${done.thread_id}/runs/${done.id}/steps`), {})),
      'GET /responses/{id}': () => counted(async () => (await fetchJson(`/responses/${answered.id}`), {})),
      'SDK turn (message, streamed run, list)': async () => {
        const turn = await client.beta.threads.create();
        return counted(async () => {
          await client.beta.threads.messages.create(turn.id, { role: 'user', content });
          const run = client.beta.threads.runs.stream(turn.id, { assistant_id: assistant.id });
          await run.finalRun();
          await client.beta.threads.messages.list(turn.id);
          return {};
        });
      },
    };

    const byDelay: Record<string, unknown> = {};
    for (const delayMs of DELAYS) {
      proxy.delayMs = delayMs;
      const providerFirst: number[] = [];
      for (let i = 0; i < REPEATS; i++) providerFirst.push(await providerFirstToken(fakeUrl));
      const providerP50 = summarise(providerFirst).p50_ms;
      const rows: Record<string, unknown> = {};
      for (const [kind, run] of Object.entries(kinds)) {
        if (KINDS && !KINDS.test(kind)) continue;
        await run(); // a warm-up: caches filled, connections open
        const samples: Sample[] = [];
        for (let i = 0; i < REPEATS; i++) samples.push(await run());
        rows[kind] = summary(samples, providerP50);
      }
      byDelay[`db_delay_${delayMs}ms`] = { provider_first_token_p50_ms: providerP50, requests: rows };
    }
    return byDelay;
  } finally {
    await gateway.stop();
    await proxy.close();
  }
}

function summary(samples: Sample[], providerFirstTokenMs: number) {
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;
  const firsts = samples.flatMap((sample) => (sample.firstTokenMs === undefined ? [] : [sample.firstTokenMs]));
  const before = samples.flatMap((sample) => (sample.beforeFirstToken === undefined ? [] : [sample.beforeFirstToken]));
  return {
    round_trips: median(samples.map((sample) => sample.roundTrips)),
    round_trips_range: [
      Math.min(...samples.map((sample) => sample.roundTrips)),
      Math.max(...samples.map((sample) => sample.roundTrips)),
    ],
    wall_ms_p50: round(median(samples.map((sample) => sample.wallMs)), 1),
    ...(SHOW_STATEMENTS && { statements_of_the_last: samples.at(-1)?.statements }),
    ...(firsts.length > 0 && {
      round_trips_before_first_token: median(before),
      first_token_ms_p50: round(median(firsts), 1),
      first_token_added_ms_p50: round(median(firsts) - providerFirstTokenMs, 1),
    }),
  };
}

const { url: fakeUrl } = await startFakeProvider();
const result: Record<string, unknown> = {
  benchmark: 'round-trips',
  setup:
    'client (this process) -> gateway -> proxy (holds each database request the delay, counts it) -> sqld; ' +
    `fake provider in its own process; ${REPEATS} of each request one after another, medians`,
  provider_first_byte_ms: PROVIDER_FIRST_BYTE_MS,
};
for (const name of TARGETS) result[name] = await measureTarget(name, fakeUrl);
console.log(JSON.stringify(result, null, 2));
process.exit(0);
