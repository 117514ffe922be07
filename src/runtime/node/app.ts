import type { ExecutionContext } from 'hono';
import { createApp, type App } from '../../app';
import type { Deps } from '../../deps';
import { TaskTracker } from './tasks';

/**
 * The app as a Node process serves it. Both runtimes hand Hono an ExecutionContext with each
 * request, and the app keeps work alive past its response through `waitUntil` (a run answered
 * before it ends): on Workers the platform's, here one whose `waitUntil` tracks the work in
 * `tasks`, so that a graceful shutdown can wait for it.
 */
export interface NodeApp {
  app: App;
  tasks: TaskTracker;
  /** A request, as the HTTP server hands it over. */
  fetch(request: Request): Promise<Response>;
  /** A request by path or URL, as Hono's `app.request` (tests and benchmarks, in-process). */
  request(input: Request | string | URL, init?: RequestInit): Promise<Response>;
}

export function createNodeApp(deps: Deps): NodeApp {
  const app = createApp(deps);
  const tasks = new TaskTracker();
  const context: ExecutionContext = {
    waitUntil: (task) => tasks.track(task),
    passThroughOnException: () => {
      // There is no other handler to pass an exception through to: onError answers it.
    },
    props: {},
  };
  return {
    app,
    tasks,
    fetch: (request) => Promise.resolve(app.fetch(request, undefined, context)),
    request: (input, init) => Promise.resolve(app.request(input, init, undefined, context)),
  };
}
