import { Hono, type Context } from 'hono';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { runUsagePage, usagePage } from './objects';
import { runUsageQuery, usageQuery } from './schemas';
import { runBuckets, usageBuckets, type BucketRequest } from './queries';
import { resolveWorkspaceScope } from '../identities/workspaces';
import type { ApiEnv } from '../identities/env';

/**
 * GET /v1/usage: tokens and requests per bucket of time, grouped as asked (resources/usage/schemas.ts);
 * GET /v1/usage/runs (a gateway extension): runs by status per bucket. A workspace key sees its
 * workspace; an organisation key its whole organisation, or the workspace it names.
 */
export const usageRoutes = new Hono<ApiEnv>()
  .get(
    '/',
    responds({ summary: 'Usage by bucket of time', ok: usagePage, errors: [403] }),
    validate('query', usageQuery),
    async (c) => {
      const query = c.req.valid('query');
      const request = await bucketRequest(c, query);
      return c.json(await usageBuckets(c.get('deps').db, { ...request, groupBy: query.group_by ?? [] }));
    },
  )
  .get(
    '/runs',
    responds({ summary: 'Runs by status by bucket of time', ok: runUsagePage, errors: [403] }),
    validate('query', runUsageQuery),
    async (c) => c.json(await runBuckets(c.get('deps').db, await bucketRequest(c, c.req.valid('query')))),
  );

/** The buckets a query asks for, in the scope its key may see. */
async function bucketRequest(
  c: Context<ApiEnv>,
  query: {
    start_time?: number | undefined;
    end_time?: number | undefined;
    bucket_width: BucketRequest['width'];
    limit?: number | undefined;
    page?: string | undefined;
    workspace_id?: string | undefined;
  },
): Promise<BucketRequest> {
  const { db, now } = c.get('deps');
  const workspace = await resolveWorkspaceScope(db, c.get('apiKey'), query.workspace_id, { required: false });
  return {
    scope: workspace ? { workspaceId: workspace.workspaceId } : { organisationId: c.get('apiKey').organisationId },
    startMs: query.start_time === undefined ? undefined : query.start_time * 1000,
    endMs: query.end_time === undefined ? undefined : query.end_time * 1000,
    width: query.bucket_width,
    limit: query.limit,
    page: query.page,
    now: now(),
  };
}
