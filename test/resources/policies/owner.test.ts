import { defined } from '../../support/defined';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrate } from 'drizzle-orm/libsql/migrator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIGRATIONS_FOLDER, migrateDatabase, openDatabase } from '../../../src/db/node';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * Policies have an owner: one created with an organisation key binds its workspace from above, so
 * only an organisation key may change or archive it; a workspace key still reads it. The kind of
 * the creating key is recorded on the policy (`created_by`), and policies older than the record
 * are the workspace's (migration 0002).
 */

let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway();
});
afterAll(() => gateway.close());

const PATH = '/v1/policies/rate-limits';
const body = {
  name: 'team budget',
  conditions: [{ key: 'model', value: '*' }],
  group_by: [{ key: 'workspace_id' }],
  type: 'tokens',
  unit: 'rpd',
  value: 1000,
};

async function createWith(tenant: Tenant, kind: 'organisation' | 'workspace'): Promise<string> {
  const response = await gateway.request(PATH, {
    key: kind === 'organisation' ? tenant.orgKey : tenant.workspaceKey,
    body:
      kind === 'organisation'
        ? { ...body, workspace_id: tenant.workspace.slug, organisation_id: tenant.organisationId }
        : body,
  });
  expect(response.status).toBe(200);
  return (await json(response)).id;
}

const get = async (tenant: Tenant, id: string) => json(await gateway.request(`${PATH}/${id}`, { key: tenant.orgKey }));

describe("an organisation's policy", () => {
  it('is read by the workspace key (GET, list) and refused to it on PUT and DELETE with 403, changing nothing', async () => {
    const tenant = await gateway.tenant();
    const id = await createWith(tenant, 'organisation');
    const before = await get(tenant, id);
    expect(before).toMatchObject({ created_by: 'organisation', status: 'active', value: 1000 });

    const seen = await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey });
    expect(seen.status).toBe(200);
    expect(await json(seen)).toEqual(before);
    const listed = await json(await gateway.request(PATH, { key: tenant.workspaceKey }));
    expect(listed.data.map((policy: { id: string }) => policy.id)).toEqual([id]);

    gateway.clock.advance(1000);
    for (const [method, action, sent] of [
      ['PUT', 'changed', { value: Number.MAX_SAFE_INTEGER }],
      ['DELETE', 'archived', undefined],
    ] as const) {
      const error = await errorOf(
        await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method, body: sent }),
      );
      expect(error).toEqual({
        status: 403,
        type: 'invalid_request_error',
        code: 'policy_forbidden',
        param: 'id',
        message:
          `Rate-limit policy '${id}' was created with an organisation API key and can be ${action} only with one; ` +
          'a workspace API key can read it.',
      });
    }
    expect(await get(tenant, id)).toEqual(before);
  });

  it("is changed and archived by the organisation key; archived, it stays out of the workspace key's reach", async () => {
    const tenant = await gateway.tenant();
    const id = await createWith(tenant, 'organisation');
    const changed = await gateway.request(`${PATH}/${id}`, { key: tenant.orgKey, method: 'PUT', body: { value: 10 } });
    expect(changed.status).toBe(200);
    expect(await json(changed)).toMatchObject({ value: 10, created_by: 'organisation' });
    const archived = await gateway.request(`${PATH}/${id}`, { key: tenant.orgKey, method: 'DELETE' });
    expect(await json(archived)).toMatchObject({ status: 'archived' });
    // Archived or not, the workspace key cannot act on it (not even the no-op DELETE).
    for (const method of ['PUT', 'DELETE'] as const) {
      const response = await gateway.request(`${PATH}/${id}`, {
        key: tenant.workspaceKey,
        method,
        body: method === 'PUT' ? { value: 1 } : undefined,
      });
      expect(await errorOf(response)).toMatchObject({ status: 403, code: 'policy_forbidden' });
    }
    // The organisation key gets the usual answers for an archived policy.
    expect((await gateway.request(`${PATH}/${id}`, { key: tenant.orgKey, method: 'DELETE' })).status).toBe(200);
    expect(
      await errorOf(await gateway.request(`${PATH}/${id}`, { key: tenant.orgKey, method: 'PUT', body: { value: 1 } })),
    ).toMatchObject({
      status: 409,
      code: 'policy_archived',
    });
  });

  it('still answers 404 to a workspace key of another workspace', async () => {
    const tenant = await gateway.tenant();
    const sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    const id = await createWith(tenant, 'organisation');
    for (const method of ['GET', 'PUT', 'DELETE'] as const) {
      const response = await gateway.request(`${PATH}/${id}`, {
        key: sibling.workspaceKey,
        method,
        body: method === 'PUT' ? { value: 1 } : undefined,
      });
      expect(await errorOf(response)).toMatchObject({ status: 404, code: 'policy_not_found' });
    }
  });
});

describe("a workspace's policy", () => {
  it('is changed and archived by its workspace key and by the organisation key', async () => {
    const tenant = await gateway.tenant();
    const id = await createWith(tenant, 'workspace');
    expect(await get(tenant, id)).toMatchObject({ created_by: 'workspace' });
    expect(
      (await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'PUT', body: { value: 5 } })).status,
    ).toBe(200);
    expect(
      (await gateway.request(`${PATH}/${id}`, { key: tenant.orgKey, method: 'PUT', body: { value: 6 } })).status,
    ).toBe(200);
    expect(await get(tenant, id)).toMatchObject({ value: 6, created_by: 'workspace' });
    expect((await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'DELETE' })).status).toBe(200);
    const other = await createWith(tenant, 'workspace');
    expect(
      await json(await gateway.request(`${PATH}/${other}`, { key: tenant.orgKey, method: 'DELETE' })),
    ).toMatchObject({ status: 'archived' });
  });
});

describe('migration 0002 on a database with policies', () => {
  it("makes existing policies the workspace's, counts them, and keeps versions growing", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gateway-migration-'));
    const before = join(dataDir, 'migrations-0001');
    cpSync(MIGRATIONS_FOLDER, before, { recursive: true });
    const journalPath = join(before, 'meta', '_journal.json');
    const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: { tag: string }[] };
    journal.entries = journal.entries.filter((entry) => entry.tag < '0002');
    writeFileSync(journalPath, JSON.stringify(journal));
    const database = await openDatabase({ DATA_DIR: dataDir });
    try {
      await migrate(database.db, { migrationsFolder: before });
      const { client } = database;
      await client.execute("INSERT INTO organisations (id, name, created_at) VALUES ('o', 'o', 0)");
      await client.execute(
        "INSERT INTO workspaces (id, organisation_id, slug, name, created_at) VALUES ('w', 'o', 'w', 'w', 0)",
      );
      const insert = (id: string, status: string) =>
        client.execute({
          sql: `INSERT INTO rate_limit_policies (id, organisation_id, workspace_id, name, type, unit, value, status, conditions, group_by, created_at, last_updated_at)
                VALUES (?, 'o', 'w', 'old', 'requests', 'rpm', 1, ?, '[{"key":"model","value":"*"}]', '[{"key":"api_key"}]', 0, 0)`,
          args: [id, status],
        });
      await insert('p1', 'active');
      await insert('p2', 'active');
      await insert('p3', 'archived');
      const versionBefore = Number(
        defined(
          (await client.execute("SELECT version FROM rate_limit_policy_versions WHERE workspace_id = 'w'")).rows[0],
        ).version,
      );

      await migrateDatabase(database.db);
      const policies = await client.execute('SELECT id, created_by, version FROM rate_limit_policies ORDER BY id');
      expect(policies.rows.map((row) => [row.id, row.created_by, row.version])).toEqual([
        ['p1', 'workspace', 0],
        ['p2', 'workspace', 0],
        ['p3', 'workspace', 0],
      ]);
      const size = 'old'.length + '[{"key":"model","value":"*"}]'.length + '[{"key":"api_key"}]'.length;
      const state = defined(
        (await client.execute("SELECT * FROM rate_limit_policy_versions WHERE workspace_id = 'w'")).rows[0],
      );
      expect({ count: state.active_count, bytes: state.active_bytes, full: state.full_reload_version }).toEqual({
        count: 2,
        bytes: 2 * size,
        full: 0,
      });
      expect(Number(state.version)).toBeGreaterThan(versionBefore);
      // The new triggers stamp a changed row with the version it made.
      await client.execute("UPDATE rate_limit_policies SET value = 2 WHERE id = 'p1'");
      const after = await client.execute(
        "SELECT p.version AS row_version, v.version FROM rate_limit_policies p, rate_limit_policy_versions v WHERE p.id = 'p1' AND v.workspace_id = 'w'",
      );
      expect(defined(after.rows[0]).row_version).toBe(defined(after.rows[0]).version);
      expect(Number(defined(after.rows[0]).version)).toBe(Number(state.version) + 1);
    } finally {
      database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
