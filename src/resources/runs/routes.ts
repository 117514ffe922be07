import { Hono, type Context } from 'hono';
import { validate } from '../../http/middleware/validate';
import {
  cancelRun,
  createRun,
  createThreadAndRun,
  listRuns,
  listWorkspaceRuns,
  listRunSteps,
  modifyRun,
  retrieveRun,
  retrieveRunStep,
  retrieveRunTrace,
  submitToolOutputs,
  type RunAnswer,
  type RunPath,
} from './commands';
import { eventStreamResponse } from './execution/event-stream';
import { requestContext } from '../../http/request-context';
import { cursorListQuery } from '../../http/schemas';
import {
  createRunBody,
  createThreadAndRunBody,
  listRunStepsQuery,
  listWorkspaceRunsQuery,
  modifyRunBody,
  runStepIncludeQuery,
  submitToolOutputsBody,
  type RunStepInclude,
} from './schemas';
import { isTerminal } from '../../db/run-statuses';
import { listObject } from '../../http/lists';
import { toRunJson, toRunTraceJson, toStepJson } from './wire';
import type { ApiEnv, WorkspaceEnv } from '../identities/env';
import { assistantsBeta } from '../../http/middleware/assistants-beta';
import { workspace } from '../identities/middleware/workspace';
import { responds } from '../../http/middleware/responds';
import { listOf } from '../../http/objects';
import { runObject, runStepObject, runTraceObject } from './objects';

/** How often the OpenAI SDK's pollers should ask about a run that is still going. */
const POLL_AFTER_MS = '250';

/**
 * Runs, under /v1/threads (resources/threads/routes.ts mounts this behind the workspace): createAndRun, a
 * run on a thread, the thread's runs, a run's state and metadata, tool outputs, cancel, run steps.
 * Each handler validates, calls one use-case of resources/runs/commands.ts and answers what it returns.
 *
 * `include[]` (file search results' content in run steps) is taken where OpenAI takes it: listing
 * and retrieving steps, and creating a run, for the steps its stream shows.
 */
export const runRoutes = new Hono<WorkspaceEnv>()
  .post(
    '/runs',
    responds({ summary: 'Create a thread and run it', ok: runObject, stream: 'run', errors: [429] }),
    validate('json', createThreadAndRunBody),
    async (c) =>
      answer(
        c,
        await createThreadAndRun(
          c.get('deps'),
          c.get('actor'),
          c.get('settings'),
          c.req.valid('json'),
          requestContext(c),
        ),
      ),
  )
  .post(
    '/:thread_id/runs',
    responds({ summary: 'Create a run', ok: runObject, stream: 'run', errors: [429] }),
    validate('query', runStepIncludeQuery),
    validate('json', createRunBody),
    async (c) => {
      const include = includesContent(c.req.valid('query'));
      return answer(
        c,
        await createRun(
          c.get('deps'),
          c.get('actor'),
          c.get('settings'),
          c.req.param('thread_id'),
          c.req.valid('json'),
          requestContext(c),
          include,
        ),
      );
    },
  )
  .get(
    '/:thread_id/runs',
    responds({ summary: 'List runs', ok: listOf(runObject) }),
    validate('query', cursorListQuery),
    async (c) => {
      const page = await listRuns(
        c.get('deps'),
        c.get('actor').workspaceId,
        c.req.param('thread_id'),
        c.req.valid('query'),
      );
      return c.json(listObject(page, toRunJson));
    },
  )
  .get('/:thread_id/runs/:run_id', responds({ summary: 'Retrieve a run', ok: runObject }), async (c) => {
    const run = await retrieveRun(c.get('deps'), c.get('actor').workspaceId, runPath(c));
    const headers: Record<string, string> = isTerminal(run.status) ? {} : { 'openai-poll-after-ms': POLL_AFTER_MS };
    return c.json(toRunJson(run), 200, headers);
  })
  .post(
    '/:thread_id/runs/:run_id',
    responds({ summary: 'Modify a run', ok: runObject }),
    validate('json', modifyRunBody),
    async (c) =>
      c.json(
        toRunJson(
          await modifyRun(
            c.get('deps'),
            c.get('settings'),
            c.get('actor').workspaceId,
            runPath(c),
            c.req.valid('json'),
          ),
        ),
      ),
  )
  .post(
    '/:thread_id/runs/:run_id/submit_tool_outputs',
    responds({ summary: 'Submit tool outputs to a run', ok: runObject, stream: 'run', errors: [429] }),
    validate('json', submitToolOutputsBody),
    async (c) =>
      answer(
        c,
        await submitToolOutputs(
          c.get('deps'),
          c.get('actor'),
          c.get('settings'),
          runPath(c),
          c.req.valid('json'),
          requestContext(c),
        ),
      ),
  )
  .post('/:thread_id/runs/:run_id/cancel', responds({ summary: 'Cancel a run', ok: runObject }), async (c) =>
    c.json(toRunJson(await cancelRun(c.get('deps'), c.get('actor').workspaceId, runPath(c), requestContext(c)))),
  )
  .get(
    '/:thread_id/runs/:run_id/steps',
    responds({ summary: 'List run steps', ok: listOf(runStepObject) }),
    validate('query', listRunStepsQuery),
    async (c) => {
      const { run, page } = await listRunSteps(
        c.get('deps'),
        c.get('actor').workspaceId,
        runPath(c),
        c.req.valid('query'),
      );
      const include = includesContent(c.req.valid('query'));
      return c.json(listObject(page, (step) => toStepJson(step, run, include)));
    },
  )
  .get(
    '/:thread_id/runs/:run_id/steps/:step_id',
    responds({ summary: 'Retrieve a run step', ok: runStepObject }),
    validate('query', runStepIncludeQuery),
    async (c) => {
      const { run, step } = await retrieveRunStep(
        c.get('deps'),
        c.get('actor').workspaceId,
        runPath(c),
        c.req.param('step_id'),
      );
      return c.json(toStepJson(step, run, includesContent(c.req.valid('query'))));
    },
  );

/**
 * GET /v1/runs (a gateway extension, for the console): the workspace's runs across its threads,
 * newest first, filtered by status, assistant or thread. OpenAI lists runs per thread only.
 * GET /v1/runs/{run_id}/trace: a run's log line, provider attempts and events (wire.ts, toRunTraceJson).
 */
export const workspaceRunRoutes = new Hono<ApiEnv>()
  .use(assistantsBeta(), workspace())
  .get(
    '/',
    responds({ summary: "List the workspace's runs", ok: listOf(runObject) }),
    validate('query', listWorkspaceRunsQuery),
    async (c) => {
      const page = await listWorkspaceRuns(c.get('deps'), c.get('actor').workspaceId, c.req.valid('query'));
      return c.json(listObject(page, toRunJson));
    },
  )
  .get('/:run_id/trace', responds({ summary: "Retrieve a run's trace", ok: runTraceObject }), async (c) => {
    const deps = c.get('deps');
    const { run, steps, virtualKey } = await retrieveRunTrace(deps, c.get('actor').workspaceId, c.req.param('run_id'));
    return c.json(toRunTraceJson(run, steps, virtualKey, deps.now()));
  });

/** Whether `include[]` asks for the content of file search results. */
function includesContent(query: { 'include[]'?: RunStepInclude[] }): boolean {
  return query['include[]']?.includes('step_details.tool_calls[*].file_search.results[*].content') ?? false;
}

// The helpers below take the parts of a handler's Context they read: a Context is typed by its
// route's whole environment, which differs from route to route.

/** The run a path names. */
function runPath(c: { req: { param(name: 'thread_id' | 'run_id'): string } }): RunPath {
  return { threadId: c.req.param('thread_id'), runId: c.req.param('run_id') };
}

/** A run just put in progress: the queued run object, or its event stream. */
function answer(c: Context, answer: RunAnswer): Response {
  if (!answer.stream) return c.json(toRunJson(answer.run), 200, answer.headers);
  return eventStreamResponse(answer.events, answer.headers);
}
