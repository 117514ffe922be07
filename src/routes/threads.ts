import { Hono, type Context } from 'hono';
import type { AppEnv } from '../deps';
import { ApiError } from '../errors';
import { assistantsBeta } from '../middleware/assistants-beta';
import { validate } from '../middleware/validate';
import { virtualKey } from '../middleware/virtual-key';
import { workspace } from '../middleware/workspace';
import { admitRequest, promptChars, settleTokens, turnReservation, type Admission, type TurnTokens } from '../ratelimit';
import { METADATA_HEADER, requestMetadata } from '../ratelimit/attributes';
import { asQueued, insertable, prepareThreadAndRun } from '../runs/create';
import type { Preloaded, RequestContext } from '../runs/host';
import { SSE_HEADERS, type ServerSentEvent } from '../runs/event-stream';
import { reconcileRun } from '../runs/recovery';
import { settleRun } from '../runs/settle';
import { createThreadAndRunBody, submitToolOutputsBody } from '../schemas/runs';
import { listMessagesQuery } from '../schemas/threads';
import { getAssistant } from '../services/assistants';
import {
  acceptToolOutputs,
  getRun,
  insertThreadAndRun,
  isTerminal,
  leaseMs,
  toolCallsStepInProgress,
  updateRun,
  type RunRow,
  type StepRow,
} from '../services/runs';
import { getThread, listMessages, type MessageRow } from '../services/threads';
import { getVirtualKey, type VirtualKey } from '../services/virtual-keys';
import { listObject } from '../wire/lists';
import { toRunJson, toStepJson } from '../wire/runs';
import { toMessageJson, toThreadJson } from '../wire/threads';

/** How often the OpenAI SDK's pollers should ask about a run that is still going. */
const POLL_AFTER_MS = '250';

/** /v1/threads: createAndRun, a run's state, tool outputs, cancel, and the thread's messages. */
export const threadRoutes = new Hono<AppEnv>()
  .use(assistantsBeta(), workspace())
  .post('/runs', virtualKey(), validate('json', createThreadAndRunBody), async (c) => {
    const body = c.req.valid('json');
    const { deps, workspace: scope, virtualKey: key } = c.var;
    const assistant = await getAssistant(deps.db, scope.workspaceId, body.assistant_id);
    const prepared = prepareThreadAndRun(deps, {
      body,
      assistant,
      workspaceId: scope.workspaceId,
      virtualKey: key,
      apiKeyId: c.var.apiKey.id,
    });
    const run = prepared.run;
    const admission = await admit(c, key, run.model, run.metadata, firstTurn(c, run, prepared.messages));
    run.rateLimit = admission.ticket;
    const rows = insertable(prepared);
    await unlessWritten(c, admission, insertThreadAndRun(deps.db, rows.thread, rows.messages, rows.run));
    const queued = toRunJson(asQueued(run));
    return respond(c, run, admission, body.stream === true, {
      acknowledged: queued,
      leading: [
        ['thread.created', toThreadJson(prepared.thread)],
        ['thread.run.created', queued],
        ['thread.run.queued', queued],
      ],
      preloaded: { virtualKey: key, conversation: prepared.messages, firstTurn: true },
    });
  })
  .get('/:thread_id', async (c) => {
    const thread = await getThread(c.var.deps.db, c.var.workspace.workspaceId, c.req.param('thread_id'));
    return c.json(toThreadJson(thread));
  })
  .get('/:thread_id/messages', validate('query', listMessagesQuery), async (c) => {
    const { db } = c.var.deps;
    const thread = await getThread(db, c.var.workspace.workspaceId, c.req.param('thread_id'));
    return c.json(listObject(await listMessages(db, thread.id, c.req.valid('query')), toMessageJson));
  })
  .get('/:thread_id/runs/:run_id', async (c) => {
    const run = await currentRun(c);
    const headers: Record<string, string> = isTerminal(run.status) ? {} : { 'openai-poll-after-ms': POLL_AFTER_MS };
    return c.json(toRunJson(run), 200, headers);
  })
  .post('/:thread_id/runs/:run_id/submit_tool_outputs', validate('json', submitToolOutputsBody), async (c) => {
    const body = c.req.valid('json');
    const { deps } = c.var;
    const run = await currentRun(c);
    if (run.status !== 'requires_action') {
      throw new ApiError('run_not_active', `Runs in status '${run.status}' do not accept tool outputs.`);
    }
    const step = await toolCallsStepInProgress(deps.db, run.id);
    const outputs = matchToolOutputs(run, body.tool_outputs);
    const key = await getVirtualKey(deps.db, run.virtualKeyId);
    if (!key || key.revokedAt !== null) {
      throw new ApiError('invalid_virtual_key', "The run's virtual key was revoked; the run cannot continue.");
    }
    const admission = await admit(c, key, run.model, run.metadata, nextTurn(c, run, step, outputs));
    const results = await unlessWritten(
      c,
      admission,
      acceptToolOutputs(deps.db, run.id, step, outputs, deps.now(), leaseMs(deps.config), admission.ticket),
    );
    if (!results.run) {
      await settleTokens(deps, admission.ticket, 0);
      throw new ApiError('run_not_active', 'The run stopped waiting for tool outputs (they were submitted already, or it was cancelled or expired).');
    }
    const queued = toRunJson(asQueued(results.run));
    return respond(c, results.run, admission, body.stream === true, {
      acknowledged: queued,
      leading: [
        ['thread.run.step.completed', toStepJson(results.step, results.run)],
        ['thread.run.queued', queued],
      ],
      preloaded: undefined,
    });
  })
  .post('/:thread_id/runs/:run_id/cancel', async (c) => {
    const { deps } = c.var;
    const run = await currentRun(c);
    switch (run.status) {
      case 'requires_action': {
        // Nothing executes it: it ends here.
        const settled = await settleRun(deps, run.id, [run.status], { status: 'cancelled' });
        return c.json(toRunJson(settled.run ?? (await currentRun(c))));
      }
      case 'in_progress': {
        const [cancelling] = await updateRun(deps.db, run.id, ['in_progress'], { status: 'cancelling' });
        deps.runHost.cancel(run.id, requestContext(c));
        return c.json(toRunJson(cancelling ?? (await currentRun(c))));
      }
      case 'cancelling':
        return c.json(toRunJson(run));
      default:
        throw new ApiError('run_not_active', `Cannot cancel run with status '${run.status}'.`);
    }
  });

/** The run of the path, in the caller's workspace, settled first if it was left behind. */
async function currentRun(c: Context<AppEnv>): Promise<RunRow> {
  const { deps, workspace: scope } = c.var;
  const run = await getRun(deps.db, scope.workspaceId, c.req.param('thread_id')!, c.req.param('run_id')!);
  return reconcileRun(deps, run);
}

/**
 * Rate-limit admission for run traffic: creating a run and continuing one both spend tokens. The
 * model is the run's, which through an Azure key is the deployment's (servedModel).
 */
function admit(
  c: Context<AppEnv>,
  key: VirtualKey,
  model: string,
  metadata: Record<string, string>,
  turn: TurnTokens,
): Promise<Admission> {
  return admitRequest(
    c.var.deps,
    {
      api_key: c.var.apiKey.id,
      workspace_id: c.var.workspace.workspaceId,
      virtual_key: key.slug,
      provider: key.provider,
      model,
      metadata: requestMetadata(metadata, c.req.header(METADATA_HEADER)),
    },
    turn,
  );
}

/** What a new run's first turn reserves: its instructions, tools and messages are its prompt. */
function firstTurn(c: Context<AppEnv>, run: RunRow, messages: MessageRow[]): TurnTokens {
  const estimate = {
    promptChars: promptChars([run.instructions, run.tools, messages.map((message) => message.content)]),
    knownPromptTokens: 0,
    maxCompletionTokens: run.maxCompletionTokens,
    completionTokensSoFar: 0,
  };
  return { reservation: turnReservation(estimate, c.var.deps.config.GATEWAY_TOKEN_RESERVATION), baseTokens: 0 };
}

/**
 * What the turn after tool outputs reserves: its prompt is the last turn's tokens (that turn's
 * prompt and its calls, the step's usage) and the outputs.
 */
function nextTurn(c: Context<AppEnv>, run: RunRow, step: StepRow, outputs: Map<string, string>): TurnTokens {
  const estimate = {
    promptChars: promptChars([...outputs.values()]),
    knownPromptTokens: step.usage?.total_tokens ?? 0,
    maxCompletionTokens: run.maxCompletionTokens,
    completionTokensSoFar: run.usage?.completion_tokens ?? 0,
  };
  return {
    reservation: turnReservation(estimate, c.var.deps.config.GATEWAY_TOKEN_RESERVATION),
    baseTokens: run.usage?.total_tokens ?? 0,
  };
}

/**
 * The write that makes an admitted turn real. If it fails, the turn never executes and nothing
 * would release its token reservation: it goes back at once.
 */
async function unlessWritten<T>(c: Context<AppEnv>, admission: Admission, write: Promise<T>): Promise<T> {
  try {
    return await write;
  } catch (error) {
    await settleTokens(c.var.deps, admission.ticket, 0);
    throw error;
  }
}

/**
 * Each tool call of required_action gets exactly one output: an unknown id, a repeated id or a
 * missing call is a 400 naming it, and nothing is written.
 */
function matchToolOutputs(run: RunRow, outputs: { tool_call_id: string; output: string }[]): Map<string, string> {
  const expected = new Set(run.requiredAction?.submit_tool_outputs.tool_calls.map((call) => call.id));
  const byId = new Map<string, string>();
  outputs.forEach((output, index) => {
    const param = `tool_outputs[${index}].tool_call_id`;
    if (!expected.has(output.tool_call_id)) {
      throw new ApiError('invalid_value', `No tool call '${output.tool_call_id}' awaits an output in this run.`, { param });
    }
    if (byId.has(output.tool_call_id)) {
      throw new ApiError('invalid_value', `Tool call '${output.tool_call_id}' has more than one output.`, { param });
    }
    byId.set(output.tool_call_id, output.output);
  });
  const missing = [...expected].filter((id) => !byId.has(id));
  if (missing.length > 0) {
    throw new ApiError('invalid_value', `Expected outputs for every tool call; missing: ${missing.join(', ')}.`, {
      param: 'tool_outputs',
    });
  }
  return byId;
}

/**
 * Answers a run just put in progress: as the acknowledged (queued) object, executing it in the
 * background, or as the event stream of its execution. Either way the execution does not belong to
 * the request (runs/host.ts), so a client that disconnects does not stop it.
 */
async function respond(
  c: Context<AppEnv>,
  run: RunRow,
  admission: Admission,
  stream: boolean,
  options: { acknowledged: unknown; leading: ServerSentEvent[]; preloaded: Preloaded | undefined },
): Promise<Response> {
  const { runHost } = c.var.deps;
  if (!stream) {
    runHost.start(run, { preloaded: options.preloaded }, requestContext(c));
    return c.json(options.acknowledged, 200, admission.headers);
  }
  const events = await runHost.stream(run, { leading: options.leading, preloaded: options.preloaded }, requestContext(c));
  return new Response(events, { status: 200, headers: { ...SSE_HEADERS, ...admission.headers } });
}

/** The request as a run host sees it: the runtime's waitUntil (both entries hand Hono one) and its id. */
function requestContext(c: Context<AppEnv>): RequestContext {
  return { waitUntil: (task) => c.executionCtx.waitUntil(task), requestId: c.var.requestId };
}
