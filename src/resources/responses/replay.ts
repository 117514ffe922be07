import type { EventSink, ServerSentEvent } from '../../deps';
import type { ResponseRow, RunRow } from '../../db/schema';
import { isTerminal } from '../../db/run-statuses';
import type { StepRow } from '../runs/queries';
import { REASONING_DELTA } from '../runs/execution/turn-answer';
import { toRunJson, toStepJson } from '../runs/wire';
import type { MessageRow } from '../threads/queries';
import { toMessageJson } from '../threads/wire';
import { ResponseEvents } from './events';
import { responseEventsOptions } from './stream';
import type { Db } from '../../db/client';

/**
 * The stream of a response that ended, told again (GET /v1/responses/{id}?stream=true): the run
 * engine's events as its stored run, steps and messages say they went, each message's text and
 * each reasoning in one delta, translated as a live stream is (events.ts). The same response always replays the same
 * events with the same sequence numbers, so that `starting_after` resumes where a client's last
 * replay left it.
 */
export async function replayResponse(
  db: Db,
  target: EventSink,
  stored: { run: RunRow; row: ResponseRow; steps: StepRow[]; messages: MessageRow[] },
  startingAfter: number | undefined,
): Promise<void> {
  const { run, row, steps, messages } = stored;
  if (!isTerminal(run.status)) throw new Error('only a response that ended can be replayed');
  const events = new ResponseEvents(skipping(target, startingAfter), responseEventsOptions(db, run, row));
  const byId = new Map(messages.map((message) => [message.id, message]));
  const started = toRunJson({ ...run, status: 'in_progress', completedAt: null, usage: null });
  await events.send([
    ['thread.run.created', started],
    ['thread.run.in_progress', started],
  ]);
  for (const step of steps) await events.send(stepEvents(step, run, byId));
  await events.send([[`thread.run.${run.status}`, toRunJson(run)]]);
}

/** What the engine sent for a step: the reasoning before it, then its message whole, or its tool calls. */
function stepEvents(step: StepRow, run: RunRow, messages: Map<string, MessageRow>): ServerSentEvent[] {
  const reasoning: ServerSentEvent[] =
    step.reasoning === null ? [] : [[REASONING_DELTA, { step_id: step.id, delta: step.reasoning }]];
  return [...reasoning, ...answerEvents(step, run, messages)];
}

function answerEvents(step: StepRow, run: RunRow, messages: Map<string, MessageRow>): ServerSentEvent[] {
  const details = step.stepDetails;
  if (details.type === 'message_creation') {
    const message = messages.get(details.message_creation.message_id);
    if (!message) return [];
    const text = message.content.map((part) => (part.type === 'text' ? part.text.value : '')).join('');
    const annotations = message.content.flatMap((part) => (part.type === 'text' ? part.text.annotations : []));
    const delta = (value: { value?: string; annotations: unknown[] }) => ({
      id: message.id,
      object: 'thread.message.delta',
      delta: { content: [{ index: 0, type: 'text', text: value }] },
    });
    const events: ServerSentEvent[] = [
      ['thread.message.created', toMessageJson({ ...message, content: [], status: 'in_progress' })],
    ];
    if (text !== '') events.push(['thread.message.delta', delta({ value: text, annotations: [] })]);
    if (annotations.length > 0) {
      const indexed = annotations.map((annotation, index) => Object.assign({ index }, annotation));
      events.push(['thread.message.delta', delta({ annotations: indexed })]);
    }
    events.push([
      `thread.message.${message.status === 'incomplete' ? 'incomplete' : 'completed'}`,
      toMessageJson(message),
    ]);
    return events;
  }
  const calls = details.tool_calls.map((call, index): ServerSentEvent => [
    'thread.run.step.delta',
    {
      id: step.id,
      object: 'thread.run.step.delta',
      delta: {
        step_details: {
          type: 'tool_calls',
          tool_calls: [
            call.type === 'function'
              ? { index, id: call.id, type: 'function', function: { ...call.function, output: null } }
              : call.type === 'code_interpreter'
                ? { index, id: call.id, type: 'code_interpreter', code_interpreter: { input: '', outputs: [] } }
                : { index, id: call.id, type: 'file_search', file_search: {} },
          ],
        },
      },
    },
  ]);
  const ended = step.status === 'completed' ? 'completed' : 'failed';
  return [...calls, [`thread.run.step.${ended}`, toStepJson(step, run, true)]];
}

/** The events after the first `startingAfter + 1` (sequence numbers 0 to startingAfter). */
function skipping(target: EventSink, startingAfter: number | undefined): EventSink {
  let skip = startingAfter === undefined ? 0 : startingAfter + 1;
  return {
    send(events) {
      const kept = events.slice(Math.min(skip, events.length));
      skip -= events.length - kept.length;
      return kept.length === 0 ? Promise.resolve() : target.send(kept);
    },
  };
}
