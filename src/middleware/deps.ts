import { createMiddleware } from 'hono/factory';
import type { Deps } from '../deps';

export type DepsVariables = { deps: Deps };

/** Gives every request the app's deps (`c.var.deps`): the only way handlers reach the runtime. */
export const provideDeps = (deps: Deps) =>
  createMiddleware<{ Variables: DepsVariables }>(async (c, next) => {
    c.set('deps', deps);
    await next();
  });
