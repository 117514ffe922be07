import { api, type List, type VirtualKey } from '../api';
import { failureTo, field, onSubmit, h, notice, replace, select, when } from '../dom';
import type { PageContext, PageDefinition } from '../session';

/**
 * The workspace's virtual keys: create one, change its models, default and fallbacks, rotate its
 * provider secret, test it with one tiny call, revoke it. The provider secret is sent, never shown:
 * the API does not answer it.
 */

const words = (text: string) =>
  text
    .split(/[\s,]+/)
    .map((word) => word.trim())
    .filter(Boolean);

/** Only the fields filled in: an empty field takes the API's default. */
function filled(fields: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value.trim() !== ''));
}

function createForm(workspaceId: string, status: HTMLElement, redraw: () => void): HTMLFormElement {
  const slug = h('input', {
    type: 'text',
    name: 'slug',
    required: true,
    maxlength: 64,
    autocomplete: 'off',
    pattern: '[a-z0-9][a-z0-9._\\-]*',
  });
  const provider = select('provider', [
    { value: 'openai', label: 'OpenAI-compatible' },
    { value: 'azure-openai', label: 'Azure OpenAI' },
  ]);
  const baseUrl = h('input', { type: 'url', name: 'base_url', autocomplete: 'off' });
  const secret = h('input', { type: 'password', name: 'api_key', required: true, autocomplete: 'off' });
  const apiVersion = h('input', { type: 'text', name: 'api_version', autocomplete: 'off' });
  const deployment = h('input', { type: 'text', name: 'deployment', autocomplete: 'off' });
  const models = h('input', { type: 'text', name: 'models', autocomplete: 'off' });
  const isDefault = h('input', { type: 'checkbox', name: 'default', id: 'new-virtual-key-default' });
  const form = h(
    'form',
    { class: 'card grid', 'aria-labelledby': 'create-virtual-key' },
    h('h2', { id: 'create-virtual-key' }, 'Create a virtual key'),
    field('Slug', slug, 'Lowercase letters, digits, dots, underscores, hyphens.'),
    field('Provider', provider),
    field('Base URL', baseUrl, 'Empty: OpenAI’s own.'),
    field('Provider API key', secret, 'Stored encrypted; never shown again.'),
    field('Models', models, 'Names or * patterns, separated by commas.'),
    field('API version', apiVersion, 'Azure OpenAI only.'),
    field('Deployment', deployment, 'Azure OpenAI only.'),
    h('div', { class: 'field check' }, isDefault, h('label', { for: isDefault.id }, 'The workspace’s default key')),
    h('button', { type: 'submit' }, 'Create virtual key'),
  );
  onSubmit(form, status, async () => {
    await api('POST', '/virtual-keys', {
      body: {
        slug: slug.value,
        provider: provider.value,
        api_key: secret.value,
        ...filled({ base_url: baseUrl.value, api_version: apiVersion.value, deployment: deployment.value }),
        models: words(models.value),
        default: isDefault.checked,
        workspace_id: workspaceId,
      },
    });
    secret.value = '';
    redraw();
  });
  return form;
}

function keyCard(key: VirtualKey, workspaceId: string, redraw: () => void): HTMLElement {
  const status = h('div', { 'aria-live': 'polite' });
  const path = `/virtual-keys/${encodeURIComponent(key.slug)}`;
  const update = (body: Record<string, unknown>) => api('POST', path, { body: { ...body, workspace_id: workspaceId } });

  const models = h('input', { type: 'text', name: 'models', value: key.models.join(', '), autocomplete: 'off' });
  const fallbacks = h('input', {
    type: 'text',
    name: 'fallbacks',
    value: key.fallbacks.join(', '),
    autocomplete: 'off',
  });
  const isDefault = h('input', { type: 'checkbox', name: 'default', checked: key.default, id: `default-${key.slug}` });
  const settings = h(
    'form',
    { class: 'grid', 'aria-label': `Settings of ${key.slug}` },
    field('Models', models, 'Names or * patterns, separated by commas.'),
    field('Fallbacks', fallbacks, 'Slugs of keys to move to, in order.'),
    h('div', { class: 'field check' }, isDefault, h('label', { for: isDefault.id }, 'The workspace’s default key')),
    h('button', { type: 'submit' }, 'Save settings'),
  );
  onSubmit(settings, status, async () => {
    await update({ models: words(models.value), fallbacks: words(fallbacks.value), default: isDefault.checked });
    redraw();
  });

  const secret = h('input', { type: 'password', name: 'api_key', required: true, autocomplete: 'off' });
  const rotate = h(
    'form',
    { class: 'grid', 'aria-label': `Rotate the secret of ${key.slug}` },
    field('New provider API key', secret),
    h('button', { type: 'submit' }, 'Rotate secret'),
  );
  onSubmit(rotate, status, async () => {
    await update({ api_key: secret.value });
    secret.value = '';
    replace(status, notice(`The secret of ${key.slug} was replaced.`));
  });

  const model = h('input', {
    type: 'text',
    name: 'model',
    required: true,
    value: key.models.find((one) => !one.includes('*')) ?? '',
    autocomplete: 'off',
  });
  const test = h(
    'form',
    { class: 'grid', 'aria-label': `Test ${key.slug}` },
    field('Model', model),
    h('button', { type: 'submit' }, 'Test connection'),
  );
  onSubmit(test, status, async () => {
    replace(status, notice(`Calling ${model.value} with ${key.slug}…`));
    const started = performance.now();
    // One tiny call, counted in usage like any other.
    await api('POST', '/chat/completions', {
      headers: { 'x-gateway-virtual-key': key.slug, 'x-gateway-workspace-id': workspaceId },
      body: { model: model.value, messages: [{ role: 'user', content: 'ping' }], max_tokens: 1 },
    });
    replace(status, notice(`Connected: ${key.slug} answered in ${Math.round(performance.now() - started)} ms.`));
  });

  const revoke = h(
    'button',
    {
      type: 'button',
      class: 'danger',
      onclick: () =>
        void failureTo(status, async () => {
          if (!confirm(`Revoke the virtual key ${key.slug}?`)) return;
          await api('DELETE', path, { query: { workspace_id: workspaceId } });
          redraw();
        }),
    },
    `Revoke ${key.slug}`,
  );

  return h(
    'article',
    { class: 'card', 'data-slug': key.slug, 'aria-labelledby': `vk-${key.slug}` },
    h('h2', { id: `vk-${key.slug}` }, key.slug, key.default ? h('span', { class: 'badge' }, 'default') : null),
    h(
      'dl',
      { class: 'facts' },
      h('dt', {}, 'Provider'),
      h('dd', {}, key.provider),
      h('dt', {}, 'Base URL'),
      h('dd', {}, key.base_url),
      h('dt', {}, 'Models'),
      h('dd', {}, key.models.join(', ') || '—'),
      h('dt', {}, 'Fallbacks'),
      h('dd', {}, key.fallbacks.join(', ') || '—'),
      h('dt', {}, 'Created'),
      h('dd', {}, when(key.created_at)),
    ),
    status,
    test,
    h('details', {}, h('summary', {}, 'Settings'), settings),
    h('details', {}, h('summary', {}, 'Rotate secret'), rotate),
    revoke,
  );
}

async function draw({ view, session, redraw }: PageContext): Promise<void> {
  const workspaceId = session.workspace.id;
  const keys = (await api<List<VirtualKey>>('GET', '/virtual-keys', { query: { workspace_id: workspaceId } })).data;
  const status = h('div', { 'aria-live': 'polite' });
  replace(
    view,
    createForm(workspaceId, status, redraw),
    status,
    h(
      'section',
      { 'aria-label': 'Virtual keys', class: 'cards' },
      ...(keys.length > 0 ? keys.map((key) => keyCard(key, workspaceId, redraw)) : [h('p', {}, 'No virtual key yet.')]),
    ),
  );
}

export const virtualKeysPage: PageDefinition = { path: '/virtual-keys', title: 'Virtual keys', draw };
