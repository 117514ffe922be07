import { api, streamed, type Assistant, type List, type RunEventData } from '../api';
import { failureTo, field, h, notice, onSubmit, replace, select } from '../dom';
import type { PageContext, PageDefinition } from '../session';

/**
 * Chat with one of the workspace's assistants, its answers streamed: the first message makes a
 * thread and a run (`POST /v1/threads/runs`, `stream: true`), each next one a run on that thread
 * with the message added (`additional_messages`: one call, and nothing written when it is refused).
 * Stop cancels the run; a failed run shows its `last_error`.
 */

/** How a run that ended otherwise than completed is told (failed: its last_error). */
const ENDINGS: Record<string, string> = {
  'thread.run.cancelled': 'Stopped: the run was cancelled.',
  'thread.run.expired': 'The run expired.',
  'thread.run.incomplete': 'The run ended incomplete: a token limit was reached.',
  'thread.run.requires_action':
    'The assistant called a function, which the playground cannot answer: the run was cancelled.',
};

async function draw({ view, session }: PageContext): Promise<void> {
  const workspace = session.workspace.id;
  const assistants = (await api<List<Assistant>>('GET', '/assistants', { workspace, query: { limit: 100 } })).data;
  if (assistants.length === 0) {
    replace(view, notice('No assistant yet: create one with POST /v1/assistants, then chat with it here.'));
    return;
  }
  const picker = select(
    'assistant',
    assistants.map((one) => ({ value: one.id, label: `${one.name || one.id} (${one.model})` })),
  );
  const conversation = h('div', { class: 'chat', role: 'log', 'aria-label': 'Conversation', 'aria-busy': 'false' });
  const message = h('textarea', { name: 'message', required: true, rows: 3 });
  const send = h('button', { type: 'submit' }, 'Send');
  const stop = h('button', { type: 'button', class: 'danger', disabled: true }, 'Stop');
  const restart = h('button', { type: 'button', class: 'secondary' }, 'New conversation');
  const status = h('div', { 'aria-live': 'polite' });
  const form = h(
    'form',
    { class: 'card', 'aria-label': 'Send a message' },
    field('Message', message),
    send,
    stop,
    restart,
  );
  let thread: string | undefined;
  let run: string | undefined;
  const runsOf = (id: string) => `/threads/${encodeURIComponent(id)}/runs`;

  const cancel = () =>
    failureTo(status, async () => {
      if (thread && run) await api('POST', `${runsOf(thread)}/${encodeURIComponent(run)}/cancel`, { workspace });
    });
  stop.addEventListener('click', () => void cancel());
  restart.addEventListener('click', () => {
    thread = undefined;
    replace(conversation);
    replace(status);
  });

  onSubmit(form, status, async () => {
    const text = message.value;
    const answer = h('p', { class: 'answer' });
    const turn = h(
      'div',
      { class: 'turn' },
      h('p', { class: 'you' }, h('strong', {}, 'You: '), text),
      h('div', { class: 'assistant' }, h('strong', {}, 'Assistant: '), answer),
    );
    conversation.append(turn);
    message.value = '';
    replace(status);
    const settings = { assistant_id: picker.value, stream: true };
    const content = [{ role: 'user', content: text }];
    conversation.setAttribute('aria-busy', 'true');
    send.disabled = restart.disabled = true;
    try {
      const events = thread
        ? streamed<RunEventData>(runsOf(thread), { workspace, body: { ...settings, additional_messages: content } })
        : streamed<RunEventData>('/threads/runs', { workspace, body: { ...settings, thread: { messages: content } } });
      for await (const { event, data } of events) {
        if (event === 'thread.run.created') {
          thread = data.thread_id;
          run = data.id;
          stop.disabled = false;
        } else if (event === 'thread.message.delta') {
          for (const part of data.delta?.content ?? []) answer.append(part.text?.value ?? '');
        } else if (event === 'thread.run.failed') {
          const error = data.last_error;
          turn.append(
            notice(`The run failed: ${error ? `${error.code}: ${error.message}` : 'no reason given.'}`, 'alert'),
          );
        } else if (event === 'error') {
          turn.append(notice(`The stream failed: ${data.error?.message ?? 'no reason given.'}`, 'alert'));
        } else if (event in ENDINGS) {
          turn.append(notice(ENDINGS[event] ?? event));
          if (event === 'thread.run.requires_action') await cancel();
        }
      }
    } finally {
      run = undefined;
      stop.disabled = true;
      send.disabled = restart.disabled = false;
      conversation.setAttribute('aria-busy', 'false');
      // Send and Stop were disabled under the keyboard's focus: it goes back to the message.
      message.focus();
    }
  });

  replace(view, field('Assistant', picker), conversation, form, status);
}

export const playgroundPage: PageDefinition = { path: '/playground', title: 'Playground', draw };
