import { expect } from 'vitest';
import { errorOf } from './envelope';

/**
 * GET /metrics' refusals, the same on Node and on Workers: no key and an unknown key are 401s, a
 * workspace key a 403 (the figures are every workspace's), each in the one envelope, the key never in it.
 */
export async function expectScrapeRefusals(
  scrape: (headers: Record<string, string>) => Promise<Response>,
  workspaceKey: string,
): Promise<void> {
  const missing = await scrape({});
  expect(missing.status).toBe(401);
  expect((await errorOf(missing)).code).toBe('missing_api_key');
  const unknown = await scrape({ authorization: 'Bearer gk_not_a_key_of_this_gateway_000000000000' });
  expect(unknown.status).toBe(401);
  expect((await errorOf(unknown)).code).toBe('invalid_api_key');
  const workspace = await scrape({ authorization: `Bearer ${workspaceKey}` });
  expect(workspace.status).toBe(403);
  const error = await errorOf(workspace);
  expect(error).toMatchObject({ code: 'organisation_key_required', type: 'invalid_request_error', param: null });
  expect(error.message).toMatch(/organisation key/);
  expect(JSON.stringify(error)).not.toContain(workspaceKey);
}
