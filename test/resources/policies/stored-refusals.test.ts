import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admitRequest } from '../../../src/ratelimit';
import { MAX_REFUSALS, type Refusal } from '../../../src/ratelimit/counter-store';
import { StoredRefusals } from '../../../src/ratelimit/stored-refusals';
import type { PolicyCountersObject } from '../../../src/resources/policies/objects';
import { createTestGateway, json, type Tenant, type TestGateway } from '../../support/gateway';
import * as ratelimit from '../../support/ratelimit';
import { waitFor } from '../../support/wait';

/**
 * Refusals on the database store (ratelimit/stored-refusals.ts): kept in rate_limit_refusals, so
 * two gateways on one database file each show the other's, and a gateway started again shows those
 * of the one before; written from a bounded buffer about once a second, never on the refused
 * request's path, so a flood of refusals is one write.
 */

const { NO_RESERVATION, POLICIES, refusal, requestAttributes } = ratelimit;

let first: TestGateway;
let second: TestGateway;
beforeAll(async () => {
  first = await createTestGateway();
  // The same database file (and key file): another process would open it the same way.
  second = await createTestGateway({ env: { DATA_DIR: first.dataDir } });
});
afterAll(async () => {
  await second?.close();
  await first?.close();
});

const refuse = (gateway: TestGateway, tenant: Tenant, apiKey: string) =>
  refusal(admitRequest(gateway.deps, requestAttributes(tenant, { api_key: apiKey }), NO_RESERVATION));

async function refusalsOn(gateway: TestGateway, tenant: Tenant, id: string) {
  const response = await gateway.request(`${POLICIES}/${id}/counters`, { key: tenant.workspaceKey });
  expect(response.status).toBe(200);
  return ((await json(response)) as PolicyCountersObject).refusals.map((one) => one.api_key_id);
}

const rowsOf = async (gateway: TestGateway, policyId: string) =>
  Number(
    (
      await gateway.database.client.execute({
        sql: 'SELECT count(*) AS n FROM rate_limit_refusals WHERE policy_id = ?',
        args: [policyId],
      })
    ).rows[0]?.n,
  );

describe('refusals on the database store', () => {
  it("are shared by two gateways on one database file, and outlive a gateway's stop", async () => {
    const tenant = await first.tenant();
    const id = await ratelimit.createPolicy(first, tenant, { value: 1 });
    await admitRequest(first.deps, requestAttributes(tenant, { api_key: 'key-a' }), NO_RESERVATION);
    await refuse(first, tenant, 'key-a');
    await refuse(second, tenant, 'key-b');
    // Each shows its own at once, and the other's once it is written (within about a second).
    const both = (ids: string[]) => ids.length === 2;
    expect(await waitFor(() => refusalsOn(first, tenant, id), both)).toEqual(['key-b', 'key-a']);
    expect(await waitFor(() => refusalsOn(second, tenant, id), both)).toEqual(['key-b', 'key-a']);

    // A third gateway started on the file after both stop writing shows them all.
    await refuse(second, tenant, 'key-c');
    await second.deps.counters.flush();
    const third = await createTestGateway({ env: { DATA_DIR: first.dataDir } });
    try {
      expect(await refusalsOn(third, tenant, id)).toEqual(['key-c', 'key-b', 'key-a']);
    } finally {
      await third.close();
    }
  });

  it('are written once for a flood, after the refused requests, keeping the last 20 of each policy', async () => {
    const client = first.database.countersClient;
    const timers: { task: () => void; ms: number }[] = [];
    let now = 1_000_000;
    const store = new StoredRefusals(client, {
      log: first.deps.log,
      schedule: (task, ms) => timers.push({ task, ms }),
      now: () => now,
    });
    const policyId = `policy-${crypto.randomUUID()}`;
    const refusalAt = (i: number): Refusal => ({
      at: now + i,
      group: '[]',
      apiKeyId: `key-${i}`,
      virtualKey: 'vk',
      requested: 1,
      used: 1,
      limit: 1,
    });
    for (let i = 0; i < 500; i++) store.note(policyId, refusalAt(i));
    // One write is scheduled for the whole flood, and none was made on the refusals' path.
    expect(timers).toHaveLength(1);
    expect(await rowsOf(first, policyId)).toBe(0);
    // Shown all the same, from the buffer.
    expect((await store.of(policyId)).map((one) => one.apiKeyId)).toEqual(
      Array.from({ length: MAX_REFUSALS }, (_, i) => `key-${499 - i}`),
    );
    timers[0]?.task();
    await store.flush();
    expect(await rowsOf(first, policyId)).toBe(MAX_REFUSALS);

    // The next flood, 300 ms after that write, waits for the rest of its second.
    now += 300;
    for (let i = 500; i < 530; i++) store.note(policyId, refusalAt(i));
    expect(timers).toHaveLength(2);
    expect(timers[1]?.ms).toBe(700);
    timers[1]?.task();
    await store.flush();
    // Still the last 20: the older rows were deleted in the same write.
    expect(await rowsOf(first, policyId)).toBe(MAX_REFUSALS);
    expect((await store.of(policyId)).map((one) => one.apiKeyId)).toEqual(
      Array.from({ length: MAX_REFUSALS }, (_, i) => `key-${529 - i}`),
    );
  });
});
