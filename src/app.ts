import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { methodNotAllowed } from 'hono/method-not-allowed';
import { databaseRefusal } from './db/busy-retry';
import type { Deps } from './deps';
import { ApiError, errorResponse, serverError } from './errors';
import { accessLog } from './http/middleware/access-log';
import { apiKeyAuth } from './resources/identities/middleware/api-key-auth';
import { provideDeps, type DepsVariables } from './http/middleware/deps';
import { jsonBody } from './http/middleware/json-body';
import { jsonNewline } from './http/middleware/json-newline';
import { requestId, type RequestIdVariables } from './http/middleware/request-id';
import { requestMetrics } from './http/middleware/request-metrics';
import { responds } from './http/middleware/responds';
import { servedRoutesOnly, shorten } from './http/middleware/served-routes';
import { DOCS_PAGE, DOCS_SCRIPT } from './http/openapi/docs-page';
import { assistantRoutes } from './resources/assistants/routes';
import { chatCompletionRoutes } from './resources/chat-completions/routes';
import { routeGroups } from './resources/route-groups';
import { modelRoutes } from './resources/models/routes';
import { policyRoutes } from './resources/policies/routes';
import { runRoutes, workspaceRunRoutes } from './resources/runs/routes';
import { reconcileRun } from './resources/runs/execution/recovery';
import { threadRoutes } from './resources/threads/routes';
import { usageRoutes } from './resources/usage/routes';
import { metricsRoutes } from './resources/metrics/routes';
import { virtualKeyRoutes } from './resources/virtual-keys/routes';
import { apiKeyRoutes, workspaceRoutes } from './resources/identities/routes';
import { consoleRoutes } from './console/routes';
import { healthObject } from './http/objects';
import type { Availability } from './sandbox/sandbox';

/** What /health says of a sandbox whose first check has not answered yet. */
const NOT_KNOWN_YET: Promise<Availability> = Promise.resolve({ available: false, reason: 'not checked yet' });

/**
 * The gateway, for any runtime: node.ts and worker.ts build `deps` and serve what this returns,
 * handing each request the runtime's ExecutionContext (its waitUntil keeps a run going after the
 * answer).
 *
 *   request id ─> access log ─> (405) ─> /v1: served (404 unsupported_endpoint) ─> JSON body
 *     (413, 415, 400) ─> API-key auth ─> route
 *   every failure: ApiError ─> onError ─> {"error":{"message","type","param","code"}}
 *
 * Where a run lives, from its route (resources/runs/routes.ts, under /v1/threads):
 *   created    resources/runs/commands.ts  createThreadAndRun (and submitToolOutputs, cancelRun): validate,
 *                                admit, write, then hand it to deps.runHost (RunHost in deps.ts)
 *   hosted     Node: runtime/node/run-host.ts, in this process; Workers: runtime/workers/run-host.ts hands it to
 *              its Durable Object, runtime/workers/run-executor.ts
 *   executed   resources/runs/execution/engine.ts    executeRun, one turn; how it ends: resources/runs/execution/outcome.ts
 *   streamed   resources/runs/execution/engine.ts    executeStreamed into resources/runs/execution/event-stream.ts, in order with the
 *                                database by resources/runs/execution/outbox.ts
 *   settled    resources/runs/execution/settle.ts    a run that ends without its answer; resources/runs/execution/recovery.ts for runs whose
 *                                executor died (runtime/node/start.ts's sweep, worker.ts's cron)
 */
export function createApp(deps: Deps) {
  const app = new Hono<{ Variables: DepsVariables & RequestIdVariables }>();

  app.use(provideDeps(deps));
  app.use(requestId());
  app.use(jsonNewline());
  app.use(accessLog());
  app.use(requestMetrics());
  app.use(
    methodNotAllowed({
      app,
      onMethodNotAllowed: (c, methods) => {
        const error = new ApiError('method_not_allowed', `Method ${c.req.method} is not allowed on ${c.req.path}.`, {
          headers: { allow: methods.join(', ') },
        });
        return errorResponse(error);
      },
    }),
  );

  // A liveness check never waits for the sandbox: its availability once known (sandbox/kept-availability.ts
  // gives a known answer settled), else false while the first check is under way. Promise.race
  // settles with the first of two settled promises, in their order.
  app.get('/health', responds({ summary: 'Health', ok: healthObject }), async (c) => {
    const asked = deps.sandbox.availability();
    // A first check goes on after the answer: on Workers, only as long as the request's waitUntil.
    c.executionCtx.waitUntil(asked.catch(() => undefined));
    const found = await Promise.race([asked, NOT_KNOWN_YET]);
    return c.json({ status: 'ok' as const, code_interpreter: found.available });
  });
  // Generated from the routes below and their schemas by `npm run openapi` (http/openapi/generate.ts).
  app.get('/openapi.json', async (c) => c.json(await deps.openApiDocument()));
  app.get('/docs', (c) => c.html(DOCS_PAGE));
  app.get(`/docs/${DOCS_SCRIPT.file}`, async (c) => {
    const script = await deps.staticAsset(DOCS_SCRIPT.file);
    if (!script) throw new Error(`openapi/assets has no ${DOCS_SCRIPT.file}: the package is incomplete.`);
    // Its name changes with its version: an answer never goes stale.
    return c.body(script, 200, {
      'content-type': 'text/javascript; charset=utf-8',
      'cache-control': 'public, max-age=31536000, immutable',
    });
  });

  // The console (docs/console.md): a page and its files, a client of the /v1 API below.
  app.route('/console', consoleRoutes);
  app.route('/metrics', metricsRoutes);

  // What the gateway does not serve is answered first, unauthenticated and unread: a path or a
  // method is not a secret, and a client should learn that before it is asked for a key.
  app.use(
    '/v1/*',
    servedRoutesOnly(),
    jsonBody({ maxBytes: deps.config.GATEWAY_MAX_BODY_BYTES, requestBody: deps.requestBody }),
    apiKeyAuth(),
  );
  // The groups few requests use load on their first request (resources/route-groups.ts).
  const groups = routeGroups();
  app.route('/v1/policies/rate-limits', policyRoutes);
  app.route('/v1/virtual-keys', virtualKeyRoutes);
  app.route('/v1/usage', usageRoutes);
  app.route('/v1/workspaces', workspaceRoutes);
  app.route('/v1/api-keys', apiKeyRoutes);
  app.route('/v1/assistants', assistantRoutes);
  app.route('/v1/threads', threadRoutes(runRoutes, reconcileRun));
  app.route('/v1/runs', workspaceRunRoutes);
  app.route('/v1/conversations', groups.conversations);
  app.route('/v1/containers', groups.containers);
  app.route('/v1/files', groups.files);
  app.route('/v1/chat/completions', chatCompletionRoutes);
  app.route('/v1/completions', groups.completions);
  app.route('/v1/embeddings', groups.embeddings);
  app.route('/v1/moderations', groups.moderations);
  app.route('/v1/models', modelRoutes);
  app.route('/v1/responses', groups.responses);
  app.route('/v1/vector_stores', groups.vectorStores);

  app.notFound((c) =>
    errorResponse(
      new ApiError(
        'route_not_found',
        `Unknown route: ${c.req.method} ${shorten(c.req.path)}.${baseUrlHint(c.req.path)}`,
      ),
    ),
  );

  app.onError((error, c) => {
    const apiError = toApiError(error);
    if (apiError.status >= 500) {
      deps.log.error('request failed', { request_id: c.get('requestId'), path: c.req.path, error });
    }
    return errorResponse(apiError);
  });

  return app;
}

export type App = ReturnType<typeof createApp>;

/**
 * Every route of the API is under /v1, which OpenAI's SDKs expect in their base URL: a path
 * outside it is most often a base URL without its /v1 (OPENAI_BASE_URL=http://127.0.0.1:8787).
 */
function baseUrlHint(path: string): string {
  if (path === '/v1' || path.startsWith('/v1/')) return '';
  return ` The API is served under /v1: a client's base URL ends in /v1 (OPENAI_BASE_URL=http://<gateway>/v1), as in ${shorten(`/v1${path}`)}.`;
}

function toApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof HTTPException) {
    // Hono's own middleware: the validator's malformed JSON, a body over a limit.
    if (error.status === 400) return new ApiError('invalid_json', 'The request body is not valid JSON.');
    if (error.status === 413) return new ApiError('payload_too_large');
  }
  const refusal = databaseRefusal(error);
  if (refusal)
    return new ApiError(refusal === 'busy' ? 'database_busy' : 'database_timeout', undefined, {
      headers: { 'retry-after': '1' },
      cause: error,
    });
  return serverError(error);
}
