import { defined } from '../support/defined';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PolicyIndex, toActivePolicy } from '../../src/ratelimit/matching';
import { PolicyCache, type PolicyLoader } from '../../src/ratelimit/policy-cache';
import type { CreatePolicyBody } from '../../src/resources/policies/schemas';
import { createPolicy } from '../../src/resources/policies/queries';
import { readPolicyPage, type PolicyPageStart } from '../../src/ratelimit/policy-reads';
import { workspaceCaps } from '../../src/resources/identities/quotas';
import { createTestGateway, type Tenant, type TestGateway } from '../support/gateway';

/**
 * The policy cache reloads what changed, not the workspace: each row carries the version of its
 * last change, a refresh reads the rows above the cached version and updates the index in place,
 * and only a cold cache or a row gone from the workspace (plain SQL) loads everything, a page at a
 * time. Checked against the real database: which pages each refresh reads, and that the cached
 * index always matches what a fresh load of the same rows would.
 */

let gateway: TestGateway;
beforeAll(async () => {
  gateway = await createTestGateway();
});
afterAll(() => gateway.close());

/** A cache whose page reads are recorded: `full` (after a seq) or `changes` (after a version), and the rows each read. */
function recordingCache(options: { beforePage?: (start: PolicyPageStart) => Promise<void> } = {}) {
  const reads: { kind: 'full' | 'changes'; rows: number }[] = [];
  const load: PolicyLoader = async (db, workspaceId, start, limit) => {
    await options.beforePage?.(start);
    const page = await readPolicyPage(db, workspaceId, start, limit);
    reads.push({ kind: 'afterSeq' in start ? 'full' : 'changes', rows: page.policies.length });
    return page;
  };
  return { cache: new PolicyCache(gateway.database.db, { load }), reads };
}

const bodyFor = (i: number, model = `m${i % 7}`): CreatePolicyBody => ({
  name: `p${i}`,
  conditions: [
    { key: 'model', value: model },
    { key: 'workspace_id', value: '*' },
  ],
  group_by: [{ key: 'api_key' }],
  type: 'requests',
  unit: 'rpm',
  value: 10,
});

async function seed(tenant: Tenant, count: number) {
  const scope = { organisationId: tenant.organisationId, workspaceId: tenant.workspace.id };
  const caps = { ...workspaceCaps(gateway.deps.config), policies: 100_000, policyBytes: 100_000_000 };
  const ids: string[] = [];
  for (let i = 0; i < count; i++)
    ids.push(
      (
        await createPolicy(gateway.database.db, scope, bodyFor(i), gateway.clock.now(), {
          createdBy: 'workspace',
          caps,
        })
      ).id,
    );
  return ids;
}

/** The ids a request matches, by a fresh index of every active row: what the cache must agree with. */
async function freshMatch(tenant: Tenant, values: Map<string, string>): Promise<string[]> {
  const page = await readPolicyPage(gateway.database.db, tenant.workspace.id, { afterSeq: 0 }, 1_000_000);
  return new PolicyIndex(page.policies.map(toActivePolicy))
    .match(values)
    .map((policy) => policy.id)
    .sort();
}

const requestOf = (tenant: Tenant, model: string) =>
  new Map([
    ['model', model],
    ['workspace_id', tenant.workspace.id],
  ]);

async function expectAgrees(cache: PolicyCache, tenant: Tenant) {
  const index = await cache.get(tenant.workspace.id);
  for (const model of ['m0', 'm3', 'm6', 'new', 'nothing']) {
    const values = requestOf(tenant, model);
    expect(
      index
        .match(values)
        .map((policy) => policy.id)
        .sort(),
    ).toEqual(await freshMatch(tenant, values));
  }
}

const sql = (statement: string, args: (string | number)[]) => gateway.database.client.execute({ sql: statement, args });

describe('the policy cache', () => {
  it('loads a cold workspace a page at a time, then reads only the rows a change touched', async () => {
    const tenant = await gateway.tenant();
    const ids = await seed(tenant, 450);
    const { cache, reads } = recordingCache();
    expect((await cache.get(tenant.workspace.id)).size).toBe(450);
    expect(reads).toEqual([
      { kind: 'full', rows: 100 },
      { kind: 'full', rows: 100 },
      { kind: 'full', rows: 100 },
      { kind: 'full', rows: 100 },
      { kind: 'full', rows: 50 },
    ]);
    // Unchanged: no read at all beyond the version.
    await cache.get(tenant.workspace.id);
    expect(reads).toHaveLength(5);

    // One change: one page of one row, applied in place.
    await sql('UPDATE rate_limit_policies SET conditions = \'[{"key":"model","value":"new"}]\' WHERE id = ?', [
      defined(ids[0]),
    ]);
    await expectAgrees(cache, tenant);
    expect(reads.slice(5)).toEqual([{ kind: 'changes', rows: 1 }]);
    expect((await cache.get(tenant.workspace.id)).match(requestOf(tenant, 'new')).map((p) => p.id)).toEqual([ids[0]]);

    // An archive removes the policy; a new one comes in; each reads what changed.
    await sql("UPDATE rate_limit_policies SET status = 'archived' WHERE id = ?", [defined(ids[1])]);
    await seed(tenant, 1);
    const index = await cache.get(tenant.workspace.id);
    expect(index.size).toBe(450);
    expect(reads.slice(6)).toEqual([{ kind: 'changes', rows: 2 }]);
    await expectAgrees(cache, tenant);
  });

  it('loads everything again after a row left the workspace (deleted or moved by plain SQL)', async () => {
    const [tenant, other] = [await gateway.tenant(), await gateway.tenant()];
    const ids = await seed(tenant, 5);
    await seed(other, 2);
    const { cache, reads } = recordingCache();
    await cache.get(tenant.workspace.id);
    await cache.get(other.workspace.id);
    expect(reads.map((read) => read.kind)).toEqual(['full', 'full']);

    await sql('DELETE FROM rate_limit_policies WHERE id = ?', [defined(ids[0])]);
    expect((await cache.get(tenant.workspace.id)).size).toBe(4);
    expect(reads.slice(2).map((read) => read.kind)).toEqual(['changes', 'full']);

    // Moved: the old workspace loads everything, the new one reads the row as a change.
    await sql('UPDATE rate_limit_policies SET workspace_id = ? WHERE id = ?', [other.workspace.id, defined(ids[1])]);
    expect((await cache.get(tenant.workspace.id)).size).toBe(3);
    expect((await cache.get(other.workspace.id)).size).toBe(3);
    expect(reads.slice(4).map((read) => read.kind)).toEqual(['changes', 'full', 'changes']);
    await expectAgrees(cache, tenant);
    await expectAgrees(cache, other);
  });

  it('sees a change made between the pages of a load, at once or at the next lookup', async () => {
    const tenant = await gateway.tenant();
    const ids = await seed(tenant, 150);
    let pages = 0;
    const { cache } = recordingCache({
      beforePage: async () => {
        // Between the first and second page of the cold load: change a row already read, and one not yet.
        if (++pages === 2) {
          await sql("UPDATE rate_limit_policies SET status = 'archived' WHERE id = ?", [defined(ids[0])]);
          await sql('UPDATE rate_limit_policies SET conditions = \'[{"key":"model","value":"new"}]\' WHERE id = ?', [
            defined(ids[140]),
          ]);
        }
      },
    });
    await cache.get(tenant.workspace.id);
    await expectAgrees(cache, tenant);
    expect((await cache.get(tenant.workspace.id)).size).toBe(149);
  });

  it('agrees with a fresh load after any sequence of changes', async () => {
    const tenant = await gateway.tenant();
    const other = await gateway.tenant();
    let ids = await seed(tenant, 30);
    const { cache } = recordingCache();
    // A fixed pseudo-random sequence: creates, condition changes, archives, deletes, moves.
    let state = 12345;
    const random = (n: number) => {
      state = (state * 1103515245 + 12345) % 2 ** 31;
      return state % n;
    };
    for (let step = 0; step < 60; step++) {
      const id = defined(ids[random(ids.length)]);
      switch (random(5)) {
        case 0:
          ids.push(...(await seed(tenant, 1 + random(3))));
          break;
        case 1:
          await sql('UPDATE rate_limit_policies SET conditions = ? WHERE id = ?', [
            JSON.stringify([{ key: 'model', value: `m${random(7)}` }]),
            id,
          ]);
          break;
        case 2:
          await sql(
            "UPDATE rate_limit_policies SET status = CASE status WHEN 'active' THEN 'archived' ELSE 'active' END WHERE id = ?",
            [id],
          );
          break;
        case 3:
          await sql('DELETE FROM rate_limit_policies WHERE id = ?', [id]);
          ids = ids.filter((kept) => kept !== id);
          break;
        case 4:
          await sql('UPDATE rate_limit_policies SET workspace_id = ? WHERE id = ?', [other.workspace.id, id]);
          ids = ids.filter((kept) => kept !== id);
          break;
      }
      if (random(3) === 0) await expectAgrees(cache, tenant);
    }
    await expectAgrees(cache, tenant);
  });
});

describe('PolicyIndex in place', () => {
  const policy = (id: string, conditions: [string, string][]) =>
    toActivePolicy({
      id,
      name: '',
      type: 'requests',
      unit: 'rpm',
      value: 1,
      conditions: conditions.map(([key, value]) => ({ key, value })),
      groupBy: [],
    });

  it('upserts and removes policies, keeping matches exact and dropping nothing else', () => {
    const index = new PolicyIndex([policy('a', [['model', 'x']]), policy('b', [['model', '*']]), policy('c', [])]);
    const request = new Map([['model', 'x']]);
    expect(
      index
        .match(request)
        .map((p) => p.id)
        .sort(),
    ).toEqual(['a', 'b', 'c']);
    index.upsert(policy('a', [['model', 'y']]));
    expect(
      index
        .match(request)
        .map((p) => p.id)
        .sort(),
    ).toEqual(['b', 'c']);
    expect(
      index
        .match(new Map([['model', 'y']]))
        .map((p) => p.id)
        .sort(),
    ).toEqual(['a', 'b', 'c']);
    index.remove('b');
    index.remove('c');
    index.remove('unknown');
    expect(index.size).toBe(1);
    expect(index.match(new Map([['model', 'y']])).map((p) => p.id)).toEqual(['a']);
    index.upsert(
      policy('d', [
        ['model', 'y'],
        ['provider', 'openai'],
      ]),
    );
    expect(
      index
        .match(
          new Map([
            ['model', 'y'],
            ['provider', 'openai'],
          ]),
        )
        .map((p) => p.id)
        .sort(),
    ).toEqual(['a', 'd']);
    expect(index.size).toBe(2);
  });
});
