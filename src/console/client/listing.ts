import { api, type Assistant, type CursorList } from './api';
import { field, h, select } from './dom';
import type { PageContext, PageDefinition, Route, Session } from './session';

/**
 * What the pages of a workspace's assistants, threads and runs share: reading them in the
 * workspace picked, links to pages with their ids and filters in the fragment, tables, "more" links
 * (cursor pages) and filters that are links too, so that a filtered page's address can be kept.
 */

type Query = Record<string, string | number | null | undefined>;

/** A GET of one of the workspace's resources, the workspace named as an organisation key must name it. */
export const inWorkspace = <Answer>(session: Session, path: string, query: Query = {}) =>
  api<Answer>('GET', path, {
    query: Object.fromEntries(Object.entries(query).map(([name, value]) => [name, value ?? undefined])),
    workspace: session.workspace.id,
  });

/**
 * A page that lists (`#/threads`) and shows one of the list when the fragment names it with its
 * `ids` (`#/threads/<thread>`, `#/runs/<thread>/<run>`).
 */
export function listAndItemPage(
  page: { path: string; title: string; ids: number },
  drawList: (context: PageContext) => Promise<void>,
  drawItem: (context: PageContext, ids: string[]) => Promise<void>,
): PageDefinition {
  return {
    path: page.path,
    title: page.title,
    draw: (context) =>
      context.route.params.length >= page.ids ? drawItem(context, context.route.params) : drawList(context),
  };
}

/** A page's fragment: `#/runs/<thread>/<run>?status=failed` (nothing of it reaches a server). */
export function pageHref(path: string, params: string[] = [], query: Query = {}): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) if (value) search.set(name, String(value));
  const rest = params.map((param) => `/${encodeURIComponent(param)}`).join('');
  const text = search.toString();
  return `#${path}${rest}${text ? `?${text}` : ''}`;
}

/** A link; `label` names it for a screen reader where its text alone is the same on every row. */
export const link = (href: string, text: string, label?: string) => h('a', { href, 'aria-label': label }, text);

/** The links under a cursor page: the next one ("More", after its last id), and back to the first. */
export function pager(list: CursorList<{ id: string }>, path: string, route: Route, query: Query = {}): HTMLElement {
  return h(
    'nav',
    { class: 'pager', 'aria-label': 'Pages of the list' },
    route.query.has('after') ? link(pageHref(path, route.params, query), 'Newest') : null,
    list.has_more ? link(pageHref(path, route.params, { ...query, after: list.last_id }), 'More') : null,
  );
}

/** The workspace's assistants (the first 100), for filters and names. */
export async function assistantsOf(session: Session): Promise<Assistant[]> {
  return (await inWorkspace<CursorList<Assistant>>(session, '/assistants', { limit: 100 })).data;
}

export const assistantName = (assistant: Assistant | undefined, id: string) => (assistant?.name ? assistant.name : id);

/** The choices of an assistant filter. */
export const assistantOptions = (assistants: Assistant[]) => [
  { value: '', label: 'Any assistant' },
  ...assistants.map((assistant) => ({ value: assistant.id, label: assistantName(assistant, assistant.id) })),
];

/**
 * A filter form of selects: submitting it opens the page with their values in its fragment (the
 * list from its start).
 */
export function filters(
  path: string,
  /** Filters the form does not show, kept (the runs of one thread). */
  kept: Query,
  choices: { label: string; name: string; options: { value: string; label: string }[] }[],
  route: Route,
): HTMLFormElement {
  const selects = choices.map((choice) => ({
    ...choice,
    control: select(choice.name, choice.options, route.query.get(choice.name) ?? ''),
  }));
  const form = h(
    'form',
    { class: 'controls', 'aria-label': 'Filters' },
    ...selects.map((one) => field(one.label, one.control)),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = pageHref(path, [], {
      ...kept,
      ...Object.fromEntries(selects.map((one) => [one.name, one.control.value])),
    });
  });
  return form;
}

/** `text`, cut at `max` characters, saying how much was left out. */
export const cut = (text: string, max = 1000) =>
  text.length > max ? `${text.slice(0, max)}… (${(text.length - max).toLocaleString()} more characters)` : text;

/** From `start` to `end`, Unix seconds, as the API has them: whole seconds. */
export function duration(start: number | null, end: number | null): string {
  if (start === null || end === null) return '–';
  const seconds = end - start;
  return seconds < 1 ? 'under 1 s' : seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
}

export const tokens = (usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null) =>
  usage
    ? `${usage.total_tokens.toLocaleString()} (${usage.prompt_tokens.toLocaleString()} in, ${usage.completion_tokens.toLocaleString()} out)`
    : '–';
