import { api, type ApiKey, type List } from '../api';
import { failureTo, field, onSubmit, h, replace, when } from '../dom';
import type { PageContext, PageDefinition } from '../session';

/** The workspace's API keys: create one (its secret shown this once), revoke one. */

async function draw({ view, session, redraw }: PageContext): Promise<void> {
  const workspaceId = session.workspace.id;
  const keys = (await api<List<ApiKey>>('GET', '/api-keys', { query: { workspace_id: workspaceId } })).data;
  const status = h('div', { 'aria-live': 'polite' });
  const name = h('input', { type: 'text', name: 'name', required: true, maxlength: 200, autocomplete: 'off' });
  const form = h(
    'form',
    { class: 'card inline', 'aria-labelledby': 'create-api-key' },
    h('h2', { id: 'create-api-key' }, 'Create an API key'),
    field('Name', name),
    h('button', { type: 'submit' }, 'Create key'),
  );
  onSubmit(form, status, async () => {
    const created = await api<ApiKey & { key: string }>('POST', '/api-keys', {
      body: { name: name.value, workspace_id: workspaceId },
    });
    name.value = '';
    // The secret is drawn once, here; nothing keeps it, and the list below never has it.
    const secret = h('input', {
      type: 'text',
      readonly: true,
      value: created.key,
      class: 'secret',
      'aria-label': 'The new key',
    });
    replace(
      status,
      h(
        'div',
        { class: 'card reveal', role: 'status' },
        h('p', {}, h('strong', {}, `Key “${created.name}” created.`), ' Copy it now: it is not shown again.'),
        secret,
        h(
          'button',
          { type: 'button', class: 'secondary', onclick: () => void navigator.clipboard?.writeText(created.key) },
          'Copy',
        ),
        h('button', { type: 'button', class: 'secondary', onclick: redraw }, 'Done'),
      ),
    );
    secret.select();
  });

  replace(
    view,
    form,
    status,
    h(
      'table',
      { class: 'list' },
      h('caption', {}, `API keys of ${session.workspace.name}`),
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ...['Name', 'Prefix', 'Kind', 'Created', 'Status', 'Action'].map((title) => h('th', { scope: 'col' }, title)),
        ),
      ),
      h(
        'tbody',
        {},
        ...keys.map((key) =>
          h(
            'tr',
            { 'data-key-id': key.id },
            h('th', { scope: 'row' }, key.name),
            h('td', {}, h('code', {}, `${key.prefix}…`)),
            h('td', {}, key.kind),
            h('td', {}, when(key.created_at)),
            h('td', {}, key.revoked_at === null ? 'active' : `revoked ${when(key.revoked_at)}`),
            h(
              'td',
              {},
              key.revoked_at === null
                ? h(
                    'button',
                    {
                      type: 'button',
                      class: 'danger',
                      'aria-label': `Revoke ${key.name}`,
                      onclick: () =>
                        void failureTo(status, async () => {
                          if (!confirm(`Revoke the key “${key.name}”? Requests with it are refused from now on.`))
                            return;
                          await api('DELETE', `/api-keys/${encodeURIComponent(key.id)}`);
                          redraw();
                        }),
                    },
                    'Revoke',
                  )
                : null,
            ),
          ),
        ),
      ),
    ),
  );
}

export const apiKeysPage: PageDefinition = { path: '/api-keys', title: 'API keys', draw };
