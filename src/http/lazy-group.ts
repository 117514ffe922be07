import { Hono, type Context, type Env, type MiddlewareHandler, type Next } from 'hono';
import type { RouterRoute } from 'hono/types';
import { loadOnce } from '../lib/load-once';
import { ownBody } from './middleware/own-body';

/**
 * A route group few requests use, mounted as a light stub and loaded on its first request: its
 * schemas, handlers and use-cases are a chunk of their own (a dynamic `import()`; on Node esbuild
 * splits it out of dist/node.js, scripts/build-node.mjs), which a process that never serves the group
 * never evaluates or holds. docs/development.md ("Memory") says which groups are and what they save.
 *
 * The stub registers each of the group's operations (a method and a path, OPERATIONS beside its
 * routes) as the group itself would, in its place among the app's routes, so that routing precedence,
 * servedRoutesOnly's 404 (http/middleware/served-routes.ts) and the 405s of app.ts's methodNotAllowed
 * answer before the group loads exactly as they do after. Its handler loads the group once (a
 * concurrent first hit waits for the same load) and runs, in this request's context, the group's own
 * middleware and the handlers of the route it stands for: the app's middleware, error handler and
 * parameters are the request's as for any route. A load that fails throws, so the request gets the
 * envelope's 500 (app.ts's onError), and the next request tries again.
 *
 * One difference from a group mounted whole: an error a handler throws reaches the group's middleware
 * as a throw from their `next()` on its way to onError, where Hono would have answered it first and
 * returned; the groups' middleware (workspace(), assistantsBeta()) do nothing after `next()`.
 *
 * The group may use middleware only for all its paths and before its routes (`.use(mw)` first): the
 * stub cannot tell which of a narrower middleware's paths a request matches without the group's router. A group whose routes are
 * not exactly its OPERATIONS, in order, fails to load (test/http/lazy-group.test.ts loads each).
 */

/**
 * One operation of a group: its method, its path relative to where the group is mounted, and
 * `'own-body'` when its route is marked with ownBody() (http/middleware/own-body.ts), which jsonBody
 * looks for among the request's routes before the group would load.
 */
export type Operation = readonly [method: string, path: string, body?: 'own-body'];

interface Group {
  name: string;
  /** Each operation's middleware and handlers, in the order the group runs them; loaded once. */
  chains(): Promise<Map<string, MiddlewareHandler[]>>;
  /** The group's own routes as mounted at `basePath` (openApiDocument describes them). */
  routesUnder(basePath: string): Promise<RouterRoute[]>;
  loaded(): boolean;
}

/** The stubs' handlers, to the group each stands for: how openApiDocument and loadedGroups find them. */
const stubs = new WeakMap<object, Group>();

/**
 * The stub of the group `load` resolves to, named `name` (for loadedGroups), serving `operations`:
 * mount it where the group was (`app.route('/v1/responses', lazyGroup(…))`).
 */
export function lazyGroup<E extends Env>(
  name: string,
  operations: readonly Operation[],
  load: () => Promise<Hono<E>>,
): Hono<E> {
  let done = false;
  // A failed load (or a group whose routes drift from its operations) is tried again by the next request.
  const loaded = loadOnce(() =>
    load().then((group) => {
      const chains = chainsOf(name, group, operations);
      done = true;
      return { group, chains };
    }),
  );
  const group: Group = {
    name,
    chains: async () => (await loaded()).chains,
    routesUnder: async (basePath) => new Hono().route(basePath, (await loaded()).group).routes,
    loaded: () => done,
  };
  const stub = new Hono<E>();
  for (const [method, path, body] of operations) {
    const key = operationKey(method, path);
    const handler: MiddlewareHandler = async (c, next) => {
      const chain = (await group.chains()).get(key);
      if (!chain) throw new Error(`The ${name} group lost its operation ${key}.`);
      await runChain(chain, c, next);
    };
    stubs.set(handler, group);
    // The mark after the handler, which answers without calling it: Hono's matched routes show it.
    stub.on(method, path, handler, ...(body === 'own-body' ? [ownBody()] : []));
  }
  return stub;
}

/** The group a stub's handler stands for, or undefined for any other handler. */
export const lazyGroupOf = (handler: object): Group | undefined => stubs.get(handler);

/** The names of the lazy groups of `app` that have loaded, in the app's order. */
export function loadedGroups(app: { routes: RouterRoute[] }): string[] {
  const groups = new Set(app.routes.flatMap(({ handler }) => stubs.get(handler) ?? []));
  return [...groups].filter((group) => group.loaded()).map((group) => group.name);
}

const operationKey = (method: string, path: string) => `${method} ${path}`;

/**
 * Each operation's chain: the group's middleware for all its paths, then the operation's own
 * handlers, in the order the group registered them. Throws when the group's operations are not
 * `operations` in their order (own-body marks included), or when it has a middleware for some paths only.
 */
function chainsOf<E extends Env>(
  name: string,
  group: Hono<E>,
  operations: readonly Operation[],
): Map<string, MiddlewareHandler[]> {
  const middleware: MiddlewareHandler[] = [];
  const chains = new Map<string, MiddlewareHandler[]>();
  const ownBodies = new Set<string>();
  for (const route of group.routes) {
    if (route.method === 'ALL') {
      if (route.path !== '/*' || chains.size > 0)
        throw new Error(`The ${name} group has middleware on ${route.path} or after its routes.`);
      middleware.push(route.handler);
      continue;
    }
    const key = operationKey(route.method, route.path);
    const chain = chains.get(key) ?? [...middleware];
    chain.push(route.handler);
    chains.set(key, chain);
    if (route.handler === ownBody()) ownBodies.add(key);
  }
  const served = [...chains.keys()].map((key) => (ownBodies.has(key) ? `${key} own-body` : key)).join(', ');
  const declared = operations.map(([method, path, body]) => `${operationKey(method, path)}${body ? ` ${body}` : ''}`);
  if (served !== declared.join(', '))
    throw new Error(
      `The ${name} group serves ${served}; its stub declares ${declared.join(', ')}. Update its OPERATIONS.`,
    );
  return chains;
}

/**
 * Runs `chain` in `c` as Hono's compose runs a route's handlers: each is given the next as `next`,
 * a Response one returns becomes the answer, and after the last comes `next`.
 */
async function runChain(chain: MiddlewareHandler[], c: Context, next: Next): Promise<void> {
  const dispatch = async (index: number): Promise<void> => {
    const handler = chain[index];
    if (!handler) return next();
    const answer = await handler(c, () => dispatch(index + 1));
    if (answer instanceof Response && !c.finalized) c.res = answer;
  };
  await dispatch(0);
}
