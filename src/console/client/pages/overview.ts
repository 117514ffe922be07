import { api, type ApiKey, type BucketPage, type List, type RunUsageResult, type UsageResult } from '../api';
import { stackedBars, type Series } from '../chart';
import { field, h, notice, replace, select } from '../dom';
import type { PageContext, PageDefinition } from '../session';

/**
 * Requests and tokens over time, by model, virtual key or API key: GET /v1/usage's buckets, drawn;
 * and runs by status, and failed runs by their error's code: GET /v1/usage/runs's.
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

interface Buckets<Result> {
  labels: string[];
  /** For each bucket, its results. */
  results: Result[][];
}

/**
 * The buckets of the period, of the period's width (months are days added up), from `path`
 * (/usage or /usage/runs, which page their buckets alike).
 */
async function loadBuckets<Result>(
  path: string,
  period: Period,
  common: Record<string, string>,
): Promise<Buckets<Result>> {
  const now = Math.floor(Date.now() / 1000);
  const load = (query: Record<string, string | number | undefined>) =>
    api<BucketPage<Result>>('GET', path, { query: { ...common, ...query } });
  if (period === 'hour') {
    const page = await load({ bucket_width: '1h', limit: 24 });
    return {
      labels: page.data.map((bucket) =>
        new Date(bucket.start_time * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }),
      ),
      results: page.data.map((bucket) => bucket.results),
    };
  }
  if (period === 'day') {
    const page = await load({ bucket_width: '1d', limit: 31 });
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
  const months = new Map<string, Result[]>();
  for (let month = 0; month < 12; month++) {
    months.set(monthLabel(Date.UTC(today.getUTCFullYear(), today.getUTCMonth() - 11 + month, 1) / 1000), []);
  }
  let next: string | null = null;
  do {
    const page: BucketPage<Result> = await load({
      bucket_width: '1d',
      limit: 31,
      start_time: start,
      end_time: end,
      page: next ?? undefined,
    });
    for (const bucket of page.data) months.get(monthLabel(bucket.start_time))?.push(...bucket.results);
    next = page.has_more ? page.next_page : null;
  } while (next !== null);
  return { labels: [...months.keys()], results: [...months.values()] };
}

const monthLabel = (seconds: number) =>
  new Date(seconds * 1000).toLocaleDateString([], { year: '2-digit', month: 'short', timeZone: 'UTC' });

/** One series per name the results are given (null: not counted), of one figure of them. */
function seriesOf<Result>(
  buckets: Buckets<Result>,
  nameOf: (result: Result) => string | null,
  figure: (result: Result) => number,
): Series[] {
  const byName = new Map<string, number[]>();
  buckets.results.forEach((results, index) => {
    for (const result of results) {
      const name = nameOf(result);
      if (name === null) continue;
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
  );
  const workspaceId = session.workspace.id;
  const [buckets, runs, names] = await Promise.all([
    loadBuckets<UsageResult>('/usage', choice.period, { group_by: choice.group, workspace_id: workspaceId }),
    loadBuckets<RunUsageResult>('/usage/runs', choice.period, { workspace_id: workspaceId }),
    choice.group === 'api_key_id' ? apiKeyNames(workspaceId) : Promise.resolve(new Map<string, string>()),
  ]);
  const chosen = choice.group;
  const byGroup = (result: UsageResult) => {
    const value = result[chosen];
    return value === null ? '(none)' : (names.get(value) ?? value);
  };
  const label = GROUPS.find((one) => one.value === choice.group)?.label.toLowerCase() ?? '';
  charts.setAttribute('aria-busy', 'false');
  replace(
    charts,
    stackedBars(
      `Requests by ${label}`,
      buckets.labels,
      seriesOf(buckets, byGroup, (result) => result.num_requests),
    ),
    stackedBars(
      `Tokens by ${label}`,
      buckets.labels,
      seriesOf(buckets, byGroup, (result) => result.total_tokens),
    ),
    stackedBars(
      `Output tokens by ${label}`,
      buckets.labels,
      seriesOf(buckets, byGroup, (result) => result.output_tokens),
    ),
    stackedBars(
      'Runs by status',
      runs.labels,
      seriesOf(
        runs,
        (result) => result.status,
        (result) => result.num_runs,
      ),
    ),
    stackedBars(
      'Failed runs by error',
      runs.labels,
      seriesOf(
        runs,
        (result) => (result.status === 'failed' ? (result.error_code ?? '(no code)') : null),
        (result) => result.num_runs,
      ),
    ),
  );
}

/** API keys by id, shown by name and prefix. */
async function apiKeyNames(workspaceId: string): Promise<Map<string, string>> {
  const keys = await api<List<ApiKey>>('GET', '/api-keys', { query: { workspace_id: workspaceId } });
  return new Map(keys.data.map((key) => [key.id, `${key.name} (${key.prefix}…)`]));
}

export const overviewPage: PageDefinition = { path: '/overview', title: 'Overview', draw };
