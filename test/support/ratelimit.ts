import { defined } from './defined';
import type { Client } from '@libsql/client';
import { expect } from 'vitest';
import { ApiError } from '../../src/errors';
import type { Admission, RequestAttributes } from '../../src/ratelimit';
import { errorOf, json } from './envelope';
import type { TestClock, TestGateway, Tenant } from './gateway';

/** Factories and readers the rate-limit suites share: policies made through the API, counters read from the database. */

export const POLICIES = '/v1/policies/rate-limits';

/**
 * Creates a policy through the API with the tenant's workspace key; answers its id. By default,
 * 1 request a minute per workspace for every model: `body` says what differs.
 */
export async function createPolicy(
  gateway: Pick<TestGateway, 'request'>,
  tenant: Tenant,
  body: Record<string, unknown>,
): Promise<string> {
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
  return (JSON.parse(String(defined(rows[0]).rate_limit)) as { reserved: number }).reserved;
}

/** Moves the clock to one second into the next UTC minute, so that no window ends during a test; answers that minute's start. */
export function freshMinute(clock: TestClock): number {
  const start = Math.floor(clock.now() / 60_000) * 60_000 + 60_000;
  clock.set(start + 1000);
  return start;
}

/** The rows a workspace holds: threads, messages, runs, run steps. */
export async function rowsOf(client: Client, workspaceId: string) {
  const { rows } = await client.execute({
    sql: `SELECT (SELECT count(*) FROM threads WHERE workspace_id = ?1) AS threads,
                 (SELECT count(*) FROM messages WHERE workspace_id = ?1) AS messages,
                 (SELECT count(*) FROM runs WHERE workspace_id = ?1) AS runs,
                 (SELECT count(*) FROM run_steps WHERE workspace_id = ?1) AS steps`,
    args: [workspaceId],
  });
  const row = defined(rows[0]);
  return {
    threads: Number(row.threads),
    messages: Number(row.messages),
    runs: Number(row.runs),
    steps: Number(row.steps),
  };
}

/** A 429 of a policy of `type`, in the envelope; answers the error. */
export async function expectRefused(response: Response, type: 'requests' | 'tokens') {
  const error = await errorOf(response);
  expect(error).toMatchObject({ status: 429, code: 'rate_limit_exceeded', type, param: null });
  return error;
}

/** A request of `tenant`'s workspace key, as admission sees it: gpt-4o on the `vk-main` OpenAI virtual key. */
export const requestAttributes = (tenant: Tenant, overrides: Partial<RequestAttributes> = {}): RequestAttributes => ({
  api_key: tenant.workspaceKeyId,
  workspace_id: tenant.workspace.id,
  virtual_key: 'vk-main',
  provider: 'openai',
  model: 'gpt-4o',
  metadata: {},
  ...overrides,
});

/** A turn that reserves no tokens: tokens policies then only refuse, and settleTokens only charges. */
export const NO_RESERVATION = { reservation: 0, baseTokens: 0 };

/** The 429 a refused admission throws; fails the test if the request was admitted. */
export async function refusal(admission: Promise<Admission>): Promise<ApiError> {
  const outcome = await admission.then(
    (admitted) => new Error(`expected a refusal, but it was admitted: ${JSON.stringify(admitted)}`),
    (error: unknown) => error,
  );
  if (!(outcome instanceof ApiError) || outcome.code !== 'rate_limit_exceeded') throw outcome;
  return outcome;
}

/**
 * Keys and policy ids that must answer 404 for `id`, a policy of a sibling workspace of `tenant`'s
 * organisation: `tenant`'s workspace key, `stranger`'s keys (another organisation), and ids of no
 * policy (unknown, malformed).
 */
export const outOfReach = (tenant: Tenant, stranger: Tenant, id: string): (readonly [string, string])[] => [
  [tenant.workspaceKey, id],
  [stranger.orgKey, id],
  [stranger.workspaceKey, id],
  [tenant.workspaceKey, '00000000-0000-4000-8000-000000000000'],
  [tenant.workspaceKey, 'not-a-uuid'],
];
