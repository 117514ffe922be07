import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * GET /v1/workspaces and /v1/api-keys: what the console signs in and manages keys with. Another
 * tenant's workspaces and keys are out of reach: test/resources/identities/isolation.test.ts's matrix.
 */

let gateway: TestGateway;
let tenant: Tenant;
let sibling: Tenant;

beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
  sibling = await gateway.tenant({ organisationId: tenant.organisationId });
});
afterAll(() => gateway.close());

describe('GET /v1/workspaces', () => {
  it("answers a workspace key its own workspace, an organisation key its organisation's", async () => {
    const own = await json(await gateway.request('/v1/workspaces', { key: tenant.workspaceKey }));
    expect(own.data).toEqual([
      {
        id: tenant.workspace.id,
        object: 'workspace',
        organisation_id: tenant.organisationId,
        slug: tenant.workspace.slug,
        name: expect.any(String),
        created_at: expect.any(Number),
      },
    ]);
    const all = await json(await gateway.request('/v1/workspaces', { key: tenant.orgKey }));
    expect(all.data.map((workspace: { id: string }) => workspace.id).sort()).toEqual(
      [tenant.workspace.id, sibling.workspace.id].sort(),
    );
  });
});

describe('/v1/api-keys', () => {
  it('creates a workspace key shown once, lists it by prefix only, and revokes it', async () => {
    const created = await json(
      await gateway.request('/v1/api-keys', { key: tenant.workspaceKey, body: { name: 'ci <b>deploy</b>' } }),
    );
    expect(created).toMatchObject({ object: 'api_key', kind: 'workspace', name: 'ci <b>deploy</b>', revoked_at: null });
    expect(created.key).toMatch(/^gk_/);
    expect(created.key.startsWith(created.prefix)).toBe(true);
    expect(created.workspace_id).toBe(tenant.workspace.id);
    // It authenticates, for its workspace.
    expect((await gateway.request('/v1/assistants', { key: created.key })).status).toBe(200);

    const listed = await gateway.request('/v1/api-keys', { key: tenant.workspaceKey });
    const text = await listed.text();
    expect(text).not.toContain(created.key);
    const ids = JSON.parse(text).data.map((key: { id: string }) => key.id);
    expect(ids).toContain(created.id);
    expect(ids).toContain(tenant.workspaceKeyId);
    // A workspace key lists its workspace's keys: not the organisation's, not a sibling's.
    expect(ids).not.toContain(tenant.orgKeyId);
    expect(ids).not.toContain(sibling.workspaceKeyId);

    const revoked = await json(
      await gateway.request(`/v1/api-keys/${created.id}`, { method: 'DELETE', key: tenant.workspaceKey }),
    );
    expect(revoked.revoked_at).toEqual(expect.any(Number));
    expect(revoked).not.toHaveProperty('key');
    const refused = await errorOf(await gateway.request('/v1/assistants', { key: created.key }));
    expect(refused.status).toBe(401);
  });

  it("lets an organisation key list its organisation's keys and create one in a workspace it names", async () => {
    const listed = await json(await gateway.request('/v1/api-keys', { key: tenant.orgKey }));
    const ids = listed.data.map((key: { id: string }) => key.id);
    expect(ids).toEqual(expect.arrayContaining([tenant.orgKeyId, tenant.workspaceKeyId, sibling.workspaceKeyId]));
    const created = await json(
      await gateway.request('/v1/api-keys', {
        key: tenant.orgKey,
        body: { name: 'for the sibling', workspace_id: sibling.workspace.slug },
      }),
    );
    expect(created.workspace_id).toBe(sibling.workspace.id);
  });

  it('names the field it refuses', async () => {
    const noName = await errorOf(await gateway.request('/v1/api-keys', { key: tenant.workspaceKey, body: {} }));
    expect(noName).toMatchObject({ status: 400, param: 'name' });
    const noWorkspace = await errorOf(
      await gateway.request('/v1/api-keys', { key: tenant.orgKey, body: { name: 'which workspace?' } }),
    );
    expect(noWorkspace).toMatchObject({ status: 400, code: 'missing_required_parameter', param: 'workspace_id' });
    const unknown = await errorOf(
      await gateway.request('/v1/api-keys/not-a-key', { method: 'DELETE', key: tenant.workspaceKey }),
    );
    expect(unknown).toMatchObject({ status: 404, code: 'api_key_not_found', param: 'id' });
  });
});
