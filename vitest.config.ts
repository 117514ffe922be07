import { availableParallelism } from 'node:os';
import { dirname } from 'node:path';
import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { configDefaults, defineConfig } from 'vitest/config';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';

/**
 * Three projects: `node` (the app in-process on libSQL files, the CLI, the server) and `workers`
 * (the Worker entry inside workerd against a local sqld; test/support/workers-global-setup.ts), which `npm test`
 * runs, and `reliability` (crashes, faults, load, rate limits across processes, the Node server's
 * timeouts: real processes and the real clock), which `npm run test:reliability` runs.
 */

/**
 * Messages that a green run would print and that say nothing about the gateway, dropped so that a
 * green run prints no stack and no warning (anything else is printed):
 * - workerd reports, with a native stack, disconnections that these tests cause on purpose or that
 *   the pool causes as it ends: a client leaving a streamed run (abortRead), a request body the
 *   gateway refused before the client had sent it all (the read end of its pipe aborted), the
 *   pool's own socket closing (WebSocket peer disconnected), and a provider dropping the connection
 *   a call went out on (the dropping fake of test/workers/runs-and-rate-limits.test.ts: the stream disconnected
 *   prematurely, the connection reset by peer, and as an uncaught rejection besides the one the
 *   gateway handles, Network connection lost);
 * - the OpenAI SDK, run inside workerd by the tests, probes whether fetch supports FormData by
 *   reading an empty form as text, which workerd warns about;
 * - vite warns that multitars (the multipart parser) ships a source map without its sources.
 */
const EXPECTED_NOISE = [
  /^exception = \S+: disconnected: (abortRead\(\) has been called|read end of pipe was aborted|WebSocket peer disconnected|stream disconnected prematurely|::read\(fd, buffer, maxBytes\): Connection reset by peer)\n/,
  /^uncaught exception; (source = Uncaught \(in promise\); stack = Error|exception = \S+: disconnected: jsg\.Error): Network connection lost\.\n/,
  /^console warning; message = Called \.text\(\) on an HTTP body which does not appear to be text\. The body's Content-Type is "multipart\/form-data; boundary=[0-9a-f-]+"\./,
  /^Sourcemap for "[^"]*\/node_modules\/multitars\/dist\/multitars\.mjs" points to missing source files\n/,
];
for (const stream of [process.stdout, process.stderr]) {
  const print = stream.write.bind(stream);
  stream.write = (chunk: string | Uint8Array, ...rest: unknown[]): boolean =>
    typeof chunk === 'string' && EXPECTED_NOISE.some((noise) => noise.test(chunk))
      ? true
      : Reflect.apply(print, stream, [chunk, ...rest]);
}

const timeouts = {
  // Tests spawn servers and CLIs; a slow CI machine should not turn that into flakes. On this
  // machine shared by five suites (load 15 to 19 on 2 cores), a Python SDK run and a gateway
  // process's start took over 30 s.
  testTimeout: 60_000,
  hookTimeout: 60_000,
};

export default defineConfig({
  test: {
    // Most tests wait on sockets, databases and child processes: one worker more than the cores
    // keeps both busy (vitest's default leaves one core idle).
    maxWorkers: availableParallelism() + 1,
    projects: [
      {
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          globalSetup: ['test/support/build-node.ts'],
          setupFiles: ['test/support/same-bytes.ts'],
          exclude: [...configDefaults.exclude, 'test/workers/**', 'test/reliability/**'],
          // The files of a worker share one module graph instead of importing the app afresh each
          // (two thirds of the suite's time was imports): every file builds its own gateways,
          // databases and fakes, and restores what it changes of the process (the environment).
          isolate: false,
          ...timeouts,
        },
      },
      {
        // Minutes, not seconds: kill -9 rounds and a load minute. `npm run test:reliability` only.
        test: {
          name: 'reliability',
          include: ['test/reliability/**/*.test.ts'],
          // One file at a time: they measure stalls, latency and memory on a machine of a few cores,
          // and the load minute beside another suite starved its fake provider (thousands of runs
          // failed 'no first byte within 3000 ms') and the Node server's tests of their answers.
          fileParallelism: false,
          globalSetup: ['test/support/build-node.ts'],
          testTimeout: 300_000,
          hookTimeout: 60_000,
        },
      },
      {
        plugins: [
          cloudflareTest(({ inject }) => {
            // These win over wrangler.toml [vars] and over a developer's .dev.vars, which the
            // pool also reads.
            const bindings = {
              LIBSQL_URL: inject('databaseProxyUrl'),
              LIBSQL_AUTH_TOKEN: '',
              GATEWAY_ENCRYPTION_KEY: inject('encryptionKey'),
              LOG_LEVEL: 'warn',
              GATEWAY_MAX_BODY_BYTES: '2048',
              // The fake upstream listens on loopback.
              GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
              GATEWAY_RATE_LIMIT_STORE: 'durable-object',
              // Isolates hand their metrics to the aggregate a tenth of a second apart, not ten
              // (test/workers/metrics.test.ts waits for a run's figures to arrive).
              GATEWAY_METRICS_HANDOFF_MS: '100',
              // Every file's runs take turns at two executor objects (run-host.ts), many at once.
              GATEWAY_RUN_EXECUTORS: '2',
              // The search store of global-setup.ts (3 chunks) gets a vector index on the cron.
              GATEWAY_VECTOR_INDEX_MIN_CHUNKS: '3',
              // `gateway sandbox` of global-setup.ts, where this host has one: code_interpreter in
              // workerd calls it, as a deployed Worker calls its remote sandbox.
              ...sandboxBindings(inject('sandboxServer')),
            };
            return {
              wrangler: { configPath: './wrangler.toml' },
              // Never reach Cloudflare: everything the tests need is local.
              remoteBindings: false,
              miniflare: { bindings, workers: [ingestWorker(inject('ingestWorkerScript'), bindings)] },
            };
          }),
        ],
        test: {
          name: 'workers',
          include: ['test/workers/**/*.test.ts'],
          globalSetup: ['./test/support/workers-global-setup.ts'],
          setupFiles: ['./test/support/same-bytes.ts'],
          // As in the node project, the files of a worker share its module graph: isolated, each
          // file imported the Worker and its dependencies afresh inside workerd, and the project
          // took 215 s instead of 73 s on a loaded machine. Each file makes its own tenants, threads
          // and stores in the shared sqld, and the Durable Objects are keyed by what it made.
          isolate: false,
          ...timeouts,
        },
      },
    ],
  },
});

/** The Worker's remote sandbox, the one served on this host; none (code_interpreter off) where it has none. */
function sandboxBindings(served: { url: string; secret: string } | null): Record<string, string> {
  return served ? { GATEWAY_SANDBOX_URL: served.url, GATEWAY_SANDBOX_SECRET: served.secret } : {};
}

/**
 * The ingest Worker beside the gateway under test, in the same workerd: its bindings as
 * wrangler.ingest.toml declares them (the queue it consumes and the gateway produces to, the
 * bucket, the gateway's rate-limit counters and metrics aggregate), its code the bundle that `wrangler deploy` would
 * upload (built by test/support/workers-global-setup.ts). The gateway is the pool's runner Worker here, named after
 * the project, so the counters' script_name is that name.
 */
function ingestWorker(scriptPath: string, bindings: Record<string, string>) {
  const { workerOptions } = unstable_getMiniflareWorkerOptions('wrangler.ingest.toml');
  return {
    ...workerOptions,
    name: 'assistants-gateway-ingest',
    modules: true,
    scriptPath,
    // The bundle is in a temporary directory, outside the project that module paths are relative to.
    modulesRoot: dirname(scriptPath),
    bindings: { ...workerOptions.bindings, ...bindings },
    durableObjects: {
      RATE_LIMIT_COUNTER: { className: 'RateLimitCounter', scriptName: 'vitest-pool-workers-runner-workers' },
      METRICS: { className: 'MetricsAggregate', scriptName: 'vitest-pool-workers-runner-workers' },
    },
  };
}
