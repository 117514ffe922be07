import { api, type CursorList, type FileObject } from '../api';
import { dangerButton, field, h, notice, onSubmit, replace, row, size, table, when } from '../dom';
import { inWorkspace, pager } from '../listing';
import type { PageContext, PageDefinition } from '../session';

/**
 * The workspace's files, newest first, 20 a page with a "More" link (cursor pages, listing.ts):
 * upload one (purpose `assistants`, for vector stores and file_search), delete one.
 */

const PATH = '/files';

/** The files the vector stores' pickers offer: the newest 100. */
const PICKED = 100;

/** The workspace's newest files, for the vector stores' file pickers. */
export const listFiles = (workspace: string) =>
  api<CursorList<FileObject>>('GET', '/files', { workspace, query: { limit: PICKED } });

async function draw({ view, session, redraw, route }: PageContext): Promise<void> {
  const workspace = session.workspace.id;
  const files = await inWorkspace<CursorList<FileObject>>(session, PATH, {
    limit: 20,
    after: route.query.get('after'),
  });
  const status = h('div', { 'aria-live': 'polite' });
  const file = h('input', { type: 'file', name: 'file', required: true });
  const form = h(
    'form',
    { class: 'card inline', 'aria-labelledby': 'upload-file' },
    h('h2', { id: 'upload-file' }, 'Upload a file'),
    field('File', file, 'Purpose “assistants”: for vector stores and file_search.'),
    h('button', { type: 'submit' }, 'Upload'),
  );
  onSubmit(form, status, async () => {
    const chosen = file.files?.[0];
    if (!chosen) return;
    const body = new FormData();
    body.append('purpose', 'assistants');
    body.append('file', chosen);
    replace(status, notice(`Uploading ${chosen.name}…`));
    await api('POST', '/files', { workspace, body });
    redraw();
  });

  replace(
    view,
    form,
    status,
    table(
      `Files of ${session.workspace.name}`,
      ['Name', 'Id', 'Purpose', 'Size', 'Created', 'Action'],
      files.data.map((one) =>
        row(
          { 'data-file-id': one.id },
          one.filename,
          h('code', {}, one.id),
          one.purpose,
          size(one.bytes),
          when(one.created_at),
          dangerButton(
            'Delete',
            `Delete ${one.filename}`,
            `Delete the file “${one.filename}”? It leaves every vector store that holds it.`,
            status,
            async () => {
              await api('DELETE', `/files/${encodeURIComponent(one.id)}`, { workspace });
              redraw();
            },
          ),
        ),
      ),
    ),
    pager(files, PATH, route),
  );
}

export const filesPage: PageDefinition = { path: PATH, title: 'Files', draw };
