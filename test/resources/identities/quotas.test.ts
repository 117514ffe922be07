import { defined } from '../../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config';
import { policyBytes } from '../../../src/resources/policies/queries';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * Per-workspace budgets on the control plane: active policies, conditions per policy, the bytes of
 * a workspace's active policies, live virtual keys and live assistants. Each cap answers a 400
 * quota_exceeded naming the cap and what exists, writes nothing, and holds under concurrency: the
 * caps are checked in the inserting statement. The gateway here runs with small caps.
 */

const CAPS = {
  GATEWAY_MAX_POLICIES_PER_WORKSPACE: '10',
  GATEWAY_MAX_POLICY_CONDITIONS: '4',
  GATEWAY_MAX_POLICY_BYTES_PER_WORKSPACE: '2000',
  GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE: '10',
  GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE: '10',
};

let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway({ env: CAPS });
});
afterAll(() => gateway.close());

const POLICIES = '/v1/policies/rate-limits';

/** A small policy: its bytes are the name's, the conditions' and group_by's JSON. */
const policy = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  conditions: [{ key: 'model', value: 'gpt-4o' }],
  group_by: [{ key: 'api_key' }],
  type: 'requests',
  unit: 'rpm',
  value: 5,
  ...extra,
});

const createPolicy = (tenant: Tenant, body: Record<string, unknown>) =>
  gateway.request(POLICIES, { key: tenant.workspaceKey, body });

async function activePolicies(tenant: Tenant): Promise<number> {
  return (await json(await gateway.request(`${POLICIES}?page_size=0`, { key: tenant.workspaceKey }))).total;
}

/** The workspace's policy accounting, as the triggers keep it. */
async function stats(tenant: Tenant) {
  const { rows } = await gateway.database.client.execute({
    sql: 'SELECT active_count, active_bytes FROM rate_limit_policy_versions WHERE workspace_id = ?',
    args: [tenant.workspace.id],
  });
  return { count: Number(rows[0]?.active_count ?? 0), bytes: Number(rows[0]?.active_bytes ?? 0) };
}

/** What the workspace's active policies really take, recomputed from their rows. */
async function recomputed(tenant: Tenant) {
  const { rows } = await gateway.database.client.execute({
    sql: `SELECT count(*) AS count, coalesce(sum(length(CAST(name AS BLOB)) + length(CAST(conditions AS BLOB)) + length(CAST(group_by AS BLOB))), 0) AS bytes
          FROM rate_limit_policies WHERE workspace_id = ? AND status = 'active'`,
    args: [tenant.workspace.id],
  });
  return { count: Number(defined(rows[0]).count), bytes: Number(defined(rows[0]).bytes) };
}

describe('rate-limit policies', () => {
  it('refuses the policy past the count cap with 400 quota_exceeded, naming the cap and the count', async () => {
    const tenant = await gateway.tenant();
    for (let i = 0; i < 10; i++) expect((await createPolicy(tenant, policy(`p${i}`))).status).toBe(200);
    const error = await errorOf(await createPolicy(tenant, policy('one too many')));
    expect(error).toMatchObject({ status: 400, code: 'quota_exceeded', type: 'invalid_request_error' });
    expect(error.message).toBe(
      'This workspace has 10 active rate-limit policies; its cap is 10. Archive one before creating another.',
    );
    expect(await activePolicies(tenant)).toBe(10);

    // Archiving frees a place; archived policies do not count.
    const [first] = (await json(await gateway.request(POLICIES, { key: tenant.workspaceKey }))).data;
    expect(
      (await gateway.request(`${POLICIES}/${first.id}`, { key: tenant.workspaceKey, method: 'DELETE' })).status,
    ).toBe(200);
    expect((await createPolicy(tenant, policy('in its place'))).status).toBe(200);
    expect((await createPolicy(tenant, policy('over again'))).status).toBe(400);
    // The cap is per workspace: another workspace of the organisation starts at 0.
    const sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    expect((await createPolicy(sibling, policy('sibling'))).status).toBe(200);
    expect(await stats(tenant)).toEqual(await recomputed(tenant));
  });

  it('admits exactly the cap of 130 concurrent creates, with either kind of key', async () => {
    const tenant = await gateway.tenant();
    const responses = await Promise.all(
      Array.from({ length: 130 }, (_, i) =>
        gateway.request(POLICIES, {
          key: i % 2 ? tenant.workspaceKey : tenant.orgKey,
          body: { ...policy(`c${i}`), workspace_id: tenant.workspace.id, organisation_id: tenant.organisationId },
        }),
      ),
    );
    const statuses = responses.map((response) => response.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(10);
    expect(statuses.filter((status) => status === 400)).toHaveLength(120);
    for (const response of responses.filter((r) => r.status === 400)) {
      expect(await errorOf(response)).toMatchObject({ code: 'quota_exceeded' });
    }
    expect(await activePolicies(tenant)).toBe(10);
    expect(await stats(tenant)).toEqual({ count: 10, bytes: (await recomputed(tenant)).bytes });
  });

  it('refuses more conditions than GATEWAY_MAX_POLICY_CONDITIONS, on create and on update', async () => {
    const tenant = await gateway.tenant();
    const conditions = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `metadata.k${i}`, value: 'v' }));
    expect((await createPolicy(tenant, policy('four', { conditions: conditions(4) }))).status).toBe(200);
    const error = await errorOf(await createPolicy(tenant, policy('five', { conditions: conditions(5) })));
    expect(error).toMatchObject({ status: 400, code: 'quota_exceeded', param: 'conditions' });
    expect(error.message).toBe('A rate-limit policy may have at most 4 conditions in this gateway; this one has 5.');

    const [created] = (await json(await gateway.request(POLICIES, { key: tenant.workspaceKey }))).data;
    const update = await gateway.request(`${POLICIES}/${created.id}`, {
      key: tenant.workspaceKey,
      method: 'PUT',
      body: { conditions: conditions(5) },
    });
    expect(await errorOf(update)).toMatchObject({ status: 400, code: 'quota_exceeded', param: 'conditions' });
    expect(
      (await json(await gateway.request(`${POLICIES}/${created.id}`, { key: tenant.workspaceKey }))).conditions,
    ).toHaveLength(4);
  });

  it('keeps the bytes of active policies under their cap: creating, growing, and lets a policy shrink', async () => {
    const tenant = await gateway.tenant();
    const big = (name: string) => policy(name, { conditions: [{ key: 'model', value: 'm'.repeat(400) }] });
    const size = policyBytes({ name: 'b0', conditions: big('b0').conditions, groupBy: big('b0').group_by });
    expect(size).toBeGreaterThan(400);
    // 2000 bytes hold four of these, not five.
    const fits = Math.floor(2000 / size);
    for (let i = 0; i < fits; i++) expect((await createPolicy(tenant, big(`b${i}`))).status).toBe(200);
    expect(await stats(tenant)).toEqual({ count: fits, bytes: fits * size });
    const error = await errorOf(await createPolicy(tenant, big(`b${fits}`)));
    expect(error).toMatchObject({ status: 400, code: 'quota_exceeded', param: null });
    expect(error.message).toBe(
      `This workspace's active rate-limit policies take ${fits * size} bytes (names, conditions and group_by); ` +
        `a policy of ${size} bytes would pass its cap of 2000 bytes. Archive or shrink policies first.`,
    );

    // Growing one past the cap is refused and changes nothing; shrinking one is always allowed.
    const { data } = await json(await gateway.request(POLICIES, { key: tenant.workspaceKey }));
    const target = data[0].id;
    const grow = await gateway.request(`${POLICIES}/${target}`, {
      key: tenant.workspaceKey,
      method: 'PUT',
      body: { name: 'n'.repeat(255) },
    });
    expect(await errorOf(grow)).toMatchObject({ status: 400, code: 'quota_exceeded' });
    expect((await json(await gateway.request(`${POLICIES}/${target}`, { key: tenant.workspaceKey }))).name).toBe(
      data[0].name,
    );
    const shrink = await gateway.request(`${POLICIES}/${target}`, {
      key: tenant.workspaceKey,
      method: 'PUT',
      body: { conditions: [{ key: 'model', value: 'small' }], value: 7 },
    });
    expect(shrink.status).toBe(200);
    expect(await stats(tenant)).toEqual(await recomputed(tenant));
    // A change that keeps the size (the value) passes even at the cap.
    expect(
      (
        await gateway.request(`${POLICIES}/${data[1].id}`, {
          key: tenant.workspaceKey,
          method: 'PUT',
          body: { value: 9 },
        })
      ).status,
    ).toBe(200);
  });

  it('keeps the accounting exact through plain SQL: updates, moves between workspaces, deletes', async () => {
    const [a, b] = [await gateway.tenant(), await gateway.tenant()];
    for (let i = 0; i < 3; i++) await createPolicy(a, policy(`a${i}`));
    await createPolicy(b, policy('b0'));
    const { client } = gateway.database;
    await client.execute({
      sql: "UPDATE rate_limit_policies SET name = 'renamed by hand' WHERE workspace_id = ? AND name = 'a0'",
      args: [a.workspace.id],
    });
    await client.execute({
      sql: "UPDATE rate_limit_policies SET status = 'archived' WHERE workspace_id = ? AND name = 'a1'",
      args: [a.workspace.id],
    });
    await client.execute({
      sql: "UPDATE rate_limit_policies SET workspace_id = ? WHERE name = 'a2'",
      args: [b.workspace.id],
    });
    await client.execute({ sql: "DELETE FROM rate_limit_policies WHERE name = 'b0'" });
    for (const tenant of [a, b]) expect(await stats(tenant)).toEqual(await recomputed(tenant));
    expect(await stats(a)).toMatchObject({ count: 1 });
    expect(await stats(b)).toMatchObject({ count: 1 });
  });
});

describe('virtual keys', () => {
  const createKey = (tenant: Tenant, slug: string) =>
    gateway.request('/v1/virtual-keys', {
      key: tenant.workspaceKey,
      body: { slug, provider: 'openai', base_url: 'https://api.example.com/v1', api_key: 'sk-quota-test' },
    });

  it('refuses a live key past the cap, after the slug check; a revoked key frees a place', async () => {
    const tenant = await gateway.tenant();
    for (let i = 0; i < 10; i++) expect((await createKey(tenant, `k${i}`)).status).toBe(200);
    // A slug in use is still a conflict at the cap: the clearer answer.
    expect(await errorOf(await createKey(tenant, 'k0'))).toMatchObject({ status: 409, code: 'already_exists' });
    const error = await errorOf(await createKey(tenant, 'k10'));
    expect(error).toMatchObject({ status: 400, code: 'quota_exceeded' });
    expect(error.message).toBe(
      'This workspace has 10 live virtual keys; its cap is 10. Revoke one before creating another.',
    );
    expect((await gateway.request('/v1/virtual-keys/k3', { key: tenant.workspaceKey, method: 'DELETE' })).status).toBe(
      200,
    );
    expect((await createKey(tenant, 'k10')).status).toBe(200);
    const listed = await json(await gateway.request('/v1/virtual-keys', { key: tenant.workspaceKey }));
    expect(listed.data).toHaveLength(10);
  });

  it('admits exactly the cap of 130 concurrent creates', async () => {
    const tenant = await gateway.tenant();
    const responses = await Promise.all(Array.from({ length: 130 }, (_, i) => createKey(tenant, `c${i}`)));
    expect(responses.filter((r) => r.status === 200)).toHaveLength(10);
    expect(responses.filter((r) => r.status === 400)).toHaveLength(120);
    expect((await json(await gateway.request('/v1/virtual-keys', { key: tenant.workspaceKey }))).data).toHaveLength(10);
  });
});

describe('assistants', () => {
  const createAssistant = (tenant: Tenant, name: string) =>
    gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'gpt-4o', name } });

  it('refuses an assistant past the cap; a deleted one frees a place', async () => {
    const tenant = await gateway.tenant();
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push((await json(await createAssistant(tenant, `a${i}`))).id);
    const error = await errorOf(await createAssistant(tenant, 'a10'));
    expect(error).toMatchObject({ status: 400, code: 'quota_exceeded', param: null });
    expect(error.message).toBe('This workspace has 10 assistants; its cap is 10. Delete one before creating another.');
    expect(
      (await gateway.request(`/v1/assistants/${ids[0]}`, { key: tenant.workspaceKey, method: 'DELETE' })).status,
    ).toBe(200);
    expect((await createAssistant(tenant, 'a10')).status).toBe(200);
    expect(
      (await json(await gateway.request('/v1/assistants?limit=100', { key: tenant.workspaceKey }))).data,
    ).toHaveLength(10);
  });

  it('admits exactly the cap of 130 concurrent creates', async () => {
    const tenant = await gateway.tenant();
    const responses = await Promise.all(Array.from({ length: 130 }, (_, i) => createAssistant(tenant, `c${i}`)));
    expect(responses.filter((r) => r.status === 200)).toHaveLength(10);
    expect(responses.filter((r) => r.status === 400)).toHaveLength(120);
    expect(
      (await json(await gateway.request('/v1/assistants?limit=100', { key: tenant.workspaceKey }))).data,
    ).toHaveLength(10);
  });
});

describe('configuration', () => {
  it('has documented defaults and refuses bad caps at start', () => {
    const defaults = parseConfig({});
    expect(defaults).toMatchObject({
      GATEWAY_MAX_POLICIES_PER_WORKSPACE: 1000,
      GATEWAY_MAX_POLICY_CONDITIONS: 32,
      GATEWAY_MAX_POLICY_BYTES_PER_WORKSPACE: 1_048_576,
      GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE: 100,
      GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE: 10_000,
      GATEWAY_TOKEN_RESERVATION: 1024,
    });
    expect(() => parseConfig({ GATEWAY_MAX_POLICY_CONDITIONS: '33' })).toThrow(/GATEWAY_MAX_POLICY_CONDITIONS/);
    expect(() => parseConfig({ GATEWAY_MAX_POLICIES_PER_WORKSPACE: '0' })).toThrow(
      /GATEWAY_MAX_POLICIES_PER_WORKSPACE/,
    );
  });
});
