import { exports } from 'cloudflare:workers';
import { describe, expect, inject, it } from 'vitest';
import { CONSOLE_ASSETS } from '../../src/console/assets';
import { json } from '../support/envelope';

/**
 * The console on workerd: its page from the Worker, its files from the [assets] binding (outside the
 * Worker's bundle), each byte for byte what the page's integrity names; and the two routes it signs
 * in with, on the Workers runtime. The pages themselves are tested in a browser on Node
 * (test/console/console.test.ts): the same app, the same files.
 */

const tenant = inject('workersTenant');
const get = (path: string, key?: string) =>
  exports.default.fetch(`http://gateway${path}`, { headers: key ? { authorization: `Bearer ${key}` } : {} });

describe('/console on workerd', () => {
  it('serves the page uncached and its files immutable, from the static assets', async () => {
    const page = await get('/console');
    expect(page.status).toBe(200);
    expect(page.headers.get('cache-control')).toBe('no-cache');
    const html = await page.text();
    for (const asset of [CONSOLE_ASSETS.script, CONSOLE_ASSETS.style]) {
      expect(html).toContain(`/console/assets/${asset.file}" integrity="${asset.integrity}"`);
      const file = await get(`/console/assets/${asset.file}`);
      expect(file.status).toBe(200);
      expect(file.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      const digest = new Uint8Array(await crypto.subtle.digest('SHA-384', await file.arrayBuffer()));
      expect(`sha384-${btoa(String.fromCharCode(...digest))}`).toBe(asset.integrity);
    }
    const other = await get('/console/assets/openapi.json');
    expect(other.status).toBe(404);
    await other.arrayBuffer();
  });

  it("signs in as the console does: the key's workspaces and API keys", async () => {
    const workspaces = await json(await get('/v1/workspaces', tenant.workspaceKey));
    expect(workspaces.data.map((workspace: { id: string }) => workspace.id)).toEqual([tenant.workspace.id]);
    const keys = await json(await get('/v1/api-keys', tenant.workspaceKey));
    expect(keys.data.length).toBeGreaterThan(0);
    expect(JSON.stringify(keys)).not.toContain(tenant.workspaceKey);
  });
});
