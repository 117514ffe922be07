import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Three projects: `node` (the app in-process on libSQL files, the CLI, the server) and `workers`
 * (the Worker entry inside workerd against a local sqld; test/global-setup.ts), which `npm test`
 * runs, and `reliability` (crashes, faults, load, rate limits across processes, the Node server's
 * timeouts: real processes and the real clock), which `npm run test:reliability` runs.
 */

const timeouts = {
  // Tests spawn servers and CLIs; a slow CI machine should not turn that into flakes.
  testTimeout: 30_000,
  hookTimeout: 30_000,
};

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, 'test/workers/**', 'test/reliability/**'],
          ...timeouts,
        },
      },
      {
        // Minutes, not seconds: kill -9 rounds and a load minute. `npm run test:reliability` only.
        test: {
          name: 'reliability',
          include: ['test/reliability/**/*.test.ts'],
          testTimeout: 300_000,
          hookTimeout: 60_000,
        },
      },
      {
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: './wrangler.toml' },
            // Never reach Cloudflare: everything the tests need is local.
            remoteBindings: false,
            miniflare: {
              // These win over wrangler.toml [vars] and over a developer's .dev.vars, which the
              // pool also reads.
              bindings: {
                LIBSQL_URL: inject('sqldUrl'),
                LIBSQL_AUTH_TOKEN: '',
                GATEWAY_ENCRYPTION_KEY: inject('encryptionKey'),
                LOG_LEVEL: 'warn',
                GATEWAY_MAX_BODY_BYTES: '2048',
                // The fake upstream listens on loopback.
                GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
                GATEWAY_RATE_LIMIT_STORE: 'durable-object',
              },
            },
          })),
        ],
        test: {
          name: 'workers',
          include: ['test/workers/**/*.test.ts'],
          globalSetup: ['./test/global-setup.ts'],
          ...timeouts,
        },
      },
    ],
  },
});
