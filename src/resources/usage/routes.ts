import { Hono } from 'hono';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { usagePage } from './objects';
import { usageQuery } from './schemas';
import { usageBuckets } from './queries';
import { resolveWorkspaceScope } from '../identities/workspaces';
import type { ApiEnv } from '../identities/env';

/**
 * GET /v1/usage: tokens and requests per bucket of time, grouped as asked (resources/usage/schemas.ts). A
 * workspace key sees its workspace; an organisation key its whole organisation, or the workspace
 * it names.
 */
export const usageRoutes = new Hono<ApiEnv>().get(
  '/',
  responds({ summary: 'Usage by bucket of time', ok: usagePage, errors: [403] }),
  validate('query', usageQuery),
  async (c) => {
    const query = c.req.valid('query');
    const { db, now } = c.get('deps');
    const workspace = await resolveWorkspaceScope(db, c.get('apiKey'), query.workspace_id, { required: false });
    const page = await usageBuckets(db, {
      scope: workspace ? { workspaceId: workspace.workspaceId } : { organisationId: c.get('apiKey').organisationId },
      startMs: query.start_time === undefined ? undefined : query.start_time * 1000,
      endMs: query.end_time === undefined ? undefined : query.end_time * 1000,
      width: query.bucket_width,
      groupBy: query.group_by ?? [],
      limit: query.limit,
      page: query.page,
      now: now(),
    });
    return c.json(page);
  },
);
