import type { Config } from '../../config';
import type { Db } from '../../db/client';
import { workspaces } from '../../db/schema';
import type { UpstreamUrlOptions } from '../../lib/upstream-url';

/**
 * The upstream address rules in force (lib/upstream-url.ts judges a URL by them), at a virtual
 * key's creation and again before every upstream fetch. GATEWAY_ALLOW_PRIVATE_UPSTREAMS true or
 * false decides private addresses alone. Unset, they are allowed while the database holds a single
 * workspace: a local model server works out of the box for its one user, and a shared gateway is
 * no port scanner for its tenants. A key created while there was one workspace stops reaching
 * private addresses when a second one appears, since runs check again.
 */

/**
 * How long a process reuses the workspace count: runs check the rules before every upstream fetch
 * and must not pay a query each. A second workspace is noticed within this time (at once by a
 * virtual key's creation, which reads the count afresh).
 */
export const WORKSPACE_COUNT_TTL_MS = 5_000;

const counts = new WeakMap<Db, { single: Promise<boolean>; until: number }>();

export async function upstreamRules(
  db: Db,
  config: Pick<Config, 'GATEWAY_ALLOW_PRIVATE_UPSTREAMS' | 'GATEWAY_ALLOWED_UPSTREAM_HOSTS'>,
  clock: { now: number; fresh?: boolean },
): Promise<UpstreamUrlOptions> {
  const allowedHosts = config.GATEWAY_ALLOWED_UPSTREAM_HOSTS;
  switch (config.GATEWAY_ALLOW_PRIVATE_UPSTREAMS) {
    case true:
      return { allowPrivate: true, allowedHosts };
    case false:
      return { allowPrivate: false, allowedHosts, privateRefusedBecause: 'GATEWAY_ALLOW_PRIVATE_UPSTREAMS is false' };
    case undefined:
      if (await singleWorkspace(db, clock)) return { allowPrivate: true, allowedHosts };
      return {
        allowPrivate: false,
        allowedHosts,
        privateRefusedBecause:
          'GATEWAY_ALLOW_PRIVATE_UPSTREAMS is unset, which allows them only while the database holds a single workspace, and it holds several',
      };
  }
}

function singleWorkspace(db: Db, clock: { now: number; fresh?: boolean }): Promise<boolean> {
  const cached = counts.get(db);
  if (cached && !clock.fresh && cached.until > clock.now) return cached.single;
  const single = Promise.resolve(db.$count(workspaces)).then((count) => count === 1);
  counts.set(db, { single, until: clock.now + WORKSPACE_COUNT_TTL_MS });
  // A failed read is not kept: the next caller tries again.
  single.catch(() => counts.get(db)?.single === single && counts.delete(db));
  return single;
}
