import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { App } from '../../src/app';
import type { Config } from '../../src/config';
import { migrateDatabase, openDatabase, type NodeDatabase } from '../../src/db/node';
import type { Deps } from '../../src/deps';
import type { TaskTracker } from '../../src/runtime/node/tasks';
import { createLogger } from '../../src/logger';
import { nodeConfig } from '../../src/runtime/node/config';
import { createNodeApp, type NodeApp } from '../../src/runtime/node/app';
import { createNodeDeps } from '../../src/runtime/node/deps';
import type { ChunkerEntry } from '../../src/runtime/node/chunker-pool';
import { ROOT } from './processes';
import { listen } from '../../src/runtime/node/server';
import { createApiKey } from '../../src/resources/identities/api-keys';
import { createWorkspace } from '../../src/resources/identities/workspaces';
import { createVirtualKey } from '../../src/resources/virtual-keys/commands';
import type { CreateVirtualKeyBody } from '../../src/resources/virtual-keys/schemas';
import OpenAI from 'openai';
import { organisations } from '../../src/db/schema';
import { newUuid } from '../../src/lib/ids';

/**
 * The real app in-process on a real libSQL file with the real migrations. One gateway per test
 * file; tests keep out of each other's way by creating their own tenants with `tenant()`.
 */

/**
 * The chunker processes run dist/'s compiled chunker, which the suite's global setup builds
 * (test/support/build-node.ts), as `npm start`'s do: from src/, each would compile it under tsx.
 */
const BUILT_CHUNKER: ChunkerEntry = { path: join(ROOT, 'dist', 'chunker-process.js'), execArgv: [] };

/** A clock that runs with real time plus an offset the test controls. */
export interface TestClock {
  now(): number;
  advance(ms: number): void;
  /** Moves to an absolute time (ms since the epoch); time keeps flowing from there. */
  set(ms: number): void;
}

export function testClock(): TestClock {
  let offset = 0;
  return {
    now: () => Date.now() + offset,
    advance: (ms) => {
      offset += ms;
    },
    set: (ms) => {
      offset = ms - Date.now();
    },
  };
}

export interface TestGateway {
  /** The app in-process, each request handed the ExecutionContext the Node server hands it. */
  app: Pick<App, 'routes'> & Pick<NodeApp, 'request'>;
  deps: Deps;
  database: NodeDatabase;
  dataDir: string;
  clock: TestClock;
  tasks: TaskTracker;
  /** Every log line written, to assert on (and to scan for secrets). */
  logs: string[];
  request(path: string, init?: RequestOptions): Promise<Response>;
  tenant(options?: { organisationId?: string; slug?: string }): Promise<Tenant>;
  /** Stores a virtual key of the tenant's workspace (through the service); answers its slug. */
  virtualKey(tenant: Tenant, body: Partial<CreateVirtualKeyBody> & { base_url: string }): Promise<string>;
  /**
   * The official OpenAI SDK pointed at this app in-process, with the given default headers (the
   * `x-gateway-*` ones), no retries, and fast polling.
   */
  openai(headers: Record<string, string>): OpenAI;
  close(): Promise<void>;
}

export interface RequestOptions {
  method?: string;
  /** Sent as x-gateway-api-key. */
  key?: string;
  /** JSON-encoded unless a string. */
  body?: unknown;
  headers?: Record<string, string>;
}

export interface Tenant {
  organisationId: string;
  workspace: { id: string; slug: string };
  /** A workspace key of `workspace`. */
  workspaceKey: string;
  workspaceKeyId: string;
  /** An organisation key of the organisation. */
  orgKey: string;
  orgKeyId: string;
}

export async function createTestGateway(
  options: { env?: Record<string, string>; deps?: Partial<Deps> } = {},
): Promise<TestGateway> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gateway-test-'));
  const config: Config = nodeConfig({
    DATA_DIR: dataDir,
    LOG_LEVEL: 'info',
    // Tests hold many workspaces on one database and an upstream on loopback (the fake): what an
    // admin allows explicitly. `GATEWAY_ALLOW_PRIVATE_UPSTREAMS: ''` gives the default (unset).
    GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true',
    ...options.env,
  });
  const database = await openDatabase(config);
  await migrateDatabase(database.db);
  const clock = testClock();
  const logs: string[] = [];
  const deps = await createNodeDeps(
    config,
    database,
    { now: clock.now, log: createLogger(config.LOG_LEVEL, (line) => logs.push(line)), ...options.deps },
    BUILT_CHUNKER,
  );
  const { app: hono, request: appRequest, tasks } = createNodeApp(deps);
  const app = { routes: hono.routes, request: appRequest };

  const request = (path: string, init: RequestOptions = {}) => {
    const headers: Record<string, string> = { ...init.headers };
    if (init.key !== undefined) headers['x-gateway-api-key'] = init.key;
    let body: string | undefined;
    if (init.body !== undefined) {
      body = typeof init.body === 'string' ? init.body : JSON.stringify(init.body);
      headers['content-type'] ??= 'application/json';
    }
    return app.request(path, { method: init.method ?? (body ? 'POST' : 'GET'), headers, body });
  };

  const tenant = async (tenantOptions: { organisationId?: string; slug?: string } = {}): Promise<Tenant> => {
    const now = clock.now();
    let organisationId = tenantOptions.organisationId;
    if (!organisationId) {
      organisationId = newUuid();
      await database.db.insert(organisations).values({ id: organisationId, name: 'test', createdAt: now });
    }
    const workspace = await createWorkspace(database.db, {
      organisationId,
      slug: tenantOptions.slug ?? `ws-${newUuid().slice(0, 8)}`,
      now,
    });
    const workspaceKey = await createApiKey(database.db, {
      kind: 'workspace',
      organisationId,
      workspaceId: workspace.id,
      name: 'test',
      now,
    });
    const orgKey = await createApiKey(database.db, {
      kind: 'organisation',
      organisationId,
      workspaceId: null,
      name: 'test',
      now,
    });
    return {
      organisationId,
      workspace: { id: workspace.id, slug: workspace.slug },
      workspaceKey: workspaceKey.plaintext,
      workspaceKeyId: workspaceKey.record.id,
      orgKey: orgKey.plaintext,
      orgKeyId: orgKey.record.id,
    };
  };

  let virtualKeys = 0;
  const virtualKey = async (owner: Tenant, body: Partial<CreateVirtualKeyBody> & { base_url: string }) => {
    const key = await createVirtualKey(database.db, deps.secrets, {
      workspaceId: owner.workspace.id,
      body: { slug: `vk-${++virtualKeys}`, provider: 'openai', api_key: 'sk-test-provider-key', ...body },
      upstreamRules: { allowPrivate: true },
      maxKeys: deps.config.GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE,
      now: clock.now(),
    });
    return key.slug;
  };

  const openai = (headers: Record<string, string>) =>
    new OpenAI({
      apiKey: 'unused-by-the-gateway',
      baseURL: 'http://gateway.test/v1',
      defaultHeaders: headers,
      maxRetries: 0,
      fetch: (url, init) => app.request(String(url), init),
    });

  return {
    app,
    deps,
    database,
    dataDir,
    clock,
    tasks,
    logs,
    request,
    tenant,
    virtualKey,
    openai,
    async close() {
      await tasks.drain(10_000);
      await deps.sandbox.close();
      // As the server's close does (runtime/node/start.ts): the refusals not written yet.
      await deps.counters.flush();
      database.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export { errorOf, json } from './envelope';

/**
 * The app's API routes, read from the app itself so that a test over "every route" covers a new
 * one without being told: each `/v1` method and path once (middleware's ALL and wildcards left
 * out), in a stable order, path parameters as `:name`.
 */
export function apiRoutes(app: Pick<App, 'routes'>): { method: string; path: string }[] {
  const seen = new Map<string, { method: string; path: string }>();
  for (const { method, path } of app.routes) {
    if (!path.startsWith('/v1/') || method === 'ALL' || path.includes('*')) continue;
    seen.set(`${method} ${path}`, { method, path });
  }
  return [...seen.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, route]) => route);
}

/** `gateway` served over real HTTP as `npm start` serves it (runtime/node/server.ts), on a free loopback port. */
export async function serveOverHttp(gateway: TestGateway): Promise<{ url: string; close(): Promise<void> }> {
  const { server, url } = await listen((request) => gateway.app.request(request), {
    ...gateway.deps.config,
    HOST: '127.0.0.1',
    PORT: 0,
  });
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      if ('closeAllConnections' in server) server.closeAllConnections();
    });
  return { url, close };
}

/** The official SDK as an application configures it, a base URL and the tenant's workspace key, over `gateway` in process. */
export function sdkClient(gateway: TestGateway, tenant: Tenant): OpenAI {
  return new OpenAI({
    apiKey: tenant.workspaceKey,
    baseURL: 'http://gateway.test/v1',
    maxRetries: 0,
    fetch: (url, init) => gateway.app.request(String(url), init),
  });
}

/**
 * A gateway whose provider calls go to `fetch` (an in-process fake's, e.g. createFakeUpstream()'s),
 * a tenant whose default virtual key names that provider (http://fake.test/v1), and the official
 * SDK with the tenant's workspace key; `env` as createTestGateway takes it.
 */
export async function gatewayWithDefaultKey(
  fetch: Deps['fetch'],
  env?: Record<string, string>,
): Promise<{ gateway: TestGateway; tenant: Tenant; client: OpenAI }> {
  const gateway = await createTestGateway({ env, deps: { fetch } });
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  return { gateway, tenant, client: gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey }) };
}
