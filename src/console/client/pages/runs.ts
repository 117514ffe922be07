import { RUN_STATUSES } from '../../../db/run-status-list';
import type { CursorList, Run, RunError, RunStep, RunTrace, ToolCall } from '../api';
import { h, replace, table, when } from '../dom';
import {
  assistantName,
  assistantOptions,
  assistantsOf,
  cut,
  duration,
  filters,
  inWorkspace,
  link,
  listAndItemPage,
  pageHref,
  pager,
  tokens,
} from '../listing';
import type { PageContext } from '../session';

/**
 * The workspace's runs across its threads, newest first (GET /v1/runs, by status, assistant or
 * thread); a run opened (`#/runs/<thread>/<run>`) is its timeline: the run's status, times, tokens
 * and last_error, then its steps in order, each tool call with its name, arguments and output, then
 * its trace: its log line, its provider attempts and its events in time order.
 */

const PATH = '/runs';

/** When a run ended, whichever way it did. */
const endOf = (run: Pick<Run, 'completed_at' | 'failed_at' | 'cancelled_at'>) =>
  run.completed_at ?? run.failed_at ?? run.cancelled_at;

async function drawList({ view, session, route }: PageContext): Promise<void> {
  const query = {
    status: route.query.get('status'),
    assistant_id: route.query.get('assistant_id'),
    thread_id: route.query.get('thread_id'),
  };
  const [list, assistants] = await Promise.all([
    inWorkspace<CursorList<Run>>(session, PATH, { ...query, limit: 20, after: route.query.get('after') }),
    assistantsOf(session),
  ]);
  const byId = new Map(assistants.map((assistant) => [assistant.id, assistant]));
  replace(
    view,
    filters(
      PATH,
      { thread_id: query.thread_id },
      [
        {
          label: 'Status',
          name: 'status',
          options: [
            { value: '', label: 'Any status' },
            ...RUN_STATUSES.map((status) => ({ value: status, label: status })),
          ],
        },
        { label: 'Assistant', name: 'assistant_id', options: assistantOptions(assistants) },
      ],
      route,
    ),
    query.thread_id
      ? h(
          'p',
          {},
          `Runs of thread ${query.thread_id}. `,
          link(pageHref(PATH, [], { ...query, thread_id: null }), 'All threads'),
        )
      : null,
    table(
      `Runs of ${session.workspace.name}`,
      ['Run', 'Status', 'Assistant', 'Model', 'Created', 'Took', 'Tokens'],
      list.data.map((run) => [
        link(pageHref(PATH, [run.thread_id, run.id]), run.id),
        run.status,
        assistantName(byId.get(run.assistant_id), run.assistant_id),
        run.model,
        when(run.created_at),
        duration(run.started_at, endOf(run)),
        tokens(run.usage),
      ]),
    ),
    pager(list, PATH, route, query),
  );
}

async function drawTimeline(
  { view, session, route }: PageContext,
  [threadId = '', runId = '']: string[],
): Promise<void> {
  const path = `/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}`;
  const [run, steps, trace] = await Promise.all([
    inWorkspace<Run>(session, path),
    inWorkspace<CursorList<RunStep>>(session, `${path}/steps`, {
      order: 'asc',
      limit: 100,
      after: route.query.get('after'),
    }),
    inWorkspace<RunTrace>(session, `/runs/${encodeURIComponent(runId)}/trace`),
  ]);
  const facts: [string, Node | string][] = [
    ['Status', run.status],
    ['Thread', link(pageHref('/threads', [run.thread_id]), run.thread_id)],
    ['Assistant', link(pageHref(PATH, [], { assistant_id: run.assistant_id }), run.assistant_id)],
    ['Model', run.model],
    ['Created', when(run.created_at)],
    ['Started', run.started_at === null ? '–' : when(run.started_at)],
    ['Ended', endOf(run) === null ? '–' : when(endOf(run) ?? 0)],
    ['Took', duration(run.started_at, endOf(run))],
    ['Tokens', tokens(run.usage)],
  ];
  if (run.incomplete_details) facts.push(['Incomplete', run.incomplete_details.reason]);
  replace(
    view,
    h('p', {}, link(pageHref(PATH), 'All runs')),
    h('h2', {}, `Run ${run.id}`),
    run.last_error ? failure(run.last_error) : null,
    h('dl', { class: 'facts' }, ...facts.flatMap(([term, value]) => [h('dt', {}, term), h('dd', {}, value)])),
    h('h2', {}, 'Timeline'),
    h('ol', { class: 'timeline', 'aria-label': 'Steps' }, ...steps.data.map((step) => stepItem(step, run.thread_id))),
    steps.data.length === 0 ? h('p', { class: 'hint' }, 'No steps.') : null,
    pager(steps, PATH, route),
    ...traceParts(trace),
  );
}

/** When, as milliseconds after the run was created. */
const after = (trace: RunTrace, ms: number) => `+${(ms - (trace.events[0]?.at_ms ?? ms)).toLocaleString()} ms`;
const ms = (value: number | null) => (value === null ? '–' : `${value.toLocaleString()} ms`);

/** The run's log line, its provider attempts and its events in time order (GET /v1/runs/{run_id}/trace). */
function traceParts(trace: RunTrace): (HTMLElement | null)[] {
  const { log, attempts } = trace;
  return [
    h('h2', {}, 'Log line'),
    log
      ? h(
          'dl',
          { class: 'facts', 'aria-label': 'Log line' },
          ...Object.entries(log).flatMap(([name, value]) => [h('dt', {}, name), h('dd', {}, String(value ?? '–'))]),
        )
      : h('p', { class: 'hint' }, 'The run has not ended: no log line yet.'),
    table(
      `Provider attempts (${attempts.length} of ${trace.attempts_total})`,
      ['#', 'When', 'Virtual key', 'Model', 'Outcome', 'Status', 'First byte', 'Took'],
      attempts.map((one, index) => [
        String(index + 1),
        after(trace, one.at_ms),
        one.virtual_key,
        one.model,
        one.outcome ?? 'open',
        one.status === null ? '–' : String(one.status),
        ms(one.first_byte_ms),
        ms(one.duration_ms),
      ]),
    ),
    h('h2', {}, 'Events'),
    h(
      'ol',
      { class: 'events', 'aria-label': 'Events in time order' },
      ...trace.events.map((event) =>
        h(
          'li',
          {},
          h('code', {}, after(trace, event.at_ms)),
          event.attempt === undefined ? ` ${event.type}` : ` attempt ${event.attempt + 1}`,
          [event.step_type, event.step_id, event.status]
            .filter(Boolean)
            .map((part) => ` · ${part}`)
            .join(''),
        ),
      ),
    ),
    trace.steps_omitted ? h('p', { class: 'hint' }, 'Events of the first 100 steps.') : null,
  ];
}

const failure = (error: RunError) =>
  h('p', { class: 'notice alert' }, h('strong', {}, `Last error: ${error.code}. `), error.message);

function stepItem(step: RunStep, threadId: string): HTMLElement {
  const details = step.step_details;
  return h(
    'li',
    { class: 'step', 'data-step-id': step.id },
    h(
      'p',
      { class: 'who' },
      h('strong', {}, details.type === 'message_creation' ? 'Message' : 'Tool calls'),
      ` · ${step.status} · ${when(step.created_at)} · took ${duration(step.created_at, endOf(step))} · tokens ${tokens(step.usage)}`,
    ),
    step.last_error ? failure(step.last_error) : null,
    ...(details.type === 'message_creation'
      ? [
          h(
            'p',
            {},
            'Wrote ',
            link(pageHref('/threads', [threadId]), `message ${details.message_creation.message_id}`),
            '.',
          ),
        ]
      : details.tool_calls.map(toolCall)),
  );
}

function toolCall(call: ToolCall): HTMLElement {
  const [name, input, output] =
    call.type === 'function'
      ? [call.function.name, call.function.arguments, call.function.output ?? '(no output yet)']
      : call.type === 'code_interpreter'
        ? [
            'code_interpreter',
            call.code_interpreter.input,
            call.code_interpreter.outputs.map((out) => (out.type === 'logs' ? out.logs : '(an image)')).join('\n'),
          ]
        : [
            'file_search',
            '',
            call.file_search.results.map((result) => `${result.file_name} (${result.score.toFixed(2)})`).join('\n') ||
              'nothing found',
          ];
  return h(
    'div',
    { class: 'tool-call' },
    h('p', {}, h('code', {}, name), ` (${call.id})`),
    input ? h('p', { class: 'hint' }, 'Arguments') : null,
    input ? h('pre', {}, cut(input)) : null,
    h('p', { class: 'hint' }, 'Output'),
    h('pre', {}, cut(output)),
  );
}

export const runsPage = listAndItemPage({ path: PATH, title: 'Runs', ids: 2 }, drawList, drawTimeline);
