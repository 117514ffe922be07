import { exports } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';
import { errorOf } from '../support/envelope';

/**
 * GET /metrics on workerd: an isolate keeps no figures worth scraping (docs/metrics.md), so the
 * Worker answers 501 in the one envelope, saying where to look, whatever key is sent or none; and
 * a client's X-Request-Id is kept there as on Node.
 */

const tenant = inject('workersTenant');

const scrape = (headers: Record<string, string>) => exports.default.fetch('http://gateway/metrics', { headers });

describe('GET /metrics on workerd', () => {
  it.each([
    ['an organisation key', { authorization: `Bearer ${tenant.orgKey}` }],
    ['no key', {}],
  ])('answers 501 metrics_unavailable with %s', async (_, headers) => {
    const response = await scrape(headers);
    expect(response.status).toBe(501);
    const error = await errorOf(response);
    expect(error).toMatchObject({ code: 'metrics_unavailable', type: 'server_error', param: null });
    expect(error.message).toMatch(/Analytics Engine/);
    expect(response.headers.get('x-should-retry')).toBe('false');
  });

  it("keeps a client's valid X-Request-Id", async () => {
    const response = await exports.default.fetch('http://gateway/health', { headers: { 'x-request-id': 'edge-42' } });
    expect(response.headers.get('x-request-id')).toBe('edge-42');
    await response.body?.cancel();
  });
});
