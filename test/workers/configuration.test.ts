import { createExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, inject, it, vi } from 'vitest';
import worker from '../../src/worker';
import { ConfigurationError } from '../../src/config';
import { createSharedDeps } from '../../src/runtime/workers/deps';
import { unservedMetrics } from '../../src/metrics/gateway';
import { errorOf } from '../support/envelope';

/**
 * A Worker deployed without the configuration it cannot serve without says so, on every path and
 * on /health, instead of "Ready" and a generic 500: the entry called with bindings that lack it.
 */

/** The entry's answer under `bindings`; its start-up failure is logged at their LOG_LEVEL, silent here. */
const call = (path: string, bindings: typeof env) =>
  worker.fetch(new Request(`http://gateway${path}`), { ...bindings, LOG_LEVEL: 'silent' }, createExecutionContext());

describe('a Worker missing required configuration', () => {
  it('answers /health with 503 misconfigured, naming the missing GATEWAY_ENCRYPTION_KEY', async () => {
    const response = await call('/health', { ...env, GATEWAY_ENCRYPTION_KEY: undefined });
    expect(response.status).toBe(503);
    const body = await response.json<{ status: string; message: string }>();
    expect(body).toEqual({ status: 'misconfigured', message: expect.stringContaining('GATEWAY_ENCRYPTION_KEY') });
    expect(body.message).not.toContain('LIBSQL_URL');
  });

  it('answers the API with 503 gateway_misconfigured, naming each missing variable', async () => {
    const error = await errorOf(
      await call('/v1/assistants', { ...env, LIBSQL_URL: undefined, GATEWAY_ENCRYPTION_KEY: '' }),
    );
    expect(error).toMatchObject({ status: 503, code: 'gateway_misconfigured', type: 'server_error' });
    expect(error.message).toContain('LIBSQL_URL');
    expect(error.message).toContain('GATEWAY_ENCRYPTION_KEY');
  });

  it('refuses a WebSocket LIBSQL_URL at start, asking for its HTTP URL', async () => {
    // The isolate's deps, as the entry builds them (which keeps the first app it built, perhaps another test file's).
    await expect(
      createSharedDeps({ ...env, LIBSQL_URL: 'wss://db.example.com' }, () => unservedMetrics),
    ).rejects.toThrow(
      new ConfigurationError(
        "LIBSQL_URL is a WebSocket URL (wss://…): on Workers, give the database's libsql://, https:// or http:// URL.",
      ),
    );
  });

  it('serves as usual with its configuration', async () => {
    const response = await call('/health', env);
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: 'ok' });
    // code_interpreter is on where this host serves the sandbox the bindings name (vitest.config.ts),
    // once the Worker has asked it (sandbox/kept-availability.ts); off where there is none.
    const sandbox = inject('sandboxServer') !== null;
    await vi.waitFor(
      async () =>
        expect(await (await call('/health', env)).json()).toEqual({ status: 'ok', code_interpreter: sandbox }),
      { timeout: 30_000, interval: 100 },
    );
  });
});
