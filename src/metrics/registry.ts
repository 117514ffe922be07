/**
 * Counters, gauges and histograms kept in memory and written in Prometheus's text exposition
 * format, version 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
 *
 * Recording is on the request path, so it is a Map lookup and an addition: a family keys its series
 * by their label values joined, and a histogram finds its bucket by a scan of a dozen bounds. What
 * is costly (sorting, cumulating buckets, escaping) happens when the registry is scraped. A family
 * keeps at most `maxSeries` series: past it, a new combination of label values is counted under
 * every label `other`, so that a caller's values, however many, never grow the memory or the
 * scrape without bound.
 *
 * Figures recorded elsewhere (another isolate's, on Workers: runtime/workers/metrics.ts) come in
 * through `merge` and go out through `take`, so that one writer serves every runtime.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram';

/** The label values of a sample, in the order of its family's label names. */
export type LabelValues = readonly string[];

/** The series a family keeps at most unless it says otherwise. */
export const DEFAULT_MAX_SERIES = 2000;

/** The value every label takes in the series that stands for those past a family's cap. */
export const OTHER = 'other';

/** Latency buckets in seconds: from a local provider's few milliseconds to a long answer's minutes. */
export const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120] as const;

/** Database latency buckets in seconds: from a cached read's tens of microseconds to a stalled commit's seconds. */
export const DATABASE_SECONDS_BUCKETS = [
  0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5,
] as const;

/** One series read out of a family: a counter's or gauge's value, or a histogram's buckets. */
export type CollectedPoint =
  | { value: number }
  | { histogram: { bounds: readonly number[]; counts: readonly number[]; sum: number; count: number } };

/** A family read out of the registry (Registry.collect). */
export interface CollectedFamily {
  name: string;
  help: string;
  type: MetricType;
  series: (CollectedPoint & { labels: Record<string, string> })[];
}

/** A family's series as `collect` reads them. */
export type CollectedSeries = CollectedFamily['series'][number];

interface FamilyOptions {
  help: string;
  labelNames?: readonly string[];
  maxSeries?: number;
  /**
   * Labels whose values the recorder bounds (BoundedValues) before recording: figures merged in are
   * bounded by the same, so that many sources together keep to what one would.
   */
  bounded?: Readonly<Record<string, BoundedValues>>;
}

abstract class Family<S> {
  readonly help: string;
  readonly labelNames: readonly string[];
  readonly #series = new Map<string, { labels: LabelValues; value: S }>();
  readonly #maxSeries: number;
  readonly #bounded: Readonly<Record<string, BoundedValues>>;
  /** The key of the series that stands for those past the cap. */
  readonly #otherKey: string;

  constructor(
    readonly name: string,
    readonly type: MetricType,
    options: FamilyOptions,
  ) {
    if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(name)) throw new Error(`Not a metric name: ${name}`);
    this.help = options.help;
    this.labelNames = options.labelNames ?? [];
    for (const label of this.labelNames) {
      if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(label) || label.startsWith('__') || label === 'le')
        throw new Error(`Not a label name of ${name}: ${label}`);
    }
    this.#maxSeries = options.maxSeries ?? DEFAULT_MAX_SERIES;
    this.#bounded = options.bounded ?? {};
    this.#otherKey = this.labelNames.map(() => OTHER).join('\u0000');
  }

  protected abstract empty(): S;

  /** The series of `labels`, made on first use (or the `other` one past the cap). */
  protected series(labels: LabelValues): S {
    return this.#entry(labels).value;
  }

  #entry(labels: LabelValues): { labels: LabelValues; value: S } {
    if (labels.length !== this.labelNames.length)
      throw new Error(`${this.name} takes ${this.labelNames.length} label values, not ${labels.length}`);
    const key = labels.length === 1 ? (labels[0] ?? '') : labels.join('\u0000');
    const found = this.#series.get(key);
    if (found) return found;
    // The `other` series is not one of the `maxSeries`: figures merged in may bring it before the rest.
    if (this.#series.size - (this.#series.has(this.#otherKey) ? 1 : 0) >= this.#maxSeries) return this.#other();
    const entry = { labels: [...labels], value: this.empty() };
    this.#series.set(key, entry);
    return entry;
  }

  /** The series that stands for those past the cap: one more than the cap, made on first use. */
  #other(): { labels: LabelValues; value: S } {
    const labels = this.labelNames.map(() => OTHER);
    const key = this.#otherKey;
    const found = this.#series.get(key);
    if (found) return found;
    const entry = { labels, value: this.empty() };
    this.#series.set(key, entry);
    return entry;
  }

  /**
   * Adds series collected elsewhere (another registry's `collect` or `take`) to these, by their
   * labels, bounded and capped as recording is; answers the series it changed, as they now stand.
   * A point of the wrong kind (a histogram's of other bounds) is left out.
   */
  merge(collected: readonly CollectedSeries[]): CollectedSeries[] {
    const changed = new Set<{ labels: LabelValues; value: S }>();
    for (const point of collected) {
      const add = this.adding(point);
      if (!add) continue;
      const labels = this.labelNames.map((name) => {
        const value = point.labels[name] ?? '';
        return this.#bounded[name]?.of(value) ?? value;
      });
      const entry = this.#entry(labels);
      add(entry.value);
      changed.add(entry);
    }
    return [...changed].map((entry) => this.#collected(entry));
  }

  /** What adds `point` to a series; null when it is not of this family's kind. */
  protected abstract adding(point: CollectedPoint): ((series: S) => void) | null;

  /** Forgets every series: what is recorded next counts from 0. */
  clear(): void {
    this.#series.clear();
  }

  /** How many series the family holds. */
  get size(): number {
    return this.#series.size;
  }

  /** The series in label order, so that a scrape reads the same from one time to the next. */
  protected sorted(): { labels: LabelValues; value: S }[] {
    return [...this.#series.values()].sort((a, b) => compareLabels(a.labels, b.labels));
  }

  /** The family's lines: its HELP and TYPE, then its samples. */
  write(lines: string[]): void {
    lines.push(`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} ${this.type}`);
    for (const { labels, value } of this.sorted()) this.writeSeries(lines, labels, value);
  }

  protected abstract writeSeries(lines: string[], labels: LabelValues, value: S): void;

  /** The family's series as values, for an export in another format (otlp.ts). */
  collect(): CollectedFamily {
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      series: this.sorted().map((entry) => this.#collected(entry)),
    };
  }

  #collected({ labels, value }: { labels: LabelValues; value: S }): CollectedSeries {
    return {
      labels: Object.fromEntries(this.labelNames.map((label, index) => [label, labels[index] ?? ''])),
      ...this.point(value),
    };
  }

  protected abstract point(value: S): CollectedPoint;

  protected sample(lines: string[], name: string, labels: LabelValues, value: number, extra?: [string, string]): void {
    const pairs = this.labelNames.map((label, index) => `${label}="${escapeLabel(labels[index] ?? '')}"`);
    if (extra) pairs.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
    lines.push(`${name}${pairs.length > 0 ? `{${pairs.join(',')}}` : ''} ${formatValue(value)}`);
  }
}

/** A count that only goes up (its name ends in `_total`, as Prometheus's convention has it). */
export class Counter extends Family<{ value: number }> {
  constructor(name: string, options: FamilyOptions) {
    super(name, 'counter', options);
  }

  protected empty() {
    return { value: 0 };
  }

  protected point(series: { value: number }): CollectedPoint {
    return { value: series.value };
  }

  protected adding(point: CollectedPoint) {
    if (!('value' in point) || !(point.value >= 0) || !Number.isFinite(point.value)) return null;
    return (series: { value: number }) => void (series.value += point.value);
  }

  inc(labels: LabelValues = [], by = 1): void {
    if (!(by >= 0) || !Number.isFinite(by)) throw new Error(`${this.name} counts up by a finite number, not ${by}`);
    this.series(labels).value += by;
  }

  protected writeSeries(lines: string[], labels: LabelValues, series: { value: number }): void {
    this.sample(lines, this.name, labels, series.value);
  }
}

/** A value that is set, read as it was last set (at a scrape, by the scrape's own reads). */
export class Gauge extends Family<{ value: number }> {
  constructor(name: string, options: FamilyOptions) {
    super(name, 'gauge', options);
  }

  protected empty() {
    return { value: 0 };
  }

  set(labels: LabelValues, value: number): void {
    this.series(labels).value = value;
  }

  /** A gauge merged in is set: the latest reading stands. */
  protected adding(point: CollectedPoint) {
    if (!('value' in point)) return null;
    return (series: { value: number }) => void (series.value = point.value);
  }

  protected point(series: { value: number }): CollectedPoint {
    return { value: series.value };
  }

  protected writeSeries(lines: string[], labels: LabelValues, series: { value: number }): void {
    this.sample(lines, this.name, labels, series.value);
  }
}

interface HistogramSeries {
  /** The observations of each bucket alone (not cumulated), the last one past the largest bound. */
  counts: number[];
  sum: number;
}

/** Observations counted in buckets by upper bound, with their sum and count. */
export class Histogram extends Family<HistogramSeries> {
  readonly #bounds: readonly number[];

  constructor(name: string, options: FamilyOptions & { buckets: readonly number[] }) {
    super(name, 'histogram', options);
    const { buckets } = options;
    if (buckets.length === 0 || buckets.some((bound, index) => index > 0 && bound <= (buckets[index - 1] ?? 0)))
      throw new Error(`${name}'s buckets must be increasing`);
    this.#bounds = buckets;
  }

  protected empty(): HistogramSeries {
    return { counts: new Array<number>(this.#bounds.length + 1).fill(0), sum: 0 };
  }

  observe(labels: LabelValues, value: number): void {
    if (Number.isNaN(value)) return;
    const series = this.series(labels);
    let bucket = 0;
    while (bucket < this.#bounds.length && value > (this.#bounds[bucket] ?? Infinity)) bucket++;
    series.counts[bucket] = (series.counts[bucket] ?? 0) + 1;
    series.sum += value;
  }

  protected adding(point: CollectedPoint) {
    if (!('histogram' in point)) return null;
    const { bounds, counts, sum } = point.histogram;
    const fits =
      bounds.length === this.#bounds.length &&
      bounds.every((bound, index) => bound === this.#bounds[index]) &&
      counts.length === bounds.length + 1 &&
      counts.every((count) => count >= 0 && Number.isFinite(count)) &&
      Number.isFinite(sum);
    if (!fits) return null;
    return (series: HistogramSeries) => {
      for (const [index, count] of counts.entries()) series.counts[index] = (series.counts[index] ?? 0) + count;
      series.sum += sum;
    };
  }

  /** The buckets as counted, each alone (not cumulated), the last one past the largest bound. */
  protected point(series: HistogramSeries): CollectedPoint {
    const counts = [...series.counts];
    return {
      histogram: { bounds: this.#bounds, counts, sum: series.sum, count: counts.reduce((a, b) => a + b, 0) },
    };
  }

  protected writeSeries(lines: string[], labels: LabelValues, series: HistogramSeries): void {
    let cumulative = 0;
    this.#bounds.forEach((bound, index) => {
      cumulative += series.counts[index] ?? 0;
      this.sample(lines, `${this.name}_bucket`, labels, cumulative, ['le', formatValue(bound)]);
    });
    cumulative += series.counts[this.#bounds.length] ?? 0;
    this.sample(lines, `${this.name}_bucket`, labels, cumulative, ['le', '+Inf']);
    this.sample(lines, `${this.name}_sum`, labels, series.sum);
    this.sample(lines, `${this.name}_count`, labels, cumulative);
  }
}

type AnyFamily = Counter | Gauge | Histogram;

/**
 * The families of one app, by name. `counter`, `gauge` and `histogram` declare a family (once: a
 * second declaration of a name is a mistake); `inc`, `set` and `observe` record into a declared one
 * by its name, for a caller that holds the registry and not the family.
 */
export class Registry {
  readonly #families = new Map<string, AnyFamily>();

  counter(name: string, options: FamilyOptions): Counter {
    return this.#add(new Counter(name, options));
  }

  gauge(name: string, options: FamilyOptions): Gauge {
    return this.#add(new Gauge(name, options));
  }

  histogram(name: string, options: FamilyOptions & { buckets: readonly number[] }): Histogram {
    return this.#add(new Histogram(name, options));
  }

  inc(name: string, labels: LabelValues = [], by = 1): void {
    this.#family(name, Counter).inc(labels, by);
  }

  set(name: string, labels: LabelValues, value: number): void {
    this.#family(name, Gauge).set(labels, value);
  }

  observe(name: string, value: number, labels: LabelValues = []): void {
    this.#family(name, Histogram).observe(labels, value);
  }

  /** Every family's series as values, in the order they were declared. */
  collect(): CollectedFamily[] {
    return [...this.#families.values()].map((family) => family.collect());
  }

  /**
   * Adds families collected elsewhere to the declared ones of the same names and types (others are
   * left out); answers the series that changed, as they now stand, by family.
   */
  merge(families: readonly CollectedFamily[]): CollectedFamily[] {
    const changed: CollectedFamily[] = [];
    for (const collected of families) {
      const family = this.#families.get(collected.name);
      if (family?.type !== collected.type) continue;
      const series = family.merge(collected.series);
      if (series.length > 0) changed.push({ name: family.name, help: family.help, type: family.type, series });
    }
    return changed;
  }

  /**
   * The counters' and histograms' series recorded since the last take (or the start), each family
   * then started afresh: a delta, for figures kept elsewhere (Workers). Gauges, set at a scrape, are
   * not taken. Synchronous: nothing is recorded between the read and the fresh start.
   */
  take(): CollectedFamily[] {
    const taken: CollectedFamily[] = [];
    for (const family of this.#families.values()) {
      if (family.type === 'gauge' || family.size === 0) continue;
      taken.push(family.collect());
      family.clear();
    }
    return taken;
  }

  /** Every family in the text format, in the order they were declared; ends with a newline. */
  render(): string {
    const lines: string[] = [];
    for (const family of this.#families.values()) family.write(lines);
    return `${lines.join('\n')}\n`;
  }

  #add<F extends AnyFamily>(family: F): F {
    if (this.#families.has(family.name)) throw new Error(`The metric ${family.name} is declared twice`);
    this.#families.set(family.name, family);
    return family;
  }

  #family<F extends AnyFamily>(name: string, kind: abstract new (...args: never[]) => F): F {
    const family = this.#families.get(name);
    if (!(family instanceof kind)) throw new Error(`No ${kind.name.toLowerCase()} is declared as ${name}`);
    return family;
  }
}

/**
 * A label's values as they come, the first `max` of them; the rest are `other`. For values a
 * caller chooses (a model's name): the series stay few whatever is sent.
 */
export class BoundedValues {
  readonly #seen = new Set<string>();

  constructor(readonly max: number) {}

  of(value: string): string {
    // `other` takes no place of its own: figures merged in may bring it before the values it stands for.
    if (value === OTHER || this.#seen.has(value)) return value;
    if (this.#seen.size >= this.max) return OTHER;
    this.#seen.add(value);
    return value;
  }
}

function compareLabels(a: LabelValues, b: LabelValues): number {
  for (let index = 0; index < a.length; index++) {
    const x = a[index] ?? '';
    const y = b[index] ?? '';
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}

/** A sample's value: integers as they are, +Inf, -Inf and NaN as the format writes them. */
function formatValue(value: number): string {
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  if (Number.isNaN(value)) return 'NaN';
  return String(value);
}

/** In a label value, a backslash, a double quote and a line feed are escaped (the format's rule). */
const escapeLabel = (value: string) => value.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`));

/** In HELP text, a backslash and a line feed are. */
const escapeHelp = (text: string) => text.replace(/[\\\n]/g, (c) => (c === '\n' ? '\\n' : '\\\\'));
