import { defined } from '../../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import * as ratelimit from '../../support/ratelimit';

let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway();
});
afterAll(() => gateway.close());

const PATH = '/v1/policies/rate-limits';

const validPolicy = {
  conditions: [{ key: 'model', value: 'gpt-4o' }],
  group_by: [{ key: 'api_key' }],
  type: 'requests',
  unit: 'rpm',
  value: 100,
  name: 'gpt-4o per key',
};

async function create(tenant: Tenant, body: Record<string, unknown> = validPolicy, key = tenant.workspaceKey) {
  const response = await gateway.request(PATH, { key, body });
  expect(response.status).toBe(200);
  const created = (await response.json()) as { id: string; object: string };
  return created.id;
}

async function list(key: string, query = '') {
  const response = await gateway.request(`${PATH}${query}`, { key });
  expect(response.status).toBe(200);
  return (await response.json()) as { object: string; data: Record<string, unknown>[]; total: number };
}

describe('POST /v1/policies/rate-limits', () => {
  it('creates an active policy and answers {id, object}', async () => {
    const tenant = await gateway.tenant();
    const before = gateway.clock.now();
    const response = await gateway.request(PATH, { key: tenant.workspaceKey, body: validPolicy });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    const body = (await response.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(['id', 'object']);
    expect(body.object).toBe('policy_usage_limits');
    expect(body.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);

    const policy = await json(await gateway.request(`${PATH}/${body.id as string}`, { key: tenant.workspaceKey }));
    expect(policy).toEqual({
      id: body.id,
      type: 'requests',
      unit: 'rpm',
      value: 100,
      status: 'active',
      workspace_id: tenant.workspace.id,
      organisation_id: tenant.organisationId,
      created_at: expect.any(String),
      last_updated_at: expect.any(String),
      name: 'gpt-4o per key',
      conditions: [{ key: 'model', value: 'gpt-4o' }],
      group_by: [{ key: 'api_key' }],
      created_by: 'workspace',
    });
    const created = Date.parse(policy.created_at);
    expect(new Date(created).toISOString()).toBe(policy.created_at);
    expect(created).toBeGreaterThanOrEqual(before);
    expect(policy.last_updated_at).toBe(policy.created_at);
  });

  it('accepts every key of the vocabulary, `*`, and fractional values', async () => {
    const tenant = await gateway.tenant();
    const keys = ['api_key', 'workspace_id', 'virtual_key', 'provider', 'model', 'metadata.team'];
    const id = await create(tenant, {
      conditions: keys.map((key) => ({ key, value: '*' })),
      group_by: keys.map((key) => ({ key })),
      type: 'tokens',
      unit: 'rpd',
      value: 0.5,
    });
    const policy = await json(await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey }));
    expect(policy.conditions).toHaveLength(6);
    expect(policy.value).toBe(0.5);
    expect(policy.name).toBe('');
  });

  it('with a workspace key, takes workspace and organisation from the key, and accepts them repeated', async () => {
    const tenant = await gateway.tenant();
    for (const workspace_id of [tenant.workspace.id, tenant.workspace.slug]) {
      const id = await create(tenant, { ...validPolicy, workspace_id, organisation_id: tenant.organisationId });
      const policy = await json(await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey }));
      expect(policy.workspace_id).toBe(tenant.workspace.id);
    }
  });

  it('with a workspace key, refuses another workspace or organisation with 403', async () => {
    const tenant = await gateway.tenant();
    const sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    const stranger = await gateway.tenant();
    for (const workspace_id of [sibling.workspace.id, sibling.workspace.slug, stranger.workspace.id, 'nope']) {
      const error = await errorOf(
        await gateway.request(PATH, { key: tenant.workspaceKey, body: { ...validPolicy, workspace_id } }),
      );
      expect(error).toMatchObject({ status: 403, code: 'workspace_forbidden', param: 'workspace_id' });
    }
    const error = await errorOf(
      await gateway.request(PATH, {
        key: tenant.workspaceKey,
        body: { ...validPolicy, organisation_id: stranger.organisationId },
      }),
    );
    expect(error).toMatchObject({ status: 403, code: 'organisation_forbidden', param: 'organisation_id' });
    expect((await list(tenant.workspaceKey)).total).toBe(0);
  });

  it('with an organisation key, requires both fields and their organisation', async () => {
    const tenant = await gateway.tenant();
    const stranger = await gateway.tenant();
    const key = tenant.orgKey;

    let error = await errorOf(
      await gateway.request(PATH, { key, body: { ...validPolicy, workspace_id: tenant.workspace.id } }),
    );
    expect(error).toMatchObject({ status: 400, code: 'missing_required_parameter', param: 'organisation_id' });

    error = await errorOf(
      await gateway.request(PATH, { key, body: { ...validPolicy, organisation_id: tenant.organisationId } }),
    );
    expect(error).toMatchObject({ status: 400, code: 'missing_required_parameter', param: 'workspace_id' });

    error = await errorOf(
      await gateway.request(PATH, {
        key,
        body: { ...validPolicy, organisation_id: stranger.organisationId, workspace_id: stranger.workspace.id },
      }),
    );
    expect(error).toMatchObject({ status: 403, code: 'organisation_forbidden' });

    error = await errorOf(
      await gateway.request(PATH, {
        key,
        body: { ...validPolicy, organisation_id: tenant.organisationId, workspace_id: stranger.workspace.id },
      }),
    );
    expect(error).toMatchObject({ status: 403, code: 'workspace_forbidden', param: 'workspace_id' });

    const id = await create(
      tenant,
      { ...validPolicy, organisation_id: tenant.organisationId, workspace_id: tenant.workspace.slug },
      key,
    );
    const policy = await json(await gateway.request(`${PATH}/${id}`, { key }));
    expect(policy).toMatchObject({ workspace_id: tenant.workspace.id, organisation_id: tenant.organisationId });
  });

  describe('validation', () => {
    let tenant: Tenant;
    beforeAll(async () => {
      tenant = await gateway.tenant();
    });

    const cases: [string, Record<string, unknown>, { code: string; param: string | null }][] = [
      ['conditions missing', { conditions: undefined }, { code: 'missing_required_parameter', param: 'conditions' }],
      ['conditions empty', { conditions: [] }, { code: 'array_below_min_length', param: 'conditions' }],
      ['conditions not an array', { conditions: 'model' }, { code: 'invalid_type', param: 'conditions' }],
      [
        'condition without value',
        { conditions: [{ key: 'model' }] },
        { code: 'missing_required_parameter', param: 'conditions[0].value' },
      ],
      [
        'condition value not a string',
        { conditions: [{ key: 'model', value: 4 }] },
        { code: 'invalid_type', param: 'conditions[0].value' },
      ],
      [
        'condition value empty',
        { conditions: [{ key: 'model', value: '' }] },
        { code: 'string_below_min_length', param: 'conditions[0].value' },
      ],
      [
        'condition with an extra field',
        { conditions: [{ key: 'model', value: 'x', op: 'eq' }] },
        { code: 'unknown_parameter', param: 'conditions[0].op' },
      ],
      [
        'condition key unknown',
        { conditions: [{ key: 'user', value: 'x' }] },
        { code: 'invalid_value', param: 'conditions[0].key' },
      ],
      [
        'condition key metadata. without a name',
        { conditions: [{ key: 'metadata.', value: 'x' }] },
        { code: 'invalid_value', param: 'conditions[0].key' },
      ],
      [
        'condition key metadata name too long',
        { conditions: [{ key: `metadata.${'k'.repeat(65)}`, value: 'x' }] },
        { code: 'invalid_value', param: 'conditions[0].key' },
      ],
      [
        'condition key twice',
        {
          conditions: [
            { key: 'model', value: 'a' },
            { key: 'model', value: 'b' },
          ],
        },
        { code: 'invalid_value', param: 'conditions[1].key' },
      ],
      [
        'too many conditions',
        { conditions: Array.from({ length: 33 }, (_, i) => ({ key: `metadata.k${i}`, value: 'x' })) },
        { code: 'array_above_max_length', param: 'conditions' },
      ],
      ['group_by missing', { group_by: undefined }, { code: 'missing_required_parameter', param: 'group_by' }],
      ['group_by empty', { group_by: [] }, { code: 'array_below_min_length', param: 'group_by' }],
      ['group_by key unknown', { group_by: [{ key: 'ip' }] }, { code: 'invalid_value', param: 'group_by[0].key' }],
      [
        'group_by key twice',
        { group_by: [{ key: 'model' }, { key: 'model' }] },
        { code: 'invalid_value', param: 'group_by[1].key' },
      ],
      ['type missing', { type: undefined }, { code: 'missing_required_parameter', param: 'type' }],
      ['type unknown', { type: 'bytes' }, { code: 'invalid_value', param: 'type' }],
      ['unit missing', { unit: undefined }, { code: 'missing_required_parameter', param: 'unit' }],
      ['unit unknown', { unit: 'rps' }, { code: 'invalid_value', param: 'unit' }],
      ['value missing', { value: undefined }, { code: 'missing_required_parameter', param: 'value' }],
      ['value zero', { value: 0 }, { code: 'value_below_minimum', param: 'value' }],
      ['value negative', { value: -5 }, { code: 'value_below_minimum', param: 'value' }],
      ['value a string', { value: '100' }, { code: 'invalid_type', param: 'value' }],
      ['value null', { value: null }, { code: 'invalid_type', param: 'value' }],
      ['value beyond 2^53', { value: 2 ** 60 }, { code: 'value_above_maximum', param: 'value' }],
      ['name too long', { name: 'n'.repeat(256) }, { code: 'string_above_max_length', param: 'name' }],
      ['name not a string', { name: 5 }, { code: 'invalid_type', param: 'name' }],
      ['organisation_id not a UUID', { organisation_id: 'org-1' }, { code: 'invalid_value', param: 'organisation_id' }],
      ['workspace_id empty', { workspace_id: '' }, { code: 'string_below_min_length', param: 'workspace_id' }],
      ['an unknown field', { status: 'archived' }, { code: 'unknown_parameter', param: 'status' }],
    ];

    it.each(cases)('%s', async (_name, change, expected) => {
      const body = { ...validPolicy, ...change };
      const error = await errorOf(await gateway.request(PATH, { key: tenant.workspaceKey, body }));
      expect(error).toMatchObject({ status: 400, type: 'invalid_request_error', ...expected });
      expect(error.message.length).toBeGreaterThan(10);
    });

    it('names the allowed keys when a key is unknown', async () => {
      const error = await errorOf(
        await gateway.request(PATH, {
          key: tenant.workspaceKey,
          body: { ...validPolicy, group_by: [{ key: 'user' }] },
        }),
      );
      for (const key of ['api_key', 'workspace_id', 'virtual_key', 'provider', 'model', 'metadata.<name>']) {
        expect(error.message).toContain(key);
      }
    });

    it('accepts exactly 255 characters of name', async () => {
      await create(tenant, { ...validPolicy, name: 'n'.repeat(255) });
    });

    it('refuses a body that is not an object', async () => {
      for (const body of ['[]', '"policy"', 'null', '42']) {
        const error = await errorOf(await gateway.request(PATH, { key: tenant.workspaceKey, body }));
        expect(error.status).toBe(400);
        expect(error.param).toBeNull();
      }
    });

    it('creates nothing when validation fails', async () => {
      const fresh = await gateway.tenant();
      for (const [, change] of cases) {
        await gateway.request(PATH, { key: fresh.workspaceKey, body: { ...validPolicy, ...change } });
      }
      expect((await list(fresh.workspaceKey)).total).toBe(0);
      expect((await list(fresh.workspaceKey, '?status=archived')).total).toBe(0);
    });
  });
});

describe('GET /v1/policies/rate-limits', () => {
  let tenant: Tenant;
  let sibling: Tenant;
  /** ids in creation order */
  const ids: string[] = [];
  beforeAll(async () => {
    tenant = await gateway.tenant();
    sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    const combos = [
      ['requests', 'rpm'],
      ['requests', 'rph'],
      ['tokens', 'rpm'],
      ['tokens', 'rpd'],
      ['requests', 'rpd'],
    ] as const;
    for (let i = 0; i < 12; i++) {
      const [type, unit] = defined(combos[i % combos.length]);
      ids.push(await create(tenant, { ...validPolicy, type, unit, name: `p${i}` }));
    }
    await create(sibling, { ...validPolicy, name: 'sibling' });
  });

  it('lists newest first with total, every documented field', async () => {
    const page = await list(tenant.workspaceKey);
    expect(page.object).toBe('list');
    expect(page.total).toBe(12);
    expect(page.data.map((policy) => policy.id)).toEqual([...ids].reverse());
    expect(Object.keys(defined(page.data[0])).sort()).toEqual(
      [
        'conditions',
        'created_at',
        'created_by',
        'group_by',
        'id',
        'last_updated_at',
        'name',
        'organisation_id',
        'status',
        'type',
        'unit',
        'value',
        'workspace_id',
      ].sort(),
    );
  });

  it('pages from 0 with page_size, total counting every match', async () => {
    const first = await list(tenant.workspaceKey, '?page_size=5');
    const second = await list(tenant.workspaceKey, '?page_size=5&current_page=1');
    const third = await list(tenant.workspaceKey, '?page_size=5&current_page=2');
    const past = await list(tenant.workspaceKey, '?page_size=5&current_page=3');
    const newestFirst = [...ids].reverse();
    expect(first.data.map((p) => p.id)).toEqual(newestFirst.slice(0, 5));
    expect(second.data.map((p) => p.id)).toEqual(newestFirst.slice(5, 10));
    expect(third.data.map((p) => p.id)).toEqual(newestFirst.slice(10));
    expect(past.data).toEqual([]);
    for (const page of [first, second, third, past]) expect(page.total).toBe(12);
  });

  it('answers page_size 0 with no items and the total', async () => {
    const page = await list(tenant.workspaceKey, '?page_size=0');
    expect(page).toEqual({ object: 'list', data: [], total: 12 });
  });

  it('accepts page_size 1000 and refuses 1001', async () => {
    expect((await list(tenant.workspaceKey, '?page_size=1000')).data).toHaveLength(12);
    const error = await errorOf(await gateway.request(`${PATH}?page_size=1001`, { key: tenant.workspaceKey }));
    expect(error).toMatchObject({ status: 400, code: 'value_above_maximum', param: 'page_size' });
  });

  it.each([
    ['page_size=-1', 'page_size'],
    ['page_size=abc', 'page_size'],
    ['page_size=1.5', 'page_size'],
    ['page_size=', 'page_size'],
    ['page_size=1e2', 'page_size'],
    ['current_page=-1', 'current_page'],
    ['current_page=x', 'current_page'],
    ['status=deleted', 'status'],
    ['type=bytes', 'type'],
    ['unit=rps', 'unit'],
    ['page=2', 'page'],
    ['status=active&status=archived', 'status'],
  ])('refuses ?%s naming %s', async (query, param) => {
    const error = await errorOf(await gateway.request(`${PATH}?${query}`, { key: tenant.workspaceKey }));
    expect(error).toMatchObject({ status: 400, param });
  });

  it('filters by type and unit, with totals', async () => {
    const all = await list(tenant.workspaceKey, '?page_size=1000');
    for (const [query, predicate] of [
      ['?type=tokens', (p: Record<string, unknown>) => p.type === 'tokens'],
      ['?unit=rpd', (p: Record<string, unknown>) => p.unit === 'rpd'],
      ['?type=requests&unit=rph', (p: Record<string, unknown>) => p.type === 'requests' && p.unit === 'rph'],
    ] as const) {
      const page = await list(tenant.workspaceKey, query);
      const expected = all.data.filter(predicate);
      expect(page.data.map((p) => p.id)).toEqual(expected.map((p) => p.id));
      expect(page.total).toBe(expected.length);
      expect(page.total).toBeGreaterThan(0);
    }
  });

  it('filters by status, active by default', async () => {
    const fresh = await gateway.tenant();
    const kept = await create(fresh);
    const archived = await create(fresh);
    await gateway.request(`${PATH}/${archived}`, { key: fresh.workspaceKey, method: 'DELETE' });
    expect((await list(fresh.workspaceKey)).data.map((p) => p.id)).toEqual([kept]);
    expect((await list(fresh.workspaceKey, '?status=active')).data.map((p) => p.id)).toEqual([kept]);
    const archivedPage = await list(fresh.workspaceKey, '?status=archived');
    expect(archivedPage.data.map((p) => p.id)).toEqual([archived]);
    expect(defined(archivedPage.data[0]).status).toBe('archived');
  });

  it('shows a workspace key only its workspace, and 403s a filter on another', async () => {
    const own = await list(tenant.workspaceKey, `?workspace_id=${tenant.workspace.slug}`);
    expect(own.total).toBe(12);
    const byId = await list(tenant.workspaceKey, `?workspace_id=${tenant.workspace.id}`);
    expect(byId.total).toBe(12);
    const error = await errorOf(
      await gateway.request(`${PATH}?workspace_id=${sibling.workspace.id}`, { key: tenant.workspaceKey }),
    );
    expect(error).toMatchObject({ status: 403, code: 'workspace_forbidden', param: 'workspace_id' });
  });

  it("shows an organisation key all of its organisation's workspaces, or one by id or slug", async () => {
    const all = await list(tenant.orgKey, '?page_size=1000');
    expect(all.total).toBe(13);
    expect(new Set(all.data.map((p) => p.workspace_id))).toEqual(new Set([tenant.workspace.id, sibling.workspace.id]));
    expect(defined(all.data[0]).name).toBe('sibling');
    expect((await list(tenant.orgKey, `?workspace_id=${sibling.workspace.slug}`)).total).toBe(1);
    expect((await list(tenant.orgKey, `?workspace_id=${tenant.workspace.id}`)).total).toBe(12);
    const stranger = await gateway.tenant();
    const error = await errorOf(
      await gateway.request(`${PATH}?workspace_id=${stranger.workspace.id}`, { key: tenant.orgKey }),
    );
    expect(error).toMatchObject({ status: 403, code: 'workspace_forbidden' });
    expect((await list(stranger.orgKey)).total).toBe(0);
  });
});

describe('one policy: GET, PUT, DELETE', () => {
  it('updates the given fields and moves last_updated_at', async () => {
    const tenant = await gateway.tenant();
    const id = await create(tenant);
    const before = await json(await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey }));
    gateway.clock.advance(5_000);
    const response = await gateway.request(`${PATH}/${id}`, {
      key: tenant.workspaceKey,
      method: 'PUT',
      body: {
        name: 'renamed',
        value: 7,
        unit: 'rph',
        conditions: [{ key: 'provider', value: 'openai' }],
        group_by: [{ key: 'model' }],
      },
    });
    expect(response.status).toBe(200);
    const after = await json(response);
    expect(after).toEqual({
      ...before,
      name: 'renamed',
      value: 7,
      unit: 'rph',
      conditions: [{ key: 'provider', value: 'openai' }],
      group_by: [{ key: 'model' }],
      last_updated_at: expect.any(String),
    });
    expect(Date.parse(after.last_updated_at) - Date.parse(before.last_updated_at)).toBeGreaterThanOrEqual(5_000);
    expect(after.created_at).toBe(before.created_at);

    const partial = await json(
      await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'PUT', body: { value: 9 } }),
    );
    expect(partial).toMatchObject({ value: 9, name: 'renamed', unit: 'rph' });
  });

  it('validates an update like a creation, and changes nothing on failure', async () => {
    const tenant = await gateway.tenant();
    const id = await create(tenant);
    for (const [body, param] of [
      [{}, null],
      [{ value: 0 }, 'value'],
      [{ conditions: [] }, 'conditions'],
      [{ group_by: [{ key: 'nope' }] }, 'group_by[0].key'],
      [{ type: 'tokens' }, 'type'],
      [{ status: 'archived' }, 'status'],
      [{ name: 'x'.repeat(256) }, 'name'],
    ] as const) {
      const error = await errorOf(
        await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'PUT', body }),
      );
      expect(error).toMatchObject({ status: 400, param });
    }
    const policy = await json(await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey }));
    expect(policy).toMatchObject({ value: 100, name: 'gpt-4o per key', type: 'requests' });
    expect(policy.last_updated_at).toBe(policy.created_at);
  });

  it('archives with DELETE, idempotently, and refuses to update an archived policy', async () => {
    const tenant = await gateway.tenant();
    const id = await create(tenant);
    gateway.clock.advance(1_000);
    const archived = await json(await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'DELETE' }));
    expect(archived.status).toBe('archived');
    expect(Date.parse(archived.last_updated_at)).toBeGreaterThan(Date.parse(archived.created_at));
    gateway.clock.advance(1_000);
    const again = await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'DELETE' });
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual(archived);
    const error = await errorOf(
      await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'PUT', body: { value: 1 } }),
    );
    expect(error).toMatchObject({ status: 409, code: 'policy_archived' });
  });

  it("answers 404 for another workspace's policy, for an unknown id and for a malformed one", async () => {
    const tenant = await gateway.tenant();
    const sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    const stranger = await gateway.tenant();
    const id = await create(sibling);
    for (const [key, target] of ratelimit.outOfReach(tenant, stranger, id)) {
      for (const [method, body] of [
        ['GET', undefined],
        ['PUT', { value: 1 }],
        ['DELETE', undefined],
      ] as const) {
        const error = await errorOf(await gateway.request(`${PATH}/${target}`, { key, method, body }));
        expect(error).toMatchObject({ status: 404, code: 'policy_not_found' });
      }
    }
    // The organisation key of the owner's organisation reaches it; nothing above changed it.
    const policy = await json(await gateway.request(`${PATH}/${id}`, { key: tenant.orgKey }));
    expect(policy).toMatchObject({ status: 'active', value: 100 });
  });
});
