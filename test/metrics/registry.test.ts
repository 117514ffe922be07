import { describe, expect, it } from 'vitest';
import { gatewayMetrics, MAX_MODELS } from '../../src/metrics/gateway';
import { OTHER, Registry } from '../../src/metrics/registry';
import { parsePrometheusText, samplesOf, total } from '../support/prometheus';

/**
 * The registry writes what a strict reader of the text format accepts, with the figures recorded;
 * the reader itself refuses what Prometheus would (so that the scrape tests can fail).
 */

describe('the registry', () => {
  it('writes counters, gauges and histograms that the text format reads back', () => {
    const registry = new Registry();
    const counter = registry.counter('t_requests_total', { help: 'Requests.', labelNames: ['route', 'status'] });
    const gauge = registry.gauge('t_depth', { help: 'Depth.' });
    const histogram = registry.histogram('t_seconds', { help: 'Seconds.', labelNames: ['key'], buckets: [0.1, 1] });
    counter.inc(['/v1/runs/:run_id', '200']);
    counter.inc(['/v1/runs/:run_id', '200'], 2);
    counter.inc(['/v1/runs', '429']);
    gauge.set([], 7);
    for (const seconds of [0.05, 0.5, 0.5, 3]) histogram.observe(['vk_1'], seconds);

    const families = parsePrometheusText(registry.render());
    expect(families.get('t_requests_total')).toMatchObject({ type: 'counter', help: 'Requests.' });
    expect(total(families, 't_requests_total', { route: '/v1/runs/:run_id', status: '200' })).toBe(3);
    expect(total(families, 't_requests_total', { status: '429' })).toBe(1);
    expect(total(families, 't_depth')).toBe(7);
    const buckets = samplesOf(families, 't_seconds', { key: 'vk_1' }, 't_seconds_bucket').map((s) => [
      s.labels.le,
      s.value,
    ]);
    expect(buckets).toEqual([
      ['0.1', 1],
      ['1', 3],
      ['+Inf', 4],
    ]);
    expect(total(families, 't_seconds', {}, 't_seconds_count')).toBe(4);
    expect(total(families, 't_seconds', {}, 't_seconds_sum')).toBeCloseTo(4.05);
  });

  it('escapes label values and help text as the format says', () => {
    const registry = new Registry();
    registry.counter('t_total', { help: 'A \\ and\na line.', labelNames: ['model'] }).inc(['a "quoted"\\ name\nnext']);
    const text = registry.render();
    expect(text).toContain('# HELP t_total A \\\\ and\\na line.');
    expect(text).toContain('t_total{model="a \\"quoted\\"\\\\ name\\nnext"} 1');
    const families = parsePrometheusText(text);
    expect(samplesOf(families, 't_total')[0]?.labels.model).toBe('a "quoted"\\ name\nnext');
    expect(families.get('t_total')?.help).toBe('A \\ and\na line.');
  });

  it('counts series past a family cap under other, so a caller cannot grow it without bound', () => {
    const registry = new Registry();
    const counter = registry.counter('t_total', { help: 'x', labelNames: ['a', 'b'], maxSeries: 3 });
    for (let i = 0; i < 10; i++) counter.inc([`a${i}`, 'b']);
    const families = parsePrometheusText(registry.render());
    expect(samplesOf(families, 't_total')).toHaveLength(4);
    expect(total(families, 't_total', { a: OTHER, b: OTHER })).toBe(7);
  });

  it('refuses what would write an invalid exposition', () => {
    const registry = new Registry();
    expect(() => registry.counter('1bad', { help: 'x' })).toThrow(/metric name/);
    expect(() => registry.counter('t_total', { help: 'x', labelNames: ['le'] })).toThrow(/label name/);
    registry.counter('t_total', { help: 'x', labelNames: ['a'] });
    expect(() => registry.counter('t_total', { help: 'x' })).toThrow(/twice/);
    expect(() => registry.inc('t_total', ['a', 'b'])).toThrow(/1 label values/);
    expect(() => registry.inc('t_total', ['a'], -1)).toThrow(/counts up/);
    expect(() => registry.observe('t_total', 1)).toThrow(/No histogram/);
    expect(() => registry.histogram('t_h', { help: 'x', buckets: [1, 1] })).toThrow(/increasing/);
  });
});

describe('merging figures taken elsewhere (Workers: each isolate hands a delta to one aggregate)', () => {
  /** A registry of the families the tests merge, as each isolate and the aggregate declare them. */
  function declared(maxSeries?: number) {
    const registry = new Registry();
    const counter = registry.counter('t_total', { help: 'x', labelNames: ['route'], maxSeries });
    const gauge = registry.gauge('t_depth', { help: 'x' });
    const histogram = registry.histogram('t_seconds', { help: 'x', labelNames: ['key'], buckets: [0.1, 1] });
    return { registry, counter, gauge, histogram };
  }

  it('adds counters, and histograms bucket by bucket with their sum and count, and answers what changed', () => {
    const sums = declared();
    sums.counter.inc(['/a'], 2);
    sums.histogram.observe(['vk'], 0.05);
    const isolate = declared();
    isolate.counter.inc(['/a'], 3);
    isolate.counter.inc(['/b']);
    for (const seconds of [0.5, 3]) isolate.histogram.observe(['vk'], seconds);
    isolate.gauge.set([], 7);

    const changed = sums.registry.merge(isolate.registry.collect());
    expect(changed.map((family) => [family.name, family.series.length])).toEqual([
      ['t_total', 2],
      ['t_depth', 1],
      ['t_seconds', 1],
    ]);
    expect(changed[0]?.series).toContainEqual({ labels: { route: '/a' }, value: 5 });
    const families = parsePrometheusText(sums.registry.render());
    expect(total(families, 't_total', { route: '/a' })).toBe(5);
    expect(total(families, 't_total', { route: '/b' })).toBe(1);
    expect(total(families, 't_depth')).toBe(7);
    const buckets = samplesOf(families, 't_seconds', {}, 't_seconds_bucket').map((s) => [s.labels.le, s.value]);
    expect(buckets).toEqual([
      ['0.1', 1],
      ['1', 2],
      ['+Inf', 3],
    ]);
    expect(total(families, 't_seconds', {}, 't_seconds_count')).toBe(3);
    expect(total(families, 't_seconds', {}, 't_seconds_sum')).toBeCloseTo(3.55);
  });

  it('takes what was recorded since the last take, and starts afresh: deltas that add up to every figure once', () => {
    const isolate = declared();
    const sums = declared();
    isolate.counter.inc(['/a'], 2);
    isolate.histogram.observe(['vk'], 0.5);
    isolate.gauge.set([], 7);
    const first = isolate.registry.take();
    // Gauges are read at a scrape, not added up: they are not taken.
    expect(first.map((family) => family.name)).toEqual(['t_total', 't_seconds']);
    expect(isolate.registry.take()).toEqual([]);
    isolate.counter.inc(['/a']);
    const second = isolate.registry.take();
    expect(second).toEqual([
      { name: 't_total', help: 'x', type: 'counter', series: [{ labels: { route: '/a' }, value: 1 }] },
    ]);
    sums.registry.merge(first);
    sums.registry.merge(second);
    const families = parsePrometheusText(sums.registry.render());
    expect(total(families, 't_total', { route: '/a' })).toBe(3);
    expect(total(families, 't_seconds', {}, 't_seconds_count')).toBe(1);
  });

  it("keeps to the family's cap and to the recorder's bounded values, however many sources merge in", async () => {
    const sums = declared(3);
    for (let source = 0; source < 4; source++) {
      const isolate = declared(3);
      for (let i = 0; i < 3; i++) isolate.counter.inc([`/route-${source}-${i}`]);
      sums.registry.merge(isolate.registry.take());
    }
    const families = parsePrometheusText(sums.registry.render());
    expect(samplesOf(families, 't_total')).toHaveLength(4);
    expect(total(families, 't_total', { route: OTHER })).toBe(9);
    expect(total(families, 't_total')).toBe(12);

    // Each isolate names the first MAX_MODELS models it sees; the aggregate, the first it is handed.
    const aggregate = gatewayMetrics();
    for (let source = 0; source < 2; source++) {
      const isolate = gatewayMetrics();
      for (let i = 0; i < MAX_MODELS; i++) isolate.tokens('run', `model-${source}-${i}`, 1, 0);
      aggregate.merge(isolate.take());
    }
    const tokens = samplesOf(parsePrometheusText((await aggregate.render()) ?? ''), 'gateway_tokens_total', {
      type: 'prompt',
    });
    expect(tokens).toHaveLength(MAX_MODELS + 1);
    expect(tokens.find((sample) => sample.labels.model === OTHER)?.value).toBe(MAX_MODELS);
    expect(tokens.reduce((sum, sample) => sum + sample.value, 0)).toBe(2 * MAX_MODELS);
  });

  it('reads the sums into a fresh registry as they are, their other series included (a Workers scrape renders them so)', async () => {
    const sums = declared(3);
    // Route names after `other` in the collected order, so that it is merged first.
    for (let i = 0; i < 5; i++) sums.counter.inc([`z-${i}`]);
    const view = declared(3);
    view.registry.merge(sums.registry.collect());
    expect(view.registry.collect()).toEqual(sums.registry.collect());

    // `other` sorts before some model names: it takes none of the MAX_MODELS places they have.
    const aggregate = gatewayMetrics();
    for (let i = 0; i <= MAX_MODELS; i++) aggregate.tokens('run', `z-model-${i}`, 1, 0);
    const rendered = gatewayMetrics();
    rendered.merge((await aggregate.collect()) ?? []);
    expect(await rendered.render()).toBe(await aggregate.render());
  });

  it('leaves out what does not fit: a family not declared, of another type, or a histogram of other bounds', () => {
    const sums = declared();
    const other = new Registry();
    other.counter('t_unknown_total', { help: 'x' }).inc();
    other.gauge('t_total', { help: 'x', labelNames: ['route'] }).set(['/a'], 5);
    other.histogram('t_seconds', { help: 'x', labelNames: ['key'], buckets: [0.1, 2] }).observe(['vk'], 1);
    expect(sums.registry.merge(other.collect())).toEqual([]);
    expect(sums.registry.collect().every((family) => family.series.length === 0)).toBe(true);
  });
});

describe("the gateway's metrics", () => {
  it('name the first models seen and count the rest as other', () => {
    const metrics = gatewayMetrics();
    for (let i = 0; i <= MAX_MODELS; i++) metrics.tokens('run', `model-${i}`, 1, 2);
    return metrics.render().then((text) => {
      const families = parsePrometheusText(text ?? '');
      expect(total(families, 'gateway_tokens_total', { model: 'model-0', type: 'completion' })).toBe(2);
      expect(total(families, 'gateway_tokens_total', { model: OTHER, type: 'prompt' })).toBe(1);
      expect(samplesOf(families, 'gateway_tokens_total', { type: 'prompt' })).toHaveLength(MAX_MODELS + 1);
    });
  });

  it("time a provider call's first byte and its end once, on the clock given", async () => {
    let now = 1000;
    const metrics = gatewayMetrics({ now: () => now });
    const call = metrics.providerCall('vk_a');
    now += 40;
    call.firstByte();
    now += 260;
    call.end('ok');
    call.end('incomplete');
    const families = parsePrometheusText((await metrics.render()) ?? '');
    expect(total(families, 'gateway_provider_calls_total', { virtual_key_id: 'vk_a' })).toBe(1);
    expect(total(families, 'gateway_provider_first_byte_seconds', {}, 'gateway_provider_first_byte_seconds_sum')).toBe(
      0.04,
    );
    const duration = 'gateway_provider_call_duration_seconds';
    expect(total(families, duration, { outcome: 'ok' }, `${duration}_sum`)).toBe(0.3);
    expect(total(families, duration, { outcome: 'incomplete' }, `${duration}_count`)).toBe(0);
  });
});

describe('the strict reader', () => {
  const valid = '# HELP a_total A.\n# TYPE a_total counter\na_total{x="1"} 2\n';

  it('reads a valid exposition', () => {
    expect(total(parsePrometheusText(valid), 'a_total', { x: '1' })).toBe(2);
  });

  it.each([
    ['no final line feed', valid.trimEnd()],
    ['a bad metric name', '1a 2\n'],
    ['an unterminated label', 'a{x="1} 2\n'],
    ['an invalid escape', 'a{x="\\t"} 2\n'],
    ['a value that is not a float', 'a 2x\n'],
    ['a label twice', 'a{x="1",x="2"} 2\n'],
    ['a repeated series', 'a{x="1"} 2\na{x="1"} 3\n'],
    ['TYPE after samples', 'a 1\n# TYPE a gauge\n'],
    ['a family apart', 'a 1\nb 1\na{x="2"} 1\n'],
    ['a negative counter', '# TYPE a counter\na -1\n'],
    ['buckets not cumulative', '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n'],
    ['no +Inf bucket', '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n'],
    ['a count that is not +Inf', '# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 1\n'],
  ])('refuses %s', (_, text) => {
    expect(() => parsePrometheusText(text)).toThrow();
  });
});
