import type { Annotation, CursorList, Message, Run, Thread } from '../api';
import { h, replace, table, when } from '../dom';
import {
  assistantOptions,
  assistantsOf,
  duration,
  filters,
  inWorkspace,
  link,
  listAndItemPage,
  pageHref,
  pager,
} from '../listing';
import type { PageContext } from '../session';

/**
 * The workspace's threads, newest first (GET /v1/threads, of one assistant if asked); a thread
 * opened (`#/threads/<id>`) is read as a chat: its messages in order, each part as text (an image
 * or a cited file is named, never loaded), with the thread's runs linked to their timelines.
 */

const PATH = '/threads';

async function drawList({ view, session, route }: PageContext): Promise<void> {
  const assistantId = route.query.get('assistant_id');
  const [list, assistants] = await Promise.all([
    inWorkspace<CursorList<Thread>>(session, PATH, {
      limit: 20,
      after: route.query.get('after'),
      assistant_id: assistantId,
    }),
    assistantsOf(session),
  ]);
  replace(
    view,
    filters(PATH, {}, [{ label: 'Assistant', name: 'assistant_id', options: assistantOptions(assistants) }], route),
    table(
      `Threads of ${session.workspace.name}`,
      ['Thread', 'Created', 'Metadata'],
      list.data.map((thread) => [
        link(pageHref(PATH, [thread.id]), thread.id),
        when(thread.created_at),
        Object.entries(thread.metadata)
          .map(([name, value]) => `${name}: ${value}`)
          .join(', ') || '–',
      ]),
    ),
    pager(list, PATH, route, { assistant_id: assistantId }),
  );
}

async function drawConversation({ view, session, route }: PageContext, [threadId = '']: string[]): Promise<void> {
  const path = `${PATH}/${encodeURIComponent(threadId)}`;
  const [messages, runs] = await Promise.all([
    inWorkspace<CursorList<Message>>(session, `${path}/messages`, {
      order: 'asc',
      limit: 50,
      after: route.query.get('after'),
    }),
    inWorkspace<CursorList<Run>>(session, `${path}/runs`, { limit: 20 }),
  ]);
  replace(
    view,
    h('p', {}, link(pageHref(PATH), 'All threads')),
    h('h2', {}, `Thread ${threadId}`),
    h('ol', { class: 'chat', 'aria-label': 'Messages' }, ...messages.data.map((message) => bubble(message, threadId))),
    messages.data.length === 0 ? h('p', { class: 'hint' }, 'No messages.') : null,
    pager(messages, PATH, route),
    table(
      'Runs of this thread, newest first',
      ['Run', 'Status', 'Model', 'Created', 'Took'],
      runs.data.map((run) => [
        link(pageHref('/runs', [threadId, run.id]), run.id),
        run.status,
        run.model,
        when(run.created_at),
        duration(run.started_at, run.completed_at ?? run.failed_at ?? run.cancelled_at),
      ]),
    ),
    runs.has_more ? link(pageHref('/runs', [], { thread_id: threadId }), 'All runs of this thread') : null,
  );
}

/** One message as a chat bubble: who, when, its parts as text, what it cites and attaches. */
function bubble(message: Message, threadId: string): HTMLElement {
  const notes = [
    ...message.content.flatMap((part) => (part.type === 'text' ? part.text.annotations.map(annotation) : [])),
    ...(message.attachments ?? []).map(
      (attachment) => `Attached: ${attachment.file_id} (${attachment.tools.map((tool) => tool.type).join(', ')})`,
    ),
  ];
  return h(
    'li',
    { class: `bubble ${message.role === 'user' ? 'user' : 'assistant'}`, 'data-message-id': message.id },
    h(
      'p',
      { class: 'who' },
      h('strong', {}, message.role),
      ` · ${when(message.created_at)}`,
      message.run_id ? ' · ' : null,
      message.run_id ? link(pageHref('/runs', [threadId, message.run_id]), 'its run') : null,
      message.status === 'completed' ? null : ` · ${message.status}`,
    ),
    ...message.content.map((part) =>
      part.type === 'text'
        ? h('p', { class: 'text' }, part.text.value)
        : h(
            'p',
            { class: 'hint' },
            part.type === 'image_file' ? `Image file ${part.image_file.file_id}` : `Image at ${part.image_url.url}`,
          ),
    ),
    notes.length > 0 ? h('ul', { class: 'notes' }, ...notes.map((note) => h('li', {}, note))) : null,
  );
}

function annotation(note: Annotation): string {
  const file = note.file_citation?.file_id ?? note.file_path?.file_id ?? '';
  return note.type === 'file_citation' ? `“${note.text}” cites file ${file}` : `“${note.text}” is file ${file}`;
}

export const threadsPage = listAndItemPage({ path: PATH, title: 'Threads', ids: 1 }, drawList, drawConversation);
