import { defined } from '../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/db/node';
import { ApiError, errorResponse } from '../../src/errors';
import { createLogger } from '../../src/logger';
import { nodeConfig } from '../../src/runtime/node/config';
import { createNodeDeps } from '../../src/runtime/node/deps';
import {
  admitRequest,
  settleTokens,
  LibsqlCounterStore,
  PolicyCache,
  requestMetadata,
  type RequestAttributes,
} from '../../src/ratelimit';
import type { TokenTicket } from '../../src/db/schema';
import type { CreatePolicyBody } from '../../src/resources/policies/schemas';
import { createPolicy as createPolicyRow } from '../../src/resources/policies/queries';
import { workspaceCaps } from '../../src/resources/identities/quotas';
import { createTestGateway, type Tenant, type TestGateway } from '../support/gateway';
import * as ratelimit from '../support/ratelimit';

/**
 * Rate-limit enforcement, driven through admitRequest and settleTokens on the real app's deps (a
 * real libSQL file with the real migrations); policies are written through the real policy routes.
 * The clock is stopped: each test sets `now`.
 */

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

const PATH = ratelimit.POLICIES;

const createPolicy = (tenant: Tenant, body: Record<string, unknown>) => ratelimit.createPolicy(gateway, tenant, body);

async function updatePolicy(tenant: Tenant, id: string, body: Record<string, unknown>) {
  const response = await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'PUT', body });
  expect(response.status).toBe(200);
}

async function archivePolicy(tenant: Tenant, id: string) {
  const response = await gateway.request(`${PATH}/${id}`, { key: tenant.workspaceKey, method: 'DELETE' });
  expect(response.status).toBe(200);
}

const { NO_RESERVATION, refusal, requestAttributes: attributes } = ratelimit;

const admit = (tenant: Tenant, overrides: Partial<RequestAttributes> = {}, turn = NO_RESERVATION) =>
  admitRequest(gateway.deps, attributes(tenant, overrides), turn);

/** Whether admissions are counted against some policy: admitted twice under 1 rpm means no. */
async function governed(tenant: Tenant, overrides: Partial<RequestAttributes> = {}): Promise<boolean> {
  const first = await admit(tenant, overrides);
  const second = await admit(tenant, overrides).then(
    () => 'admitted',
    (error: unknown) => (error instanceof ApiError && error.status === 429 ? 'refused' : Promise.reject(error)),
  );
  expect(Object.keys(first.headers).length > 0).toBe(second === 'refused');
  return second === 'refused';
}

const countersOf = (policyId: string) => ratelimit.countersOf(gateway.database.client, policyId);
const usedBy = (policyId: string) => ratelimit.usedBy(gateway.database.client, policyId);

describe('matching', () => {
  const cases: [string, { key: string; value: string }[], Partial<RequestAttributes>, boolean][] = [
    ['api_key: the calling key', [{ key: 'api_key', value: '<key>' }], {}, true],
    ['api_key: another key', [{ key: 'api_key', value: 'some-other-key-id' }], {}, false],
    ['workspace_id: this workspace', [{ key: 'workspace_id', value: '<workspace>' }], {}, true],
    ['workspace_id: another workspace', [{ key: 'workspace_id', value: 'another' }], {}, false],
    ['virtual_key: its slug', [{ key: 'virtual_key', value: 'vk-main' }], {}, true],
    ['virtual_key: another slug', [{ key: 'virtual_key', value: 'vk-other' }], {}, false],
    ['provider: openai', [{ key: 'provider', value: 'openai' }], {}, true],
    ['provider: azure-openai', [{ key: 'provider', value: 'azure-openai' }], {}, false],
    ['model: exact', [{ key: 'model', value: 'gpt-4o' }], {}, true],
    ['model: no prefix matching', [{ key: 'model', value: 'gpt-4o' }], { model: 'gpt-4o-mini' }, false],
    ['model: case-sensitive', [{ key: 'model', value: 'GPT-4o' }], {}, false],
    ['model: *', [{ key: 'model', value: '*' }], { model: 'anything' }, true],
    ['metadata: equal value', [{ key: 'metadata.team', value: 'a' }], { metadata: { team: 'a' } }, true],
    ['metadata: other value', [{ key: 'metadata.team', value: 'a' }], { metadata: { team: 'b' } }, false],
    ['metadata: absent', [{ key: 'metadata.team', value: 'a' }], { metadata: { other: 'a' } }, false],
    ['metadata: * and present', [{ key: 'metadata.team', value: '*' }], { metadata: { team: 'x' } }, true],
    ['metadata: * and empty string', [{ key: 'metadata.team', value: '*' }], { metadata: { team: '' } }, true],
    ['metadata: * and absent', [{ key: 'metadata.team', value: '*' }], { metadata: {} }, false],
    [
      'AND: every condition holds',
      [
        { key: 'model', value: 'gpt-4o' },
        { key: 'provider', value: '*' },
        { key: 'metadata.team', value: 'a' },
      ],
      { metadata: { team: 'a' } },
      true,
    ],
    [
      'AND: one condition fails',
      [
        { key: 'model', value: 'gpt-4o' },
        { key: 'provider', value: '*' },
        { key: 'metadata.team', value: 'a' },
      ],
      { metadata: { team: 'b' } },
      false,
    ],
    [
      'AND: one key absent',
      [
        { key: 'model', value: '*' },
        { key: 'metadata.team', value: '*' },
      ],
      {},
      false,
    ],
  ];

  it.each(cases)('%s', async (_name, conditions, overrides, matches) => {
    const tenant = await gateway.tenant();
    const resolved = conditions.map(({ key, value }) => ({
      key,
      value: value === '<key>' ? tenant.workspaceKeyId : value === '<workspace>' ? tenant.workspace.id : value,
    }));
    await createPolicy(tenant, { conditions: resolved });
    expect(await governed(tenant, overrides)).toBe(matches);
  });

  it('matches metadata from the header merged over the run metadata, the header winning', async () => {
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'metadata.team', value: 'blue' }] });
    const fromRun = requestMetadata({ team: 'blue' }, undefined);
    const fromHeader = requestMetadata({}, '{"team":"blue"}');
    const overridden = requestMetadata({ team: 'blue' }, '{"team":"red"}');
    expect(overridden).toEqual({ team: 'red' });
    expect(await governed(tenant, { metadata: overridden })).toBe(false);
    expect(await governed(tenant, { metadata: fromRun })).toBe(true);
    const other = await gateway.tenant();
    await createPolicy(other, { conditions: [{ key: 'metadata.team', value: 'blue' }] });
    expect(await governed(other, { metadata: fromHeader })).toBe(true);
  });

  it('ignores archived policies', async () => {
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }] });
    await archivePolicy(tenant, id);
    expect(await governed(tenant)).toBe(false);
  });

  it("ignores other workspaces' policies, in the same organisation and in another", async () => {
    const tenant = await gateway.tenant();
    const sibling = await gateway.tenant({ organisationId: tenant.organisationId });
    const stranger = await gateway.tenant();
    for (const other of [sibling, stranger]) {
      await createPolicy(other, { conditions: [{ key: 'model', value: '*' }] });
      await createPolicy(other, { conditions: [{ key: 'workspace_id', value: tenant.workspace.id }] });
    }
    expect(await governed(tenant)).toBe(false);
    expect(await governed(sibling)).toBe(true);
  });

  it('gives no headers and no ticket when nothing matches', async () => {
    const tenant = await gateway.tenant();
    expect(await admit(tenant)).toEqual({ headers: {}, ticket: null });
    await createPolicy(tenant, { conditions: [{ key: 'model', value: 'other' }], type: 'tokens' });
    expect(await admit(tenant)).toEqual({ headers: {}, ticket: null });
  });
});

describe('grouping', () => {
  it('counts each group apart', async () => {
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], group_by: [{ key: 'api_key' }] });
    await admit(tenant, { api_key: 'key-a' });
    await refusal(admit(tenant, { api_key: 'key-a' }));
    await admit(tenant, { api_key: 'key-b' });
    await refusal(admit(tenant, { api_key: 'key-b' }));
  });

  it('makes an absent value a group of its own, apart from the empty string', async () => {
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, {
      conditions: [{ key: 'model', value: '*' }],
      group_by: [{ key: 'api_key' }, { key: 'metadata.user' }],
    });
    await admit(tenant, { metadata: {} });
    await refusal(admit(tenant, { metadata: {} }));
    await admit(tenant, { metadata: { user: '' } });
    await admit(tenant, { metadata: { user: 'null' } });
    await refusal(admit(tenant, { metadata: { user: '' } }));
    await admit(tenant, { metadata: { user: 'u1' }, api_key: 'key-b' });
    await admit(tenant, { metadata: {}, api_key: 'key-b' });
    expect(Object.keys(await countersOf(id))).toHaveLength(5);
  });

  it('hashes long group values into short keys, one counter per value', async () => {
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, {
      conditions: [{ key: 'model', value: '*' }],
      group_by: [{ key: 'metadata.user' }],
    });
    const long = (char: string) => char.repeat(512);
    await admit(tenant, { metadata: { user: long('a') } });
    await refusal(admit(tenant, { metadata: { user: long('a') } }));
    await admit(tenant, { metadata: { user: long('b') } });
    const keys = Object.keys(await countersOf(id));
    expect(keys).toHaveLength(2);
    for (const key of keys) expect(key.length).toBeLessThan(200);
  });
});

describe('windows', () => {
  it.each([
    ['rpm', '2030-02-01T10:00:59.999Z', '2030-02-01T10:01:00.000Z', '2030-02-01T10:00:00.000Z'],
    ['rph', '2030-02-01T10:59:59.999Z', '2030-02-01T11:00:00.000Z', '2030-02-01T10:00:00.000Z'],
    ['rpd', '2030-02-01T23:59:59.999Z', '2030-02-02T00:00:00.000Z', '2030-02-01T00:00:00.000Z'],
  ])('%s: a UTC boundary starts a new window', async (unit, last, next, start) => {
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], unit, value: 2 });
    at(start);
    await admit(tenant);
    at(last);
    await admit(tenant);
    await refusal(admit(tenant));
    at(next);
    await admit(tenant);
    await admit(tenant);
    await refusal(admit(tenant));
    const counters = await countersOf(id);
    expect(counters[`${id}/${unit}/${Date.parse(next)}/[["workspace_id","${tenant.workspace.id}"]]`]).toBe(2);
  });

  it('keeps an hour window across minute boundaries', async () => {
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], unit: 'rph', value: 2 });
    at('2030-02-01T10:00:30Z');
    await admit(tenant);
    at('2030-02-01T10:01:30Z');
    await admit(tenant);
    at('2030-02-01T10:59:30Z');
    await refusal(admit(tenant));
  });
});

describe('exactness', () => {
  it('admits exactly 50 of 200 concurrent requests under 50 rpm', async () => {
    at('2030-03-01T10:00:05Z');
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 50 });
    const outcomes = await Promise.allSettled(Array.from({ length: 200 }, () => admit(tenant)));
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(50);
    expect(refused).toHaveLength(150);
    for (const outcome of refused) {
      expect(outcome.reason).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
    }
    expect(await usedBy(id)).toBe(50);
  });

  it('refuses when any matching policy is full, and then consumes nothing in the others', async () => {
    at('2030-03-01T10:00:05Z');
    const tenant = await gateway.tenant();
    const narrow = await createPolicy(tenant, { conditions: [{ key: 'model', value: 'gpt-4o' }], value: 1 });
    const broad = await createPolicy(tenant, { conditions: [{ key: 'provider', value: 'openai' }], value: 10 });
    const tokens = await createPolicy(tenant, {
      conditions: [{ key: 'provider', value: '*' }],
      type: 'tokens',
      value: 1000,
    });
    await admit(tenant);
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => admit(tenant)));
    expect(outcomes.every((o) => o.status === 'rejected')).toBe(true);
    expect(await usedBy(narrow)).toBe(1);
    expect(await usedBy(broad)).toBe(1);
    expect(await usedBy(tokens)).toBe(0);
    await admit(tenant, { model: 'gpt-4o-mini' });
    expect(await usedBy(broad)).toBe(2);
  });
});

describe('tokens', () => {
  it('refuses once the group has used the value, counting charged tokens', async () => {
    at('2030-04-01T10:00:05Z');
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, {
      conditions: [{ key: 'model', value: '*' }],
      group_by: [{ key: 'api_key' }],
      type: 'tokens',
      value: 100,
    });
    const first = await admit(tenant);
    expect(first.ticket).toEqual({
      workspace_id: tenant.workspace.id,
      policies: [{ policy_id: id, unit: 'rpm', group: `[["api_key","${tenant.workspaceKeyId}"]]` }],
      reserved: 0,
      reserved_at: now,
      base_tokens: 0,
    });
    const second = await admit(tenant);
    await settleTokens(gateway.deps, first.ticket, 60);
    expect((await admit(tenant)).headers['x-ratelimit-remaining-tokens']).toBe('40');
    await settleTokens(gateway.deps, second.ticket, 50);
    const error = await refusal(admit(tenant));
    expect(error.type).toBe('tokens');
    expect(error.headers['x-ratelimit-remaining-tokens']).toBe('0');
    expect(await usedBy(id)).toBe(110);
    // Another group is not affected.
    await admit(tenant, { api_key: 'another-key' });
  });

  it('charges the window in which the run ends', async () => {
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, {
      conditions: [{ key: 'model', value: '*' }],
      type: 'tokens',
      value: 100,
    });
    at('2030-04-01T10:00:59Z');
    const { ticket } = await admit(tenant);
    at('2030-04-01T10:01:10Z');
    await settleTokens(gateway.deps, ticket, 100);
    await refusal(admit(tenant));
    expect(Object.keys(await countersOf(id))).toEqual([
      `${id}/rpm/${Date.parse('2030-04-01T10:01:00Z')}/[["workspace_id","${tenant.workspace.id}"]]`,
    ]);
  });

  it('compares fractional values exactly: tokens', async () => {
    at('2030-04-01T10:00:05Z');
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], type: 'tokens', value: 99.5 });
    const { ticket } = await admit(tenant);
    await settleTokens(gateway.deps, ticket, 99);
    const admitted = await admit(tenant);
    expect(admitted.headers['x-ratelimit-remaining-tokens']).toBe('0');
    expect(admitted.headers['x-ratelimit-limit-tokens']).toBe('99.5');
    await settleTokens(gateway.deps, ticket, 1);
    await refusal(admit(tenant));
  });

  it('compares fractional values exactly: requests', async () => {
    at('2030-04-01T10:00:05Z');
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'model', value: 'a' }], value: 2.5 });
    await createPolicy(tenant, { conditions: [{ key: 'model', value: 'b' }], value: 0.5 });
    expect((await admit(tenant, { model: 'a' })).headers['x-ratelimit-remaining-requests']).toBe('1');
    expect((await admit(tenant, { model: 'a' })).headers['x-ratelimit-remaining-requests']).toBe('0');
    await refusal(admit(tenant, { model: 'a' }));
    await refusal(admit(tenant, { model: 'b' }));
  });

  it('gives no ticket without tokens policies, and charging nothing changes nothing', async () => {
    at('2030-04-01T10:00:05Z');
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 5 });
    expect((await admit(tenant)).ticket).toBeNull();
    await settleTokens(gateway.deps, null, 100);
    const tokens = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], type: 'tokens', value: 5 });
    const { ticket } = await admit(tenant);
    await settleTokens(gateway.deps, ticket, 0);
    expect(await usedBy(tokens)).toBe(0);
    expect(await usedBy(id)).toBe(2);
  });

  it('logs a settlement that fails instead of throwing', async () => {
    const broken = { workspace_id: 'w', policies: null } as unknown as TokenTicket;
    await expect(settleTokens(gateway.deps, broken, 10)).resolves.toBeUndefined();
    expect(gateway.logs.some((line) => line.includes('rate-limit token settlement failed'))).toBe(true);
  });
});

describe('the 429 and the headers', () => {
  it('names the policy, its limit, window and reset, with exact headers', async () => {
    at('2030-05-01T12:00:23.250Z');
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, {
      name: 'gpt-4o per key',
      conditions: [{ key: 'model', value: 'gpt-4o' }],
      group_by: [{ key: 'api_key' }],
      value: 2,
    });
    await admit(tenant);
    await admit(tenant);
    const error = await refusal(admit(tenant));
    expect(error.status).toBe(429);
    expect(error.body).toEqual({
      error: {
        message:
          `Rate limit reached for policy 'gpt-4o per key' (${id}) on requests per minute: Limit 2, Used 2, ` +
          'Requested 1. The window resets at 2030-05-01T12:01:00.000Z; please try again in 36.75s.',
        type: 'requests',
        param: null,
        code: 'rate_limit_exceeded',
      },
    });
    expect(error.headers).toEqual({
      'retry-after': '37',
      'x-ratelimit-limit-requests': '2',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '36.75s',
      'ratelimit-policy': `"${id}";q=2;w=60`,
      ratelimit: `"${id}";r=0;t=37`,
    });

    const response = errorResponse(error);
    expect(response.status).toBe(429);
    expect(response.headers.get('retry-after')).toBe('37');
    expect(response.headers.get('RateLimit')).toBe(`"${id}";r=0;t=37`);
    expect(response.headers.get('x-should-retry')).toBeNull();
    expect(await response.json()).toEqual(error.body);
  });

  it('reports a tokens policy by id when it has no name, with its unit', async () => {
    at('2030-05-01T12:20:00Z');
    const tenant = await gateway.tenant();
    const id = await createPolicy(tenant, {
      conditions: [{ key: 'model', value: '*' }],
      type: 'tokens',
      unit: 'rph',
      value: 500,
    });
    const { ticket } = await admit(tenant);
    await settleTokens(gateway.deps, ticket, 750);
    const error = await refusal(admit(tenant));
    expect(error.body.error).toEqual({
      message:
        `Rate limit reached for policy ${id} on tokens per hour: Limit 500, Used 750. ` +
        'The window resets at 2030-05-01T13:00:00.000Z; please try again in 40m0s.',
      type: 'tokens',
      param: null,
      code: 'rate_limit_exceeded',
    });
    expect(error.headers).toEqual({
      'retry-after': '2400',
      'x-ratelimit-limit-tokens': '500',
      'x-ratelimit-remaining-tokens': '0',
      'x-ratelimit-reset-tokens': '40m0s',
      'ratelimit-policy': `"${id}";q=500;qu="tokens";w=3600`,
      ratelimit: `"${id}";r=0;t=2400`,
    });
  });

  it('reports the refusing policy whose window ends last', async () => {
    at('2030-05-01T12:20:00.500Z');
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 1 });
    const daily = await createPolicy(tenant, { conditions: [{ key: 'provider', value: '*' }], unit: 'rpd', value: 1 });
    await createPolicy(tenant, { conditions: [{ key: 'virtual_key', value: '*' }], unit: 'rph', value: 1 });
    await admit(tenant);
    const error = await refusal(admit(tenant));
    expect(error.message).toContain(`policy ${daily} on requests per day`);
    expect(error.headers['retry-after']).toBe(String(11 * 3600 + 39 * 60 + 60));
    expect(error.headers['x-ratelimit-reset-requests']).toBe('11h39m59.5s');
  });

  it('gives admitted requests the tightest requests and tokens policies', async () => {
    at('2030-05-01T12:00:10Z');
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 10 });
    const hourly = await createPolicy(tenant, { conditions: [{ key: 'provider', value: '*' }], unit: 'rph', value: 5 });
    const tokens = await createPolicy(tenant, {
      conditions: [{ key: 'virtual_key', value: 'vk-main' }],
      type: 'tokens',
      unit: 'rpd',
      value: 1000.5,
    });
    const { headers } = await admit(tenant);
    expect(headers).toEqual({
      'x-ratelimit-limit-requests': '5',
      'x-ratelimit-remaining-requests': '4',
      'x-ratelimit-reset-requests': '59m50s',
      'x-ratelimit-limit-tokens': '1000.5',
      'x-ratelimit-remaining-tokens': '1000',
      'x-ratelimit-reset-tokens': '11h59m50s',
      'ratelimit-policy': `"${hourly}";q=5;w=3600, "${tokens}";q=1000;qu="tokens";w=86400`,
      ratelimit: `"${hourly}";r=4;t=3590, "${tokens}";r=1000;t=43190`,
    });
  });

  it('keeps every digit of a value', async () => {
    at('2030-05-01T12:00:10Z');
    const tenant = await gateway.tenant();
    await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: Number.MAX_SAFE_INTEGER });
    await createPolicy(tenant, {
      conditions: [{ key: 'provider', value: '*' }],
      type: 'tokens',
      value: 1234.5678901234567,
    });
    const { headers } = await admit(tenant);
    expect(headers['x-ratelimit-limit-requests']).toBe('9007199254740991');
    expect(headers['x-ratelimit-remaining-requests']).toBe('9007199254740990');
    expect(headers['x-ratelimit-limit-tokens']).toBe('1234.5678901234567');
  });

  it('breaks a tie in room by the soonest reset', async () => {
    at('2030-05-01T12:00:10Z');
    const tenant = await gateway.tenant();
    const minute = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 3 });
    await createPolicy(tenant, { conditions: [{ key: 'provider', value: '*' }], unit: 'rpd', value: 3 });
    const { headers } = await admit(tenant);
    expect(headers['ratelimit']).toBe(`"${minute}";r=2;t=50`);
  });
});

describe('changes apply at once', () => {
  it('in this process: create, update, archive', async () => {
    at('2030-06-01T10:00:05Z');
    const tenant = await gateway.tenant();
    expect((await admit(tenant)).headers).toEqual({});
    const id = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 1 });
    await admit(tenant);
    await refusal(admit(tenant));
    await updatePolicy(tenant, id, { value: 2 });
    await admit(tenant);
    await refusal(admit(tenant));
    await updatePolicy(tenant, id, { conditions: [{ key: 'model', value: 'other' }] });
    expect((await admit(tenant)).headers).toEqual({});
    await updatePolicy(tenant, id, { conditions: [{ key: 'model', value: '*' }], unit: 'rph' });
    await admit(tenant);
    await admit(tenant);
    await refusal(admit(tenant));
    await archivePolicy(tenant, id);
    expect((await admit(tenant)).headers).toEqual({});
  });

  it('from another gateway on the same database, both ways', async () => {
    at('2030-06-01T10:00:05Z');
    const tenant = await gateway.tenant();
    const database = await openDatabase(gateway.deps.config);
    const second = await createNodeDeps(gateway.deps.config, database, {
      now: () => now,
      log: createLogger('silent'),
    });
    try {
      const request = attributes(tenant);
      expect((await admitRequest(second, request, NO_RESERVATION)).headers).toEqual({});
      const id = await createPolicy(tenant, { conditions: [{ key: 'model', value: '*' }], value: 1 });
      await admitRequest(second, request, NO_RESERVATION);
      await refusal(admitRequest(second, request, NO_RESERVATION));
      await updatePolicy(tenant, id, { value: 3 });
      await admitRequest(second, request, NO_RESERVATION);

      const scope = { organisationId: tenant.organisationId, workspaceId: tenant.workspace.id };
      const body: CreatePolicyBody = {
        conditions: [{ key: 'metadata.team', value: '*' }],
        group_by: [{ key: 'api_key' }],
        type: 'requests',
        unit: 'rpm',
        value: 1,
      };
      await createPolicyRow(second.db, scope, body, now, ROW_RULES);
      await admit(tenant, { model: 'other', metadata: { team: 'x' } });
      await refusal(admit(tenant, { model: 'other', metadata: { team: 'x' } }));
    } finally {
      database.close();
    }
  });
});

describe('the policy cache', () => {
  it('holds at most maxPolicies, dropping the least recently used workspaces', async () => {
    const cache = new PolicyCache(gateway.database.db, { maxPolicies: 3 });
    const [a, b, c] = [await gateway.tenant(), await gateway.tenant(), await gateway.tenant()];
    await createPolicy(a, { conditions: [{ key: 'model', value: 'x' }] });
    await createPolicy(a, { conditions: [{ key: 'model', value: 'y' }] });
    await createPolicy(b, { conditions: [{ key: 'model', value: 'x' }] });
    expect((await cache.get(a.workspace.id)).size).toBe(2);
    expect((await cache.get(b.workspace.id)).size).toBe(1);
    expect(cache.weight).toBe(3);
    expect((await cache.get(c.workspace.id)).size).toBe(0);
    expect(cache.weight).toBe(2);
    expect((await cache.get(a.workspace.id)).size).toBe(2);
    expect(cache.weight).toBe(3);
    await createPolicy(c, { conditions: [{ key: 'model', value: 'x' }] });
    expect((await cache.get(c.workspace.id)).size).toBe(1);
    expect(cache.weight).toBe(3);
  });
});

describe('pruning', () => {
  it('deletes expired windows only, a bounded batch at a time, at most once an interval', async () => {
    const store = new LibsqlCounterStore(gateway.database.client, {
      log: gateway.deps.log,
      pruneIntervalMs: 60_000,
      pruneBatch: 2,
    });
    const keys = async () => {
      const { rows } = await gateway.database.client.execute(
        "SELECT key FROM rate_limit_counters WHERE key LIKE 'prune/%' ORDER BY key",
      );
      return rows.map((row) => row.key as string);
    };
    // Times far before every other test's windows, so that only these rows can expire here.
    const T = 1_000_000_000;
    await store.adjust('s', [{ key: 'prune/a', windowEnd: T - 2, delta: 1 }]);
    await store.adjust('s', [{ key: 'prune/b', windowEnd: T - 1, delta: 1 }]);
    await store.adjust('s', [{ key: 'prune/c', windowEnd: T, delta: 1 }]);
    await store.adjust('s', [{ key: 'prune/d', windowEnd: T + 30_000, delta: 1 }]);
    const admitAt = (time: number) =>
      store.admit('s', [{ key: 'prune/x', windowEnd: T + 60_000_000, cost: 1, limit: 100, mustFit: true }], time);

    // A full batch (a, b): the next admission prunes again.
    await admitAt(T);
    expect(await keys()).toEqual(['prune/c', 'prune/d', 'prune/x']);
    await admitAt(T + 1000);
    expect(await keys()).toEqual(['prune/d', 'prune/x']);
    // Less than a batch: the next prune waits for the interval, though d has expired meanwhile.
    await admitAt(T + 40_000);
    expect(await keys()).toEqual(['prune/d', 'prune/x']);
    await admitAt(T + 61_000);
    expect(await keys()).toEqual(['prune/x']);
    expect(await store.prune(T + 61_000)).toBe(0);
  });

  it("counts on the embedded file's immediate client, committing each write at once without waiting for the disk", async () => {
    const { client, countersClient } = gateway.database;
    expect(countersClient).not.toBe(client);
    const pragma = async (name: string) => Number(defined((await countersClient.execute(`PRAGMA ${name}`)).rows[0])[0]);
    // NORMAL (1): no fsync per commit; checkpoints are left to the writer thread's connection.
    expect(await pragma('synchronous')).toBe(1);
    expect(await pragma('wal_autocheckpoint')).toBe(0);
    // Not awaited: with no group on the writer thread, the write has committed by the time
    // execute() returns its promise (a group commit would wait for the end of this turn of the
    // event loop, then for the writer thread), so the app's client reads it at once.
    const written = countersClient.execute(
      "INSERT INTO rate_limit_counters (key, used, window_end) VALUES ('prune/now', 1, 2e12)",
    );
    const { rows } = await client.execute("SELECT used FROM rate_limit_counters WHERE key = 'prune/now'");
    expect(rows.map((row) => Number(row.used))).toEqual([1]);
    await written;
  });

  it('admits counters that cost nothing without writing them', async () => {
    const store = new LibsqlCounterStore(gateway.database.client, { log: gateway.deps.log });
    const result = await store.admit(
      's',
      [{ key: 'prune/tokens', windowEnd: 2e12, cost: 0, limit: 10, mustFit: false }],
      1e12,
    );
    expect(result).toEqual({ admitted: true, used: new Map([['prune/tokens', 0]]) });
    expect(await store.read(['prune/tokens', 'prune/none'])).toEqual(
      new Map([
        ['prune/tokens', 0],
        ['prune/none', 0],
      ]),
    );
    const { rows } = await gateway.database.client.execute(
      "SELECT 1 FROM rate_limit_counters WHERE key = 'prune/tokens'",
    );
    expect(rows).toHaveLength(0);
  });
});
