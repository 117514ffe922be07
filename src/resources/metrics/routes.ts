import { Hono } from 'hono';
import { count } from 'drizzle-orm';
import type { Db } from '../../db/client';
import { organisations } from '../../db/schema';
import * as z from 'zod';
import { ApiError, errorResponse } from '../../errors';
import type { DepsVariables } from '../../http/middleware/deps';
import { responds } from '../../http/middleware/responds';
import { apiKeyAuth, type ApiKeyVariables } from '../identities/middleware/api-key-auth';

/** Prometheus's text exposition format, the version it asks for by default. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** The answer of an app built without metrics (Deps.metrics is `unservedMetrics`). */
const UNSERVED = 'GET /metrics is not served here: this deployment keeps no metrics (docs/metrics.md).';

/** How many organisations the database holds (GET /metrics is theirs to read only while there is one). */
async function organisationCount(db: Db): Promise<number> {
  const [row] = await db.select({ count: count() }).from(organisations);
  return row?.count ?? 0;
}

/**
 * GET /metrics: the gateway's metrics (metrics/gateway.ts) in Prometheus's text format, for an
 * organisation key only: the figures are every workspace's, and a workspace key sees its own
 * workspace alone. They are every organisation's too: on a gateway several share, only the
 * organisation GATEWAY_METRICS_ORGANISATION names reads them. On Workers they are every isolate's, added up
 * by one object (runtime/workers/metrics.ts). Where no metrics are kept it is a 501, before any key is
 * asked for: that is no secret, as an unsupported endpoint's 404 is not.
 */
export const metricsRoutes = new Hono<{ Variables: DepsVariables & ApiKeyVariables }>().get(
  '/',
  responds({
    summary: "The gateway's metrics in Prometheus's text format",
    ok: () => z.string().describe('Prometheus text exposition format 0.0.4 (docs/metrics.md).'),
    text: METRICS_CONTENT_TYPE,
    errors: [401, 403, 501],
  }),
  async (c, next) => {
    // Returned, not thrown: onError logs every 5xx as the gateway's failure, and this is a deployment's choice.
    if (!c.get('deps').metrics.served) return errorResponse(new ApiError('metrics_unavailable', UNSERVED));
    await next();
  },
  apiKeyAuth(),
  async (c) => {
    const key = c.get('apiKey');
    if (key.kind !== 'organisation') {
      throw new ApiError(
        'organisation_key_required',
        "GET /metrics covers every workspace of the gateway: it takes an organisation key, and this is a workspace's key.",
      );
    }
    const { db, config } = c.get('deps');
    const allowed = config.GATEWAY_METRICS_ORGANISATION;
    if (allowed === undefined ? (await organisationCount(db)) > 1 : key.organisationId !== allowed) {
      throw new ApiError(
        'organisation_key_required',
        'GET /metrics covers every organisation of the gateway: it takes a key of the organisation GATEWAY_METRICS_ORGANISATION ' +
          'names (unset, of the only organisation).',
      );
    }
    const text = await c.get('deps').metrics.render();
    if (text === null) return errorResponse(new ApiError('metrics_unavailable', UNSERVED));
    return c.body(text, 200, { 'content-type': METRICS_CONTENT_TYPE, 'cache-control': 'no-store' });
  },
);
