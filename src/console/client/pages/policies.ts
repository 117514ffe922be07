import { api, type CounterGroup, type List, type Policy, type PolicyCounters, type Workspace } from '../api';
import { failureTo, field, onSubmit, h, replace, select, table } from '../dom';
import type { PageContext, PageDefinition } from '../session';

/**
 * The workspace's rate-limit policies: create, edit (name, value, unit), archive, and each one's
 * counters in the current window and recent refusals, read when their section is opened.
 */

const KEYS = ['api_key', 'workspace_id', 'virtual_key', 'provider', 'model'];
const UNITS = [
  { value: 'rpm', label: 'per minute' },
  { value: 'rph', label: 'per hour' },
  { value: 'rpd', label: 'per day' },
];
const TYPES = [
  { value: 'requests', label: 'Requests' },
  { value: 'tokens', label: 'Tokens' },
];
const KEY_OPTIONS = KEYS.map((key) => ({ value: key, label: key }));

function createForm(workspace: Workspace, status: HTMLElement, redraw: () => void): HTMLFormElement {
  const name = h('input', { type: 'text', name: 'name', maxlength: 255, autocomplete: 'off' });
  const type = select('type', TYPES);
  const value = h('input', { type: 'number', name: 'value', min: 1, step: 1, required: true });
  const unit = select('unit', UNITS);
  const conditionKey = select('condition_key', KEY_OPTIONS, 'model');
  const conditionValue = h('input', {
    type: 'text',
    name: 'condition_value',
    value: '*',
    required: true,
    autocomplete: 'off',
  });
  const groupKey = select('group_key', KEY_OPTIONS, 'api_key');
  const form = h(
    'form',
    { class: 'card grid', 'aria-labelledby': 'create-policy' },
    h('h2', { id: 'create-policy' }, 'Create a policy'),
    field('Name', name),
    field('Counts', type),
    field('Limit', value),
    field('Window', unit),
    field('Applies where', conditionKey),
    field('Equals', conditionValue, '* matches any value.'),
    field('Counted per', groupKey),
    h('button', { type: 'submit' }, 'Create policy'),
  );
  onSubmit(form, status, async () => {
    await api('POST', '/policies/rate-limits', {
      body: {
        name: name.value,
        type: type.value,
        unit: unit.value,
        value: Number(value.value),
        conditions: [{ key: conditionKey.value, value: conditionValue.value }],
        group_by: [{ key: groupKey.value }],
        workspace_id: workspace.id,
        // An organisation key must name its organisation; a workspace key may.
        organisation_id: workspace.organisation_id,
      },
    });
    redraw();
  });
  return form;
}

const groupText = ({ group, group_hash }: CounterGroup) =>
  group ? group.map(({ key, value }) => `${key} = ${value ?? '(absent)'}`).join(', ') : `hashed ${group_hash ?? ''}`;
const time = (iso: string) => new Date(iso).toLocaleString();

/** The policy's counters and refusals, read each time the section opens or is refreshed. */
function countersSection(policy: Policy, path: string): HTMLDetailsElement {
  const body = h('div', { 'aria-live': 'polite' });
  const load = () =>
    failureTo(body, async () => {
      const counters = await api<PolicyCounters>('GET', `${path}/counters`);
      const shown = counters.groups.length;
      replace(
        body,
        h(
          'p',
          {},
          `Window ${time(counters.window_start)} to ${time(counters.window_end)}: `,
          `${counters.total_groups} group${counters.total_groups === 1 ? '' : 's'} counted`,
          shown < counters.total_groups ? `, the ${shown} most used shown.` : '.',
        ),
        shown > 0
          ? table(
              'Counters per group',
              ['Group', 'Used'],
              counters.groups.map((row) => [
                groupText(row),
                `${row.used.toLocaleString()} of ${policy.value.toLocaleString()}`,
              ]),
            )
          : null,
        counters.refusals.length > 0
          ? table(
              'Recent refusals',
              ['Time', 'Group', 'API key', 'Virtual key', 'Asked', 'Used'],
              counters.refusals.map((refusal) => [
                time(refusal.created_at),
                groupText(refusal),
                // Its prefix, as the API keys page shows it; the id of a key since deleted.
                refusal.api_key_prefix ? `${refusal.api_key_prefix}…` : refusal.api_key_id,
                refusal.virtual_key,
                refusal.requested.toLocaleString(),
                `${refusal.used.toLocaleString()} of ${refusal.limit.toLocaleString()}`,
              ]),
            )
          : h('p', {}, 'No recent refusal.'),
        h('button', { type: 'button', onclick: () => void load() }, 'Refresh counters'),
      );
    });
  const section = h('details', { class: 'counters' }, h('summary', {}, 'Counters and refusals'), body);
  section.addEventListener('toggle', () => {
    if (section.open) void load();
  });
  return section;
}

function policyCard(policy: Policy, redraw: () => void): HTMLElement {
  const status = h('div', { 'aria-live': 'polite' });
  const path = `/policies/rate-limits/${encodeURIComponent(policy.id)}`;
  const name = h('input', { type: 'text', name: 'name', value: policy.name, maxlength: 255, autocomplete: 'off' });
  const value = h('input', { type: 'number', name: 'value', min: 1, step: 1, required: true, value: policy.value });
  const unit = select('unit', UNITS, policy.unit);
  const edit = h(
    'form',
    { class: 'grid', 'aria-label': `Edit ${policy.name || policy.id}` },
    field('Name', name),
    field('Limit', value),
    field('Window', unit),
    h('button', { type: 'submit' }, 'Save policy'),
  );
  onSubmit(edit, status, async () => {
    await api('PUT', path, { body: { name: name.value, value: Number(value.value), unit: unit.value } });
    redraw();
  });
  const title = policy.name || policy.id;
  return h(
    'article',
    { class: 'card', 'data-policy-id': policy.id, 'aria-labelledby': `policy-${policy.id}` },
    h('h2', { id: `policy-${policy.id}` }, title),
    h(
      'p',
      {},
      `${policy.value.toLocaleString()} ${policy.type} ${UNITS.find((one) => one.value === policy.unit)?.label ?? policy.unit}, `,
      `where ${policy.conditions.map((condition) => `${condition.key} = ${condition.value}`).join(' and ')}, `,
      `counted per ${policy.group_by.map((group) => group.key).join(', ')}.`,
      policy.created_by === 'organisation' ? ' Set by the organisation.' : null,
    ),
    status,
    countersSection(policy, path),
    h('details', {}, h('summary', {}, 'Edit'), edit),
    h(
      'button',
      {
        type: 'button',
        class: 'danger',
        // Named for a screen reader's list of buttons, where every card's would read alike.
        'aria-label': `Archive ${title}`,
        onclick: () =>
          void failureTo(status, async () => {
            if (!confirm(`Archive the policy “${title}”? It stops limiting at once.`)) return;
            await api('DELETE', path);
            redraw();
          }),
      },
      'Archive',
    ),
  );
}

async function draw({ view, session, redraw }: PageContext): Promise<void> {
  const policies = (
    await api<List<Policy>>('GET', '/policies/rate-limits', { query: { workspace_id: session.workspace.id } })
  ).data;
  const status = h('div', { 'aria-live': 'polite' });
  replace(
    view,
    createForm(session.workspace, status, redraw),
    status,
    h(
      'section',
      { 'aria-label': 'Active policies', class: 'cards' },
      ...(policies.length > 0
        ? policies.map((policy) => policyCard(policy, redraw))
        : [h('p', {}, 'No active policy.')]),
    ),
  );
}

export const policiesPage: PageDefinition = { path: '/policies', title: 'Rate-limit policies', draw };
