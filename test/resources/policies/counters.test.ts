import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admitRequest } from '../../../src/ratelimit';
import type { PolicyCountersObject } from '../../../src/resources/policies/objects';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import * as ratelimit from '../../support/ratelimit';

/**
 * GET /v1/policies/rate-limits/{id}/counters: admissions and refusals made through the real
 * enforcement (admitRequest on the app's deps, counters in the real libSQL file), read through the route.
 */

/** The clock is stopped, so that the times shown compare exactly: each test moves it. */
let now = Date.UTC(2030, 0, 1, 12, 0, 0);
let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway({ deps: { now: () => now } });
});

/** Moves the clock one second into the next minute; answers that minute's start. */
function freshMinute(): number {
  const start = Math.floor(now / 60_000) * 60_000 + 60_000;
  now = start + 1000;
  return start;
}
afterAll(() => gateway.close());

const { NO_RESERVATION, POLICIES, refusal, requestAttributes } = ratelimit;

const admit = (tenant: Tenant, apiKey: string) =>
  admitRequest(gateway.deps, requestAttributes(tenant, { api_key: apiKey }), NO_RESERVATION);

async function countersOf(tenant: Tenant, id: string, query = '', key = tenant.workspaceKey) {
  const response = await gateway.request(`${POLICIES}/${id}/counters${query}`, { key });
  expect(response.status).toBe(200);
  return (await json(response)) as PolicyCountersObject;
}

describe('GET /v1/policies/rate-limits/{id}/counters', () => {
  it("answers the window's counters per group, most used first, and the refusals, newest first", async () => {
    const windowStart = freshMinute();
    const tenant = await gateway.tenant();
    const id = await ratelimit.createPolicy(gateway, tenant, { group_by: [{ key: 'api_key' }], value: 2 });
    await admit(tenant, 'key-a');
    await admit(tenant, 'key-a');
    await admit(tenant, 'key-b');
    now = windowStart + 2000;
    await refusal(admit(tenant, 'key-a'));
    now = windowStart + 3000;
    await refusal(admit(tenant, 'key-a'));

    const counters = await countersOf(tenant, id);
    expect(counters).toEqual({
      object: 'rate_limit_policy.counters',
      policy_id: id,
      type: 'requests',
      unit: 'rpm',
      value: 2,
      window_start: new Date(windowStart).toISOString(),
      window_end: new Date(windowStart + 60_000).toISOString(),
      groups: [
        { group: [{ key: 'api_key', value: 'key-a' }], group_hash: null, used: 2 },
        { group: [{ key: 'api_key', value: 'key-b' }], group_hash: null, used: 1 },
      ],
      total_groups: 2,
      refusals: [3000, 2000].map((ms) => ({
        created_at: new Date(windowStart + ms).toISOString(),
        group: [{ key: 'api_key', value: 'key-a' }],
        group_hash: null,
        api_key_id: 'key-a',
        // Not the id of a stored key: admitRequest was given it as is.
        api_key_prefix: null,
        virtual_key: 'vk-main',
        requested: 1,
        used: 2,
        limit: 2,
      })),
    });

    // `limit` keeps the most used; total_groups still counts every group.
    const top = await countersOf(tenant, id, '?limit=1');
    expect(top.groups).toEqual([counters.groups[0]]);
    expect(top.total_groups).toBe(2);

    // The next window starts at 0; the refusals stay.
    now = windowStart + 61_000;
    const next = await countersOf(tenant, id);
    expect(next).toMatchObject({ groups: [], total_groups: 0, refusals: counters.refusals });
    expect(next.window_start).toBe(new Date(windowStart + 60_000).toISOString());
  });

  it("names a refusal's API key by its prefix, for keys of the policy's organisation only", async () => {
    freshMinute();
    const tenant = await gateway.tenant();
    const stranger = await gateway.tenant();
    const id = await ratelimit.createPolicy(gateway, tenant, { value: 1 });
    await admit(tenant, tenant.workspaceKeyId);
    await refusal(admit(tenant, tenant.workspaceKeyId));
    await refusal(admit(tenant, stranger.workspaceKeyId));
    const [byStranger, byOwn] = (await countersOf(tenant, id)).refusals;
    expect(byOwn?.api_key_id).toBe(tenant.workspaceKeyId);
    expect(byOwn?.api_key_prefix).toMatch(/^gk_/);
    expect(tenant.workspaceKey.startsWith(byOwn?.api_key_prefix ?? '-')).toBe(true);
    expect(byStranger).toMatchObject({ api_key_id: stranger.workspaceKeyId, api_key_prefix: null });
  });

  it('shows a group whose values were too long by its hash', async () => {
    freshMinute();
    const tenant = await gateway.tenant();
    const id = await ratelimit.createPolicy(gateway, tenant, { group_by: [{ key: 'api_key' }], value: 5 });
    await admit(tenant, 'k'.repeat(200));
    const { groups } = await countersOf(tenant, id);
    expect(groups).toEqual([{ group: null, group_hash: expect.stringMatching(/^sha256:[0-9a-f]{64}$/), used: 1 }]);
  });

  it('keeps the last 20 refusals of a policy', async () => {
    freshMinute();
    const tenant = await gateway.tenant();
    const id = await ratelimit.createPolicy(gateway, tenant, { value: 1 });
    await admit(tenant, 'key-a');
    for (let i = 0; i < 25; i++) await refusal(admit(tenant, `key-${i}`));
    const { refusals } = await countersOf(tenant, id);
    expect(refusals.map((one) => one.api_key_id)).toEqual(Array.from({ length: 20 }, (_, i) => `key-${24 - i}`));
  });

  it('validates limit, naming the field', async () => {
    const tenant = await gateway.tenant();
    const id = await ratelimit.createPolicy(gateway, tenant, {});
    for (const [limit, code] of [
      ['0', 'value_below_minimum'],
      ['101', 'value_above_maximum'],
      ['many', 'invalid_value'],
    ]) {
      const error = await errorOf(
        await gateway.request(`${POLICIES}/${id}/counters?limit=${limit}`, { key: tenant.workspaceKey }),
      );
      expect(error).toMatchObject({ status: 400, code, param: 'limit' });
    }
    expect((await countersOf(tenant, id, '?limit=100')).groups).toEqual([]);
  });

  it("answers 404 for another workspace's policy, an unknown id and a malformed one; an organisation key reaches its own", async () => {
    freshMinute();
    const tenant = await gateway.tenant();
    const sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    const stranger = await gateway.tenant();
    const id = await ratelimit.createPolicy(gateway, sibling, { value: 1 });
    await admit(sibling, 'key-a');
    await refusal(admit(sibling, 'key-a'));
    for (const [key, target] of ratelimit.outOfReach(tenant, stranger, id)) {
      const error = await errorOf(await gateway.request(`${POLICIES}/${target}/counters`, { key }));
      expect(error).toMatchObject({ status: 404, code: 'policy_not_found' });
    }
    const counters = await countersOf(tenant, id, '', tenant.orgKey);
    expect(counters.groups).toHaveLength(1);
    expect(counters.refusals).toHaveLength(1);
  });
});
