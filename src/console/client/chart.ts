import { h, svg } from './dom';

/**
 * A stacked bar chart drawn as inline SVG: one bar per bucket of time, one colour per series (a
 * model, a virtual key, an API key). No library: this is all the console draws. The figures are in
 * a table beside it, for a screen reader and for anyone who wants the numbers.
 */

export interface Series {
  name: string;
  values: number[];
}

/** Colours at least 3:1 against the white background (WCAG 1.4.11), told apart by hue and lightness. */
const PALETTE = ['#1f5fbf', '#c2410c', '#15803d', '#7e22ce', '#b91c1c', '#0f766e', '#a16207', '#475569'];
const OTHERS = 'others';

const WIDTH = 640;
const HEIGHT = 220;
const LEFT = 56;
const BOTTOM = 24;
const TOP = 8;

/** At most PALETTE.length series: the largest, and the rest added up as "others". */
export function topSeries(series: Series[]): Series[] {
  const total = (one: Series) => one.values.reduce((sum, value) => sum + value, 0);
  const sorted = [...series].sort((a, b) => total(b) - total(a));
  if (sorted.length <= PALETTE.length) return sorted;
  const kept = sorted.slice(0, PALETTE.length - 1);
  const rest = sorted.slice(PALETTE.length - 1);
  const values = rest[0]?.values.map((_, index) => rest.reduce((sum, one) => sum + (one.values[index] ?? 0), 0)) ?? [];
  return [...kept, { name: OTHERS, values }];
}

export function stackedBars(title: string, labels: string[], allSeries: Series[]): HTMLElement {
  const series = topSeries(allSeries);
  const totals = labels.map((_, index) => series.reduce((sum, one) => sum + (one.values[index] ?? 0), 0));
  const grandTotal = totals.reduce((sum, value) => sum + value, 0);
  const max = niceCeiling(Math.max(0, ...totals));
  const plotWidth = WIDTH - LEFT;
  const plotHeight = HEIGHT - TOP - BOTTOM;
  const slot = plotWidth / Math.max(1, labels.length);
  const barWidth = Math.max(1, slot * 0.7);
  const y = (value: number) => TOP + plotHeight - (max === 0 ? 0 : (value / max) * plotHeight);

  const titleId = `chart-${title.replace(/\W+/g, '-').toLowerCase()}`;
  const chart = svg(
    'svg',
    {
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      role: 'img',
      'aria-labelledby': titleId,
      class: 'chart',
      'data-total': grandTotal,
    },
    svg('title', { id: titleId }, `${title}: ${grandTotal.toLocaleString()} in all`),
  );
  for (const tick of [0, max / 2, max]) {
    chart.append(
      svg('line', { x1: LEFT, x2: WIDTH, y1: y(tick), y2: y(tick), class: 'grid' }),
      svg('text', { x: LEFT - 6, y: y(tick) + 4, 'text-anchor': 'end', class: 'axis' }, compact(tick)),
    );
  }
  labels.forEach((label, index) => {
    let base = 0;
    const x = LEFT + index * slot + (slot - barWidth) / 2;
    series.forEach((one, seriesIndex) => {
      const value = one.values[index] ?? 0;
      if (value === 0) return;
      chart.append(
        svg(
          'rect',
          { x, y: y(base + value), width: barWidth, height: y(base) - y(base + value), fill: PALETTE[seriesIndex] },
          svg('title', {}, `${one.name}, ${label}: ${value.toLocaleString()}`),
        ),
      );
      base += value;
    });
    // A label under every few bars: as many as fit.
    const every = Math.ceil(labels.length / 8);
    if (index % every === 0) {
      chart.append(svg('text', { x: x + barWidth / 2, y: HEIGHT - 6, 'text-anchor': 'middle', class: 'axis' }, label));
    }
  });

  const legend = h(
    'ul',
    { class: 'legend', 'aria-label': `${title}: series` },
    ...series.map((one, index) =>
      h('li', {}, h('span', { class: `swatch swatch-${index}`, 'aria-hidden': 'true' }), one.name),
    ),
  );
  const table = h(
    'table',
    {},
    h('caption', {}, `${title} by series`),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Series'), h('th', { scope: 'col' }, 'Total'))),
    h(
      'tbody',
      {},
      ...series.map((one) =>
        h(
          'tr',
          {},
          h('th', { scope: 'row' }, one.name),
          h('td', {}, one.values.reduce((sum, value) => sum + value, 0).toLocaleString()),
        ),
      ),
    ),
  );
  return h(
    'figure',
    { class: 'chart-figure' },
    h('figcaption', {}, h('strong', {}, title), ` · ${grandTotal.toLocaleString()} in all`),
    chart,
    series.length > 0 ? legend : h('p', { class: 'hint' }, 'Nothing in this period.'),
    series.length > 0 ? h('details', {}, h('summary', {}, 'Figures'), table) : null,
  );
}

/** 1, 2 or 5 times a power of ten, at least `value`. */
function niceCeiling(value: number): number {
  if (value <= 0) return 0;
  const power = 10 ** Math.floor(Math.log10(value));
  const step = [1, 2, 5, 10].find((factor) => factor * power >= value) ?? 10;
  return step * power;
}

function compact(value: number): string {
  return Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 }).format(value);
}
