import type { Config } from '../../../config';
import { newId } from '../../../lib/ids';
import type { StepDetails } from '../../../db/json-columns';
import { leaseMs, type StepRow } from '../queries';
import type { MessageContent, RunRow } from '../../../db/schema';
import type { MessageRow, ThreadKey } from '../../threads/queries';
import { servedModel } from '../../virtual-keys/commands';
import type { VirtualKey } from '../../../db/schema';
import type { RunSettings } from './settings';

/**
 * The rows a run creates, complete and ready to insert (the database adds `seq`, which nothing
 * reads): the run, its steps, the assistant's messages. A thread's and a client's messages are
 * resources/threads/rows.ts's.
 */

/**
 * The assistant's message a turn of `run` writes its answer into, in progress until the turn ends,
 * holding from the start the figures it opens with (`lead`).
 */
export function answerMessage(run: RunRow, at: number, lead: MessageContent[] = []): MessageRow {
  return {
    id: newId('msg'),
    threadId: run.threadId,
    workspaceId: run.workspaceId,
    createdAt: at,
    role: 'assistant',
    content: lead,
    status: 'in_progress',
    assistantId: run.assistantId,
    runId: run.id,
    attachments: [],
    metadata: {},
    incompleteDetails: null,
    completedAt: null,
    incompleteAt: null,
  };
}

/**
 * A run on `thread` with its effective settings, executed at once: born in progress (clients are
 * still told `queued` first, as OpenAI's stream and createAndRun answer do), and leased from birth,
 * so that if this process dies before executing it the recovery sweep finds it.
 */
export function newRun(
  settings: RunSettings,
  owner: {
    thread: ThreadKey;
    assistantId: string;
    virtualKey: VirtualKey;
    apiKeyId: string;
    /** A response executed as the run: its id is the response's. */
    response?: { id: string };
  },
  config: Pick<Config, 'GATEWAY_RUN_EXPIRES_AFTER_SECONDS' | 'GATEWAY_RUN_LEASE_SECONDS'>,
  at: number,
): RunRow {
  // The settings are spread last: on Node 20's V8, a literal that opens with a spread and then adds
  // keys the spread did not have builds a new hidden class each time, microseconds a key (about
  // 40 µs here, per run). Spread last, or after other keys, it costs what the copy costs.
  return {
    id: owner.response?.id ?? newId('run'),
    kind: owner.response ? 'response' : 'run',
    workspaceId: owner.thread.workspaceId,
    threadId: owner.thread.id,
    assistantId: owner.assistantId,
    virtualKeyId: owner.virtualKey.id,
    apiKeyId: owner.apiKeyId,
    status: 'in_progress',
    createdAt: at,
    startedAt: at,
    expiresAt: at + config.GATEWAY_RUN_EXPIRES_AFTER_SECONDS * 1000,
    cancelledAt: null,
    failedAt: null,
    completedAt: null,
    requiredAction: null,
    lastError: null,
    incompleteDetails: null,
    usage: null,
    rateLimit: null,
    trace: null,
    leaseExpiresAt: at + leaseMs(config),
    ...settings,
    // Through an Azure key, the deployment's model: what policies match and usage is recorded for.
    model: servedModel(owner.virtualKey, settings.model),
  };
}

/**
 * A step of `run`, in progress: a message it creates, or tool calls it makes; `reasoning`, what the
 * model reasoned before it, with the id the step was given when that began (turn-answer.ts).
 */
export function newStep(
  run: RunRow,
  details: StepDetails,
  at: number,
  reasoning?: { stepId: string; text: string },
): StepRow {
  return {
    id: reasoning?.stepId ?? newId('step'),
    runId: run.id,
    threadId: run.threadId,
    assistantId: run.assistantId,
    workspaceId: run.workspaceId,
    type: details.type,
    status: 'in_progress',
    stepDetails: details,
    createdAt: at,
    completedAt: null,
    cancelledAt: null,
    failedAt: null,
    expiredAt: null,
    lastError: null,
    usage: null,
    reasoning: reasoning?.text ?? null,
  };
}
