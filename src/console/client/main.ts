import { api, ApiFailure, signIn, signOut, type List, type Workspace } from './api';
import { field, h, notice, replace, select } from './dom';
import { apiKeysPage } from './pages/api-keys';
import { assistantsPage } from './pages/assistants';
import { filesPage } from './pages/files';
import { overviewPage } from './pages/overview';
import { playgroundPage } from './pages/playground';
import { policiesPage } from './pages/policies';
import { runsPage } from './pages/runs';
import { threadsPage } from './pages/threads';
import { vectorStoresPage } from './pages/vector-stores';
import { virtualKeysPage } from './pages/virtual-keys';
import type { PageDefinition, Route, Session } from './session';

/**
 * The console's start: the sign-in form, then a page per `#/path`, drawn by the page's module from
 * what the gateway's API answers. Routing by the URL's fragment: nothing of it reaches the server,
 * and moving between pages never reloads (which would lose the key, kept in memory only).
 */

const PAGES: PageDefinition[] = [
  overviewPage,
  playgroundPage,
  assistantsPage,
  threadsPage,
  runsPage,
  filesPage,
  vectorStoresPage,
  apiKeysPage,
  virtualKeysPage,
  policiesPage,
];
const DEFAULT_PAGE = overviewPage;

const root = document.getElementById('console') ?? document.body;
let session: Session | null = null;

/** The page a fragment `#/<page>/<param>…?<query>` names, and the rest of it for the page. */
function currentPage(): { page: PageDefinition; route: Route } {
  const [path = '', search = ''] = location.hash.slice(1).split('?', 2);
  const [name, ...params] = path.split('/').filter(Boolean);
  const page = PAGES.find((one) => one.path === `/${name}`) ?? DEFAULT_PAGE;
  return { page, route: { params: params.map(decoded), query: new URLSearchParams(search) } };
}

function decoded(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function drawSignIn(message?: string): void {
  const input = h('input', {
    type: 'password',
    name: 'api-key',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
  });
  const form = h(
    'form',
    { class: 'card', 'aria-labelledby': 'sign-in-title' },
    field(
      'API key',
      input,
      'An organisation or a workspace key (gk_…). Kept in this tab’s memory only: reloading signs out.',
    ),
    h('button', { type: 'submit' }, 'Sign in'),
  );
  const status = h('div', { 'aria-live': 'polite' }, message ? notice(message, 'alert') : null);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const key = input.value.trim();
    input.value = '';
    void startSession(key, status);
  });
  replace(
    root,
    h(
      'main',
      { id: 'content', class: 'narrow' },
      h('h1', { id: 'sign-in-title' }, 'Sign in to the gateway console'),
      form,
      status,
    ),
  );
  input.focus();
}

async function startSession(key: string, status: HTMLElement): Promise<void> {
  signIn(key);
  replace(status, notice('Signing in…'));
  try {
    const workspaces = (await api<List<Workspace>>('GET', '/workspaces')).data;
    const first = workspaces[0];
    if (!first) throw new ApiFailure('This key has no workspace to act on.', 403, null);
    session = { workspaces, workspace: first };
    if (!location.hash.startsWith('#/')) history.replaceState(null, '', `#${DEFAULT_PAGE.path}`);
    drawPage();
  } catch (error) {
    signOut();
    replace(
      status,
      notice(
        error instanceof ApiFailure
          ? `Not signed in: ${error.message}`
          : 'Not signed in: the gateway could not be reached.',
        'alert',
      ),
    );
  }
}

function end(message?: string): void {
  signOut();
  session = null;
  history.replaceState(null, '', location.pathname);
  drawSignIn(message);
}

function drawPage(): void {
  const current = session;
  if (!current) return drawSignIn();
  const { page, route } = currentPage();
  document.title = `${page.title} · Gateway console`;
  const workspacePicker = select(
    'workspace',
    current.workspaces.map((workspace) => ({ value: workspace.id, label: `${workspace.name} (${workspace.slug})` })),
    current.workspace.id,
  );
  workspacePicker.addEventListener('change', () => {
    const chosen = current.workspaces.find((workspace) => workspace.id === workspacePicker.value);
    if (chosen) current.workspace = chosen;
    drawPage();
  });
  // Busy until the page is drawn: for a screen reader, and for the tests that time it.
  const view = h('div', { class: 'view', 'aria-busy': 'true' });
  replace(
    root,
    h('a', { class: 'skip', href: '#content', onclick: skipToContent }, 'Skip to content'),
    h(
      'header',
      { class: 'top' },
      h('span', { class: 'brand' }, 'Gateway console'),
      h(
        'nav',
        { 'aria-label': 'Pages' },
        h(
          'ul',
          {},
          ...PAGES.map((one) =>
            h('li', {}, h('a', { href: `#${one.path}`, 'aria-current': one === page ? 'page' : null }, one.title)),
          ),
        ),
      ),
      h(
        'div',
        { class: 'who' },
        current.workspaces.length > 1
          ? field('Workspace', workspacePicker)
          : h('span', {}, `Workspace: ${current.workspace.name}`),
        h('button', { type: 'button', class: 'secondary', onclick: () => end() }, 'Sign out'),
      ),
    ),
    h('main', { id: 'content', tabindex: '-1' }, h('h1', {}, page.title), view),
  );
  const redraw = () => drawPage();
  void page
    .draw({ view, session: current, redraw, route })
    .catch((error: unknown) => {
      // A key revoked meanwhile (perhaps from this very page) ends the session.
      if (error instanceof ApiFailure && error.status === 401) return end(`Signed out: ${error.message}`);
      view.append(notice(error instanceof ApiFailure ? error.message : 'The page could not be drawn.', 'alert'));
    })
    .finally(() => view.setAttribute('aria-busy', 'false'));
}

function skipToContent(event: Event): void {
  event.preventDefault();
  document.getElementById('content')?.focus();
}

window.addEventListener('hashchange', () => {
  if (!location.hash.startsWith('#/')) return;
  drawPage();
  // The link followed is gone with the page it was on: a keyboard or a screen reader goes on from
  // the new page's top.
  document.getElementById('content')?.focus();
});
drawSignIn();
