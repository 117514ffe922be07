import type { Client } from '@libsql/client';
import { expect } from 'vitest';
import type { TestClock, TestGateway, Tenant } from './gateway';
import { json } from './envelope';

/** Factories and readers the rate-limit suites share: policies made through the API, counters read from the database. */

export const POLICIES = '/v1/policies/rate-limits';

/**
 * Creates a policy through the API with the tenant's workspace key; answers its id. By default,
 * 1 request a minute per workspace for every model: `body` says what differs.
 */
export async function createPolicy(gateway: Pick<TestGateway, 'request'>, tenant: Tenant, body: Record<string, unknown>): Promise<string> {
  const response = await gateway.request(POLICIES, {
    key: tenant.workspaceKey,
    body: {
      conditions: [{ key: 'model', value: '*' }],
      group_by: [{ key: 'workspace_id' }],
      type: 'requests',
      unit: 'rpm',
      value: 1,
      ...body,
    },
  });
  expect(response.status).toBe(200);
  return ((await json(response)) as { id: string }).id;
}

/** Every counter of a policy, key -> used. */
export async function countersOf(client: Client, policyId: string): Promise<Record<string, number>> {
  const { rows } = await client.execute({
    sql: 'SELECT key, used FROM rate_limit_counters WHERE key LIKE ?',
    args: [`${policyId}/%`],
  });
  return Object.fromEntries(rows.map((row) => [String(row.key), Number(row.used)]));
}

/** What a policy's counters hold together, over its windows and groups. */
export async function usedBy(client: Client, policyId: string): Promise<number> {
  return Object.values(await countersOf(client, policyId)).reduce((a, b) => a + b, 0);
}

/** The tokens a run's current turn reserved at admission (its stored ticket). */
export async function reservedBy(client: Client, runId: string): Promise<number> {
  const { rows } = await client.execute({ sql: 'SELECT rate_limit FROM runs WHERE id = ?', args: [runId] });
  return (JSON.parse(String(rows[0]!.rate_limit)) as { reserved: number }).reserved;
}

/** Moves the clock to one second into the next UTC minute, so that no window ends during a test; answers that minute's start. */
export function freshMinute(clock: TestClock): number {
  const start = Math.floor(clock.now() / 60_000) * 60_000 + 60_000;
  clock.set(start + 1000);
  return start;
}
