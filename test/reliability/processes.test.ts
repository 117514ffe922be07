import { defined } from '../support/defined';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startSqld } from '../../scripts/sqld';
import { migrateDatabase, openDatabase } from '../../src/db/node';
import { organisations } from '../../src/db/schema';
import { newUuid } from '../../src/lib/ids';
import { createLogger } from '../../src/logger';
import { nodeConfig } from '../../src/runtime/node/config';
import { createNodeDeps } from '../../src/runtime/node/deps';
import { admitRequest } from '../../src/ratelimit';
import type { CreatePolicyBody } from '../../src/resources/policies/schemas';
import { createPolicy as createPolicyRow } from '../../src/resources/policies/queries';
import { workspaceCaps } from '../../src/resources/identities/quotas';
import { createWorkspace } from '../../src/resources/identities/workspaces';
import { fakeThread, startFakeUpstream, type FakeUpstreamServer } from '../support/fake-upstream';
import { createTestGateway, type Tenant, type TestGateway } from '../support/gateway';
import { startGatewayProcess, startRatelimitWorker, type GatewayProcess } from '../support/processes';
import * as ratelimit from '../support/ratelimit';

/**
 * Rate limits across processes: gateway processes sharing one database file (both admitting over
 * real run traffic, one killed and restarted), a second process admitting or writing a policy
 * beside an in-process gateway, and two gateways on a libSQL server. Each starts processes, and
 * the run traffic follows the real clock: they are here rather than in npm test, whose
 * rate-limit suites (test/ratelimit-*.test.ts) hold the same rules in one process.
 */

const { POLICIES, expectRefused, rowsOf, NO_RESERVATION, refusal, requestAttributes: attributes } = ratelimit;

describe('over run traffic', () => {
  let fake: FakeUpstreamServer;
  beforeAll(async () => {
    fake = await startFakeUpstream();
  });
  afterAll(() => fake.close());
  beforeEach(() => fake.reset());

  const chatRequests = () => fake.requests.filter((request) => request.path.endsWith('/chat/completions'));

  it('stays exact over two gateway processes on one database file, both admitting', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gateway-ratelimit-runs-'));
    const processes: GatewayProcess[] = [];
    try {
      processes.push(await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' }));
      const first = defined(processes[0]);
      await expect
        .poll(() => /workspace API key\s+(gk_\S+)/.exec(first.stdout())?.[1], { timeout: 5_000 })
        .toBeDefined();
      const key = defined(defined(/workspace API key\s+(gk_\S+)/.exec(first.stdout()))[1]);
      processes.push(await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' }));
      const urls = processes.map((started) => started.url);

      const headers = { 'x-gateway-api-key': key, 'content-type': 'application/json', 'x-gateway-virtual-key': 'fake' };
      const post = (url: string, path: string, body: unknown) =>
        fetch(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
      expect(
        (
          await post(defined(urls[0]), '/v1/virtual-keys', {
            slug: 'fake',
            provider: 'openai',
            base_url: fake.baseURL,
            api_key: 'sk-x',
          })
        ).status,
      ).toBe(200);
      const assistant = (await (await post(defined(urls[0]), '/v1/assistants', { model: 'fake-model' })).json()) as {
        id: string;
      };
      const run = (url: string, i: number) =>
        post(url, '/v1/threads/runs', { assistant_id: assistant.id, thread: fakeThread(`Run ${i}`) });
      // Both processes warm (connections, prepared statements) before the policy exists.
      for (const url of urls) expect((await run(url, -1)).status).toBe(200);
      await expect.poll(() => chatRequests().length).toBe(2);
      const warmed = fake.requests.length;
      const policyResponse = await post(defined(urls[1]), POLICIES, {
        conditions: [{ key: 'model', value: '*' }],
        group_by: [{ key: 'workspace_id' }],
        type: 'requests',
        unit: 'rpm',
        value: 50,
      });
      expect(policyResponse.status).toBe(200);
      const policy = ((await policyResponse.json()) as { id: string }).id;

      // The processes use the real clock: keep the burst inside one minute.
      const intoMinute = Date.now() % 60_000;
      if (intoMinute > 45_000) await new Promise((resolve) => setTimeout(resolve, 60_500 - intoMinute));
      // Requests alternate between the processes. SQLite hands the write lock to whichever process
      // asks first, and a process commits all its waiting admissions at once, so one process could
      // take all 50 before the other reaches the database. A first wave of 20 (10 each), all
      // within the limit, makes sure both admit; then the other 180 go at once, and both
      // processes race for the last 30 places.
      const firstWave = await Promise.all(Array.from({ length: 20 }, (_, i) => run(defined(urls[i % 2]), i)));
      const rest = await Promise.all(Array.from({ length: 180 }, (_, i) => run(defined(urls[i % 2]), 20 + i)));
      const responses = [...firstWave, ...rest];
      expect(firstWave.map((response) => response.status)).toEqual(Array(20).fill(200));
      const admittedBy = [0, 1].map(
        (p) => responses.filter((response, i) => i % 2 === p && response.status === 200).length,
      );
      const refused = responses.filter((response) => response.status !== 200);
      expect(defined(admittedBy[0]) + defined(admittedBy[1])).toBe(50);
      expect(admittedBy[0]).toBeGreaterThanOrEqual(10);
      expect(admittedBy[1]).toBeGreaterThanOrEqual(10);
      expect(refused).toHaveLength(150);
      // Each admission saw the count the one before it left, whichever process made it: the
      // admitted answers show every remaining count from 49 down to 0 exactly once.
      const remaining = responses
        .filter((response) => response.status === 200)
        .map((response) => Number(response.headers.get('x-ratelimit-remaining-requests')));
      expect(remaining.sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i));
      for (const response of refused) await expectRefused(response, 'requests');

      await expect.poll(() => chatRequests().length - 2, { timeout: 20_000 }).toBe(50);
      await fake.waitForIdle(5_000);
      const database = await openDatabase({ DATA_DIR: dataDir });
      try {
        const { rows } = await database.client.execute('SELECT id FROM workspaces');
        const workspaceId = defined(rows[0]).id as string;
        expect(await ratelimit.usedBy(database.client, policy)).toBe(50);
        // 50 admitted runs and the 2 warm-up ones, each with its user message (and an answer).
        expect(await rowsOf(database.client, workspaceId)).toMatchObject({ threads: 52, runs: 52 });
        const { rows: users } = await database.client.execute({
          sql: "SELECT count(*) AS n FROM messages WHERE workspace_id = ? AND role = 'user'",
          args: [workspaceId],
        });
        expect(Number(defined(users[0]).n)).toBe(52);
      } finally {
        database.close();
      }
      expect(fake.requests.length - warmed).toBe(50);
    } finally {
      for (const started of processes) await started.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  describe('counters across a crash', () => {
    it('keeps what a killed gateway admitted: its restart refuses what would exceed the limit', async () => {
      const dataDir = mkdtempSync(join(tmpdir(), 'gateway-ratelimit-restart-'));
      let started: GatewayProcess | undefined;
      try {
        started = await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
        await expect
          .poll(() => /workspace API key\s+(gk_\S+)/.exec(defined(started).stdout())?.[1], { timeout: 5_000 })
          .toBeDefined();
        const key = defined(defined(/workspace API key\s+(gk_\S+)/.exec(started.stdout()))[1]);
        const headers = {
          'x-gateway-api-key': key,
          'content-type': 'application/json',
          'x-gateway-virtual-key': 'fake',
        };
        const post = (path: string, body: unknown) =>
          fetch(`${defined(started).url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
        expect(
          (
            await post('/v1/virtual-keys', {
              slug: 'fake',
              provider: 'openai',
              base_url: fake.baseURL,
              api_key: 'sk-x',
            })
          ).status,
        ).toBe(200);
        const assistant = (await (await post('/v1/assistants', { model: 'fake-model' })).json()) as { id: string };
        // Per day, on the real clock: no window ends during the test (short of midnight UTC).
        const policy = await post(POLICIES, {
          conditions: [{ key: 'model', value: '*' }],
          group_by: [{ key: 'workspace_id' }],
          type: 'requests',
          unit: 'rpd',
          value: 2,
        });
        expect(policy.status).toBe(200);
        const run = () => post('/v1/threads/runs', { assistant_id: assistant.id, thread: fakeThread('Hi') });
        expect((await run()).status).toBe(200);
        expect((await run()).status).toBe(200);
        await expect.poll(() => chatRequests().length).toBe(2);

        expect(await started.stop('SIGKILL')).toBeNull();
        started = await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
        const refused = await run();
        const error = await expectRefused(refused, 'requests');
        expect(error.message).toContain('Limit 2, Used 2, Requested 1.');
        await fake.waitForIdle(5_000);
        expect(chatRequests()).toHaveLength(2);
      } finally {
        await started?.stop('SIGKILL');
        rmSync(dataDir, { recursive: true, force: true });
      }
    });
  });
});

describe('admission', () => {
  let now = Date.UTC(2030, 0, 1, 12, 0, 0);
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await createTestGateway({ deps: { now: () => now } });
  });
  afterAll(() => gateway.close());

  /** How policies written through the service, as another gateway would, are created. */
  const ROW_RULES = { createdBy: 'workspace' as const, caps: workspaceCaps(nodeConfig({})) };
  const at = (iso: string) => {
    now = Date.parse(iso);
  };
  const createPolicy = (tenant: Tenant, body: Record<string, unknown>) => ratelimit.createPolicy(gateway, tenant, body);
  const admit = (tenant: Tenant) => admitRequest(gateway.deps, attributes(tenant), NO_RESERVATION);
  const usedBy = (policyId: string) => ratelimit.usedBy(gateway.database.client, policyId);

  describe('exactness', () => {
    it('stays exact with two gateway processes on one database file', async () => {
      at('2030-03-01T10:00:05Z');
      const tenant = await gateway.tenant();
      const id = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 50 });
      const request = attributes(tenant);
      await gateway.deps.policyCache.get(tenant.workspace.id);
      const other = await startRatelimitWorker(gateway.dataDir, ['admit', JSON.stringify(request), '100', String(now)]);
      await other.line();
      other.send('go');
      const [here, there] = await Promise.all([
        Promise.allSettled(Array.from({ length: 100 }, () => admitRequest(gateway.deps, request, NO_RESERVATION))),
        other.line().then((line) => JSON.parse(line) as { admitted: number; refused: number }),
      ]);
      expect(await other.exit).toBe(0);
      const admittedHere = here.filter((o) => o.status === 'fulfilled').length;
      expect(admittedHere + there.admitted).toBe(50);
      expect(here.length - admittedHere + there.refused).toBe(150);
      expect(await usedBy(id)).toBe(50);
    });
  });

  describe('on a libSQL server', () => {
    it("stays exact with two gateways sharing it, and each sees the other's policy changes at once", async () => {
      at('2030-03-01T10:00:05Z');
      const sqld = await startSqld();
      const databases = [await openDatabase({ ...gateway.deps.config, LIBSQL_URL: sqld.url })];
      try {
        databases.push(await openDatabase({ ...gateway.deps.config, LIBSQL_URL: sqld.url }));
        await migrateDatabase(defined(databases[0]).db);
        const overrides = { now: () => now, log: createLogger('silent'), secrets: gateway.deps.secrets };
        const [one, two] = await Promise.all(
          databases.map((database) => createNodeDeps(gateway.deps.config, database, overrides)),
        );
        const organisationId = newUuid();
        await defined(one).db.insert(organisations).values({ id: organisationId, name: 'sqld', createdAt: now });
        const workspace = await createWorkspace(defined(one).db, { organisationId, slug: 'sqld', now });
        const scope = { organisationId, workspaceId: workspace.id };
        const body: CreatePolicyBody = {
          conditions: [{ key: 'model', value: '*' }],
          group_by: [{ key: 'workspace_id' }],
          type: 'requests',
          unit: 'rpm',
          value: 50,
        };
        const policy = await createPolicyRow(defined(one).db, scope, body, now, ROW_RULES);
        const request = { ...attributes(await gateway.tenant()), workspace_id: workspace.id };

        const outcomes = await Promise.allSettled(
          Array.from({ length: 200 }, (_, i) =>
            admitRequest(i % 2 ? defined(one) : defined(two), request, NO_RESERVATION),
          ),
        );
        expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(50);
        const { rows } = await defined(databases[0]).client.execute({
          sql: 'SELECT sum(used) AS used FROM rate_limit_counters WHERE key LIKE ?',
          args: [`${policy.id}/%`],
        });
        expect(defined(rows[0]).used).toBe(50);

        await createPolicyRow(
          defined(two).db,
          scope,
          { ...body, conditions: [{ key: 'model', value: 'gpt-4o' }], value: 1 },
          now,
          ROW_RULES,
        );
        at('2030-03-01T10:01:05Z');
        await admitRequest(defined(one), request, NO_RESERVATION);
        await refusal(admitRequest(defined(one), request, NO_RESERVATION));
      } finally {
        for (const database of databases) database.close();
        await sqld.stop();
      }
    });
  });

  describe('changes apply at once', () => {
    it('from another process', async () => {
      at('2030-06-01T10:00:05Z');
      const tenant = await gateway.tenant();
      expect((await admit(tenant)).headers).toEqual({});
      const scope = { organisationId: tenant.organisationId, workspaceId: tenant.workspace.id };
      const body = {
        conditions: [{ key: 'model', value: '*' }],
        group_by: [{ key: 'api_key' }],
        type: 'requests',
        unit: 'rpm',
        value: 1,
      };
      const worker = await startRatelimitWorker(gateway.dataDir, [
        'create-policy',
        JSON.stringify(scope),
        JSON.stringify(body),
        String(now),
      ]);
      const id = await worker.line();
      expect(await worker.exit).toBe(0);
      expect((await admit(tenant)).headers['ratelimit-policy']).toBe(`"${id}";q=1;w=60`);
      await refusal(admit(tenant));
    });
  });
});
