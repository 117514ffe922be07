import { api, type CursorList, type List, type SearchResult, type VectorStore, type VectorStoreFile } from '../api';
import { inWorkspace, pager } from '../listing';
import { cards, failureTo, field, h, notice, onSubmit, replace, row, select, size, table, when } from '../dom';
import type { PageContext, PageDefinition } from '../session';
import { listFiles } from './files';

/**
 * The workspace's vector stores, newest first, 20 a page with a "More" link (cursor pages,
 * listing.ts): create one (with a file), add a file to one, each store's files
 * with their ingestion status, refreshed while one is in progress, and a search box showing the
 * ranked chunks with their scores and files.
 */

/** How often a store whose files are being ingested is asked again: ingestion takes seconds. */
const POLL_MS = 1000;
/** A store's files shown on its card: the first 100. */
const SHOWN = 100;
const PATH = '/vector-stores';

interface Context {
  workspace: string;
  /** File names by id: a store's files are named by id only. */
  names: Map<string, string>;
  files: { value: string; label: string }[];
}

function createForm(context: Context, status: HTMLElement, redraw: () => void): HTMLFormElement {
  const name = h('input', { type: 'text', name: 'name', maxlength: 256, autocomplete: 'off' });
  const file = select('file_id', [{ value: '', label: 'None' }, ...context.files]);
  const form = h(
    'form',
    { class: 'card grid', 'aria-labelledby': 'create-vector-store' },
    h('h2', { id: 'create-vector-store' }, 'Create a vector store'),
    field('Name', name),
    field('File', file, 'Uploaded on the Files page; more can be added after.'),
    h('button', { type: 'submit' }, 'Create vector store'),
  );
  onSubmit(form, status, async () => {
    await api('POST', '/vector_stores', {
      workspace: context.workspace,
      body: { name: name.value, file_ids: file.value ? [file.value] : [] },
    });
    redraw();
  });
  return form;
}

function storeCard(store: VectorStore, context: Context): HTMLElement {
  const { workspace } = context;
  const path = `/vector_stores/${encodeURIComponent(store.id)}`;
  const title = store.name || store.id;
  const status = h('div', { 'aria-live': 'polite' });
  const facts = h('dl', { class: 'facts' });
  const files = h('div');

  const file = select('file_id', context.files);
  const add = h(
    'form',
    { class: 'grid', 'aria-label': `Add a file to ${title}` },
    field('File', file),
    h('button', { type: 'submit', disabled: context.files.length === 0 }, 'Add file'),
  );
  onSubmit(add, status, async () => {
    await api('POST', `${path}/files`, { workspace, body: { file_id: file.value } });
    await refresh();
  });

  const query = h('input', { type: 'search', name: 'query', required: true, autocomplete: 'off' });
  const results = h('div', { 'aria-live': 'polite' });
  const search = h(
    'form',
    { class: 'grid', role: 'search', 'aria-label': `Search ${title}` },
    field('Query', query),
    h('button', { type: 'submit' }, 'Search'),
  );
  onSubmit(search, status, async () => {
    const found = await api<List<SearchResult>>('POST', `${path}/search`, {
      workspace,
      body: { query: query.value, max_num_results: 10 },
    });
    replace(
      results,
      found.data.length === 0
        ? notice(`Nothing found for “${query.value}”.`)
        : h(
            'ol',
            { class: 'results', 'aria-label': `Chunks found for “${query.value}”, best first` },
            ...found.data.map((result) =>
              h(
                'li',
                {},
                h('strong', {}, result.filename),
                ` · score ${result.score.toFixed(3)}`,
                ...result.content.map((part) => h('p', { class: 'chunk' }, part.text)),
              ),
            ),
          ),
    );
  });

  const card = h(
    'article',
    { class: 'card', 'data-store-id': store.id, 'aria-labelledby': `vs-${store.id}` },
    h('h2', { id: `vs-${store.id}` }, title),
    facts,
    files,
    status,
    h('details', {}, h('summary', {}, 'Add a file'), add),
    search,
    results,
  );

  function drawStore(current: VectorStore, storeFiles: VectorStoreFile[]): void {
    const counts = current.file_counts;
    replace(
      facts,
      h('dt', {}, 'Status'),
      h(
        'dd',
        {},
        current.status === 'in_progress' ? 'in_progress (ingesting: refreshed every second)' : current.status,
      ),
      h('dt', {}, 'Files'),
      h('dd', {}, `${counts.completed} completed, ${counts.in_progress} in progress, ${counts.failed} failed`),
      h('dt', {}, 'Usage'),
      h('dd', {}, size(current.usage_bytes)),
      h('dt', {}, 'Created'),
      h('dd', {}, when(current.created_at)),
      h('dt', {}, 'Id'),
      h('dd', {}, h('code', {}, current.id)),
    );
    replace(
      files,
      table(
        `Files of ${title}`,
        ['File', 'Status', 'Error'],
        storeFiles.map((one) =>
          row(
            { 'data-file-id': one.id },
            context.names.get(one.id) ?? one.id,
            one.status,
            one.last_error ? `${one.last_error.code}: ${one.last_error.message}` : '',
          ),
        ),
      ),
    );
  }

  // Asked again every POLL_MS while a file is in progress, until none is or the page is left.
  let timer: ReturnType<typeof setTimeout> | undefined;
  async function refresh(current?: VectorStore): Promise<void> {
    const [latest, storeFiles] = await Promise.all([
      current ?? api<VectorStore>('GET', path, { workspace }),
      api<List<VectorStoreFile>>('GET', `${path}/files`, { workspace, query: { limit: SHOWN } }),
    ]);
    drawStore(latest, storeFiles.data);
    clearTimeout(timer);
    if (latest.status === 'in_progress') {
      timer = setTimeout(() => {
        if (card.isConnected) void failureTo(status, () => refresh());
      }, POLL_MS);
    }
  }
  void failureTo(status, () => refresh(store));
  return card;
}

async function draw({ view, session, redraw, route }: PageContext): Promise<void> {
  const workspace = session.workspace.id;
  const [stores, files] = await Promise.all([
    inWorkspace<CursorList<VectorStore>>(session, '/vector_stores', { limit: 20, after: route.query.get('after') }),
    listFiles(workspace),
  ]);
  const context: Context = {
    workspace,
    names: new Map(files.data.map((one) => [one.id, one.filename])),
    files: files.data.map((one) => ({ value: one.id, label: one.filename })),
  };
  const status = h('div', { 'aria-live': 'polite' });
  replace(
    view,
    createForm(context, status, redraw),
    status,
    cards(
      'Vector stores',
      stores.data.map((store) => storeCard(store, context)),
      'No vector store yet.',
    ),
    pager(stores, PATH, route),
  );
}

export const vectorStoresPage: PageDefinition = { path: PATH, title: 'Vector stores', draw };
