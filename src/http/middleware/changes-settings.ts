import { createMiddleware } from 'hono/factory';
import type { DepsVariables } from './deps';

/**
 * Used by the route groups whose writes change the settings every request reads (assistants,
 * virtual keys, API keys, rate-limit policies: the tables db/settings-cache.ts keeps, whose
 * triggers move settings_generation): after a request that may have written, this process or
 * isolate forgets the generation it last read (SettingsCache.changed), so that no request starts
 * on settings it knows to be past.
 */
export const changesSettings = () =>
  createMiddleware<{ Variables: DepsVariables }>(async (c, next) => {
    if (c.req.method === 'GET' || c.req.method === 'HEAD') return next();
    try {
      await next();
    } finally {
      c.get('deps').settings.changed();
    }
  });
