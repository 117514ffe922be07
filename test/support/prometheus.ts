/**
 * A strict reader of Prometheus's text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/), for tests of GET /metrics: no
 * parser of the format is among the packages this project may install, and a lenient one would
 * let a malformed scrape pass. It throws, naming the line, on anything Prometheus would refuse or
 * misread: a bad name or escape, a value that is not a float, a family's TYPE after its samples or
 * twice, a family's samples not together, a sample repeated, a counter below zero, and a histogram
 * whose buckets are not cumulative or whose `+Inf` bucket is not its count.
 */

export interface Sample {
  /** The sample's own name: a histogram's are `<family>_bucket`, `_sum` and `_count`. */
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface MetricFamily {
  name: string;
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  help: string | null;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

export function parsePrometheusText(text: string): Map<string, MetricFamily> {
  if (text.length > 0 && !text.endsWith('\n')) throw new Error('The exposition must end with a line feed');
  const families = new Map<string, MetricFamily>();
  /** Families whose samples have ended (another family's came after): theirs may not come again. */
  const closed = new Set<string>();
  let current: string | null = null;
  const seen = new Set<string>();
  const lines = text.split('\n');
  lines.pop();

  const family = (name: string, line: number): MetricFamily => {
    let found = families.get(name);
    if (!found) {
      found = { name, type: 'untyped', help: null, samples: [] };
      families.set(name, found);
    }
    if (current !== name) {
      if (current !== null) closed.add(current);
      if (closed.has(name)) throw new Error(`line ${line}: ${name}'s lines are not together`);
      current = name;
    }
    return found;
  };

  lines.forEach((raw, index) => {
    const line = index + 1;
    if (raw.trim() === '') return;
    if (raw.startsWith('#')) {
      const match = /^#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(raw);
      if (!match) return; // any other comment
      const [, keyword, name = '', rest = ''] = match;
      if (!METRIC_NAME.test(name)) throw new Error(`line ${line}: not a metric name: ${name}`);
      const target = family(name, line);
      if (keyword === 'HELP') {
        if (target.help !== null) throw new Error(`line ${line}: a second HELP for ${name}`);
        target.help = unescapeHelp(rest, line);
      } else {
        if (!TYPES.has(rest)) throw new Error(`line ${line}: not a type: ${rest}`);
        if (target.samples.length > 0) throw new Error(`line ${line}: ${name}'s TYPE comes after its samples`);
        if (target.type !== 'untyped' || seen.has(`type ${name}`))
          throw new Error(`line ${line}: a second TYPE for ${name}`);
        seen.add(`type ${name}`);
        target.type = rest as MetricFamily['type'];
      }
      return;
    }
    const sample = parseSample(raw, line);
    const owner = familyOf(sample.name, families);
    const target = family(owner, line);
    const key = `${sample.name}${JSON.stringify(Object.entries(sample.labels).sort())}`;
    if (seen.has(key)) throw new Error(`line ${line}: ${sample.name} repeats a series`);
    seen.add(key);
    target.samples.push(sample);
  });

  for (const found of families.values()) check(found);
  return families;
}

/** The family a sample belongs to: a histogram's `_bucket`, `_sum` and `_count` are its family's. */
function familyOf(name: string, families: Map<string, MetricFamily>): string {
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const base = name.slice(0, -suffix.length);
    const type = families.get(base)?.type;
    if (type === 'histogram' || (type === 'summary' && suffix !== '_bucket')) return base;
  }
  return name;
}

function parseSample(raw: string, line: number): Sample {
  const nameMatch = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(raw);
  if (!nameMatch?.[1]) throw new Error(`line ${line}: no metric name: ${raw}`);
  const name = nameMatch[1];
  let at = name.length;
  const labels: Record<string, string> = {};
  if (raw[at] === '{') {
    at++;
    for (;;) {
      if (raw[at] === '}') {
        at++;
        break;
      }
      const labelMatch = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(raw.slice(at));
      if (!labelMatch?.[1]) throw new Error(`line ${line}: a malformed label at column ${at + 1}: ${raw}`);
      const label = labelMatch[1];
      if (!LABEL_NAME.test(label) || label.startsWith('__'))
        throw new Error(`line ${line}: not a label name: ${label}`);
      if (label in labels) throw new Error(`line ${line}: the label ${label} twice`);
      at += labelMatch[0].length;
      let value = '';
      for (;;) {
        const c = raw[at];
        if (c === undefined) throw new Error(`line ${line}: an unterminated label value`);
        at++;
        if (c === '"') break;
        if (c === '\\') {
          const escaped = raw[at];
          at++;
          if (escaped === '\\') value += '\\';
          else if (escaped === '"') value += '"';
          else if (escaped === 'n') value += '\n';
          else throw new Error(`line ${line}: an invalid escape \\${escaped ?? ''} in a label value`);
        } else value += c;
      }
      labels[label] = value;
      if (raw[at] === ',') at++;
      else if (raw[at] !== '}') throw new Error(`line ${line}: expected , or } at column ${at + 1}`);
    }
  }
  const rest = raw.slice(at);
  const valueMatch = /^[ \t]+(\S+)(?:[ \t]+(-?\d+))?[ \t]*$/.exec(rest);
  if (!valueMatch?.[1]) throw new Error(`line ${line}: no value: ${raw}`);
  return { name, labels, value: parseFloatValue(valueMatch[1], line) };
}

function parseFloatValue(text: string, line: number): number {
  if (text === '+Inf' || text === 'Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) throw new Error(`line ${line}: not a float: ${text}`);
  return Number(text);
}

function unescapeHelp(text: string, line: number): string {
  return text.replace(/\\(.?)/g, (_, c: string) => {
    if (c === '\\') return '\\';
    if (c === 'n') return '\n';
    throw new Error(`line ${line}: an invalid escape \\${c} in HELP`);
  });
}

function check(family: MetricFamily): void {
  if (family.type === 'counter') {
    for (const sample of family.samples) {
      if (!(sample.value >= 0)) throw new Error(`${family.name}: a counter at ${sample.value}`);
    }
  }
  if (family.type !== 'histogram') return;
  const series = new Map<string, { buckets: [number, number][]; count?: number; sum?: number }>();
  for (const sample of family.samples) {
    const { le, ...rest } = sample.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const entry = series.get(key) ?? { buckets: [] };
    series.set(key, entry);
    if (sample.name === `${family.name}_bucket`) {
      if (le === undefined) throw new Error(`${family.name}: a bucket without le`);
      entry.buckets.push([parseFloatValue(le, 0), sample.value]);
    } else if (sample.name === `${family.name}_count`) entry.count = sample.value;
    else if (sample.name === `${family.name}_sum`) entry.sum = sample.value;
    else throw new Error(`${family.name}: a histogram's sample named ${sample.name}`);
  }
  for (const [key, entry] of series) {
    const bounds = entry.buckets.map(([bound]) => bound);
    if (bounds.some((bound, index) => index > 0 && bound <= (bounds[index - 1] ?? -Infinity)))
      throw new Error(`${family.name}${key}: buckets out of order`);
    if (entry.buckets.some(([, count], index) => index > 0 && count < (entry.buckets[index - 1]?.[1] ?? 0)))
      throw new Error(`${family.name}${key}: buckets are not cumulative`);
    const last = entry.buckets.at(-1);
    if (!last || last[0] !== Infinity) throw new Error(`${family.name}${key}: no +Inf bucket`);
    if (entry.count !== last[1]) throw new Error(`${family.name}${key}: _count is not the +Inf bucket`);
    if (entry.sum === undefined) throw new Error(`${family.name}${key}: no _sum`);
  }
}

/** The samples of `family` named `name` (the family's by default) whose labels include `labels`. */
export function samplesOf(
  families: Map<string, MetricFamily>,
  family: string,
  labels: Record<string, string> = {},
  name = family,
): Sample[] {
  return (families.get(family)?.samples ?? []).filter(
    (sample) =>
      sample.name === name && Object.entries(labels).every(([label, value]) => sample.labels[label] === value),
  );
}

/** The sum of those samples' values: 0 when there are none. */
export function total(
  families: Map<string, MetricFamily>,
  family: string,
  labels: Record<string, string> = {},
  name = family,
): number {
  return samplesOf(families, family, labels, name).reduce((sum, sample) => sum + sample.value, 0);
}
