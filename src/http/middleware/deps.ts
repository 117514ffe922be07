import { createMiddleware } from 'hono/factory';
import type { Deps } from '../../deps';

export type DepsVariables = { deps: Deps };

/**
 * Gives every request the app's deps (`c.get('deps')`): the only way handlers reach the runtime.
 * Request variables are read with `c.get(name)`, never `c.var.name`: Hono's `c.var` builds an
 * object of every variable on each read (Object.fromEntries), about a dozen per streamed run.
 */
export const provideDeps = (deps: Deps) =>
  createMiddleware<{ Variables: DepsVariables }>(async (c, next) => {
    c.set('deps', deps);
    await next();
  });
