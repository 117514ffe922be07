import { api, type ApiKey, type List, type UsagePage, type UsageResult } from '../api';
import { stackedBars, type Series } from '../chart';
import { field, h, notice, replace, select } from '../dom';
import type { PageContext, PageDefinition } from '../session';

/**
 * Requests and tokens over time, by model, virtual key or API key: GET /v1/usage's buckets, drawn.
 * Runs by status and errors are not counted by /v1/usage (its table has neither): the page says so.
 */

type Period = 'hour' | 'day' | 'month';
type Group = 'model' | 'virtual_key' | 'api_key_id';

const PERIODS: { value: Period; label: string }[] = [
  { value: 'hour', label: 'Last 24 hours, by hour' },
  { value: 'day', label: 'Last 31 days, by day' },
  { value: 'month', label: 'Last 12 months, by month' },
];
const GROUPS: { value: Group; label: string }[] = [
  { value: 'model', label: 'Model' },
  { value: 'virtual_key', label: 'Virtual key' },
  { value: 'api_key_id', label: 'API key' },
];

const HOUR = 3600;
const DAY = 24 * HOUR;

/** Chosen once per tab: redrawing the page keeps them. */
const choice: { period: Period; group: Group } = { period: 'hour', group: 'model' };

interface Buckets {
  labels: string[];
  /** For each bucket, its results. */
  results: UsageResult[][];
}

/** The usage of the period, as buckets of the period's width (months are days added up). */
async function loadBuckets(period: Period, group: Group, workspaceId: string): Promise<Buckets> {
  const now = Math.floor(Date.now() / 1000);
  const common = { group_by: group, workspace_id: workspaceId };
  if (period === 'hour') {
    const page = await api<UsagePage>('GET', '/usage', { query: { ...common, bucket_width: '1h', limit: 24 } });
    return {
      labels: page.data.map((bucket) =>
        new Date(bucket.start_time * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }),
      ),
      results: page.data.map((bucket) => bucket.results),
    };
  }
  if (period === 'day') {
    const page = await api<UsagePage>('GET', '/usage', { query: { ...common, bucket_width: '1d', limit: 31 } });
    return {
      labels: page.data.map((bucket) =>
        new Date(bucket.start_time * 1000).toLocaleDateString([], { month: 'short', day: 'numeric', timeZone: 'UTC' }),
      ),
      results: page.data.map((bucket) => bucket.results),
    };
  }
  // Months: the days since the first of the month eleven months ago, a page of 31 at a time.
  const today = new Date(now * 1000);
  const start = Date.UTC(today.getUTCFullYear(), today.getUTCMonth() - 11, 1) / 1000;
  const end = Math.floor(now / DAY) * DAY + DAY;
  const months = new Map<string, UsageResult[]>();
  for (let month = 0; month < 12; month++) {
    months.set(monthLabel(Date.UTC(today.getUTCFullYear(), today.getUTCMonth() - 11 + month, 1) / 1000), []);
  }
  let next: string | null = null;
  do {
    const page: UsagePage = await api<UsagePage>('GET', '/usage', {
      query: { ...common, bucket_width: '1d', limit: 31, start_time: start, end_time: end, page: next ?? undefined },
    });
    for (const bucket of page.data) months.get(monthLabel(bucket.start_time))?.push(...bucket.results);
    next = page.has_more ? page.next_page : null;
  } while (next !== null);
  return { labels: [...months.keys()], results: [...months.values()] };
}

const monthLabel = (seconds: number) =>
  new Date(seconds * 1000).toLocaleDateString([], { year: '2-digit', month: 'short', timeZone: 'UTC' });

/** One series per group value, of one figure of the results. */
function seriesOf(
  buckets: Buckets,
  group: Group,
  figure: (result: UsageResult) => number,
  names: Map<string, string>,
): Series[] {
  const byName = new Map<string, number[]>();
  buckets.results.forEach((results, index) => {
    for (const result of results) {
      const value = result[group];
      const name = value === null ? '(none)' : (names.get(value) ?? value);
      const values = byName.get(name) ?? buckets.labels.map(() => 0);
      values[index] = (values[index] ?? 0) + figure(result);
      byName.set(name, values);
    }
  });
  return [...byName].map(([name, values]) => ({ name, values })).filter((one) => one.values.some((value) => value > 0));
}

async function draw({ view, session, redraw }: PageContext): Promise<void> {
  const period = select('period', PERIODS, choice.period);
  const group = select('group', GROUPS, choice.group);
  period.addEventListener('change', () => {
    choice.period = PERIODS.find((one) => one.value === period.value)?.value ?? 'hour';
    redraw();
  });
  group.addEventListener('change', () => {
    choice.group = GROUPS.find((one) => one.value === group.value)?.value ?? 'model';
    redraw();
  });
  const charts = h('div', { class: 'charts', 'aria-live': 'polite', 'aria-busy': 'true' }, notice('Loading usage…'));
  replace(
    view,
    h(
      'form',
      {
        class: 'controls',
        'aria-label': 'What to show',
        onsubmit: (event) => {
          event.preventDefault();
          redraw();
        },
      },
      field('Period', period),
      field('By', group),
      h('button', { type: 'submit', class: 'secondary' }, 'Refresh'),
    ),
    charts,
    h(
      'p',
      { class: 'hint' },
      'Runs by status and errors are not shown: GET /v1/usage counts requests and tokens only (docs/console.md).',
    ),
  );
  const workspaceId = session.workspace.id;
  const [buckets, names] = await Promise.all([
    loadBuckets(choice.period, choice.group, workspaceId),
    choice.group === 'api_key_id' ? apiKeyNames(workspaceId) : Promise.resolve(new Map<string, string>()),
  ]);
  const label = GROUPS.find((one) => one.value === choice.group)?.label.toLowerCase() ?? '';
  charts.setAttribute('aria-busy', 'false');
  replace(
    charts,
    stackedBars(
      `Requests by ${label}`,
      buckets.labels,
      seriesOf(buckets, choice.group, (result) => result.num_requests, names),
    ),
    stackedBars(
      `Tokens by ${label}`,
      buckets.labels,
      seriesOf(buckets, choice.group, (result) => result.total_tokens, names),
    ),
    stackedBars(
      `Output tokens by ${label}`,
      buckets.labels,
      seriesOf(buckets, choice.group, (result) => result.output_tokens, names),
    ),
  );
}

/** API keys by id, shown by name and prefix. */
async function apiKeyNames(workspaceId: string): Promise<Map<string, string>> {
  const keys = await api<List<ApiKey>>('GET', '/api-keys', { query: { workspace_id: workspaceId } });
  return new Map(keys.data.map((key) => [key.id, `${key.name} (${key.prefix}…)`]));
}

export const overviewPage: PageDefinition = { path: '/overview', title: 'Overview', draw };
